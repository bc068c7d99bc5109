"""The phases of a job, each bounded by ``--timeout``: none can run unbounded.

A job passes through set-up phases before its first exchange, in the launcher (loading the
graph, partitioning it, checking the partition set, estimating memory, planning the exchanges)
and in each rank (starting, joining the job, setting up its part and model). Each phase may take
``--timeout`` seconds, the bound every exchange of the job has; the phase that overruns stops the
whole job in one line naming the phase, the seconds and the fix, with exit code 2, and no
process of the job is left.

- In the launcher, :func:`bounded` runs a phase under an alarm (``SIGALRM``): the phase is
  interrupted at its deadline where Python code runs (again every :data:`REPEAT_SECONDS`, should
  code that ignores exceptions, such as a native callback, take the first), and the command fails
  with one line. Native
  code that does not return to Python within :data:`HARD_SECONDS` more (a long numba or numpy
  call) is stopped by a thread that prints the same line and exits the process (its zygote and
  ranks die with it, :mod:`commgraph.lifetime`).
- Each rank writes the phase it enters into the job's store (:meth:`World.report_phase
  <commgraph.runtime.world.World.report_phase>`); the local launcher's watch
  (:func:`~commgraph.runtime.launch_local`) times each rank's phase and stops the job when one
  overruns. A rank is :data:`STARTING` from its fork until it reaches its store; once its work
  runs (:data:`RUNNING`) every wait is bounded by ``--timeout`` itself, not the phase.

:data:`FAULT_ENV` is the test hook: ``WHERE:PHASE:ACTION`` (``WHERE`` a rank or ``launcher``,
``ACTION`` ``stall`` or ``sigkill``) makes that process stall for ever, or SIGKILL itself, as it
enters that phase (:func:`inject`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from commgraph.errors import JobError

STARTING, JOINING, SETTING_UP, RUNNING = "starting", "joining", "setting up", "running"
# a rank's phases in words; RUNNING is not bounded as a phase (each of its waits is)
RANK_PHASES = {
    STARTING: "starting (before joining the job)",
    JOINING: "joining the job (waiting for every rank)",
    SETTING_UP: "setting up (its part of the set, the model)",
}
WARMING_UP = "starting the workers' interpreter"  # the zygote's imports, before it forks the ranks
HARD_SECONDS = 5.0  # how long native code past a launcher phase's deadline is waited for
REPEAT_SECONDS = 1.0  # the alarm repeats, in case code that ignores exceptions (a callback) took it
FAULT_ENV = "COMMGRAPH_FAULT"
TIMEOUT_FIX = "raise --timeout (each phase of a job may take --timeout seconds)"


class _Overran(BaseException):
    """Raised by the alarm in the launcher's phase; a BaseException, so that no ``except
    Exception`` of the phase's own code takes it for an error of its input."""


@contextmanager
def bounded(phase: str, seconds: float, fix: str = TIMEOUT_FIX) -> Iterator[None]:
    """Run the ``with`` block, the launcher's phase ``phase`` (in words: ``partitioning``), for at
    most ``seconds``; past that the command fails with :class:`JobError` naming the phase, the
    seconds and ``fix``. Outside the main thread (no signals there) only the hard stop applies.

    Raises:
        JobError: the phase overran.
    """
    line = phase_line(phase, seconds, fix)
    main = threading.current_thread() is threading.main_thread()
    hard = threading.Timer(seconds + HARD_SECONDS, _hard_stop, (line,))
    hard.daemon = True

    def alarm(signum, frame):
        raise _Overran

    before = signal.signal(signal.SIGALRM, alarm) if main else None
    hard.start()
    try:
        if main:
            signal.setitimer(signal.ITIMER_REAL, seconds, REPEAT_SECONDS)
        inject("launcher", phase)
        yield
    except _Overran:
        raise JobError(line) from None
    finally:
        if main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, before)
        hard.cancel()
        hard.join()  # no thread left behind: a zygote is forked only from a process without one


def _hard_stop(line: str) -> None:
    print(f"commgraph: error: {line}", file=sys.stderr, flush=True)
    os._exit(2)


def overrun_line(ranks: tuple[int, ...] | None, phase: str, seconds: float) -> str:
    """The one line saying that ``ranks`` overran their ``phase`` of ``seconds`` (None: the
    launcher's own ``phase``)."""
    if ranks is None:
        return f"commgraph: error: {phase_line(phase, seconds)}"
    return (
        f"commgraph: error: rank {', '.join(map(str, ranks))} did not finish {RANK_PHASES.get(phase, phase)} "
        f"within {seconds:g} s (--timeout {seconds:g}); every rank stopped: {TIMEOUT_FIX}"
    )


def phase_line(phase: str, seconds: float, fix: str = TIMEOUT_FIX) -> str:
    """What a launcher's ``phase`` that overran ``seconds`` says (after ``commgraph: error:``)."""
    return f"{phase} took more than {seconds:g} s (--timeout {seconds:g}): {fix}"


def inject(where: int | str, phase: str) -> None:
    """The test hook (:data:`FAULT_ENV`): stall for ever or SIGKILL this process if it is asked
    for ``where`` (a rank, or ``launcher``) entering ``phase``."""
    asked = os.environ.get(FAULT_ENV)
    if not asked:
        return
    at, _, action = asked.rpartition(":")
    if at != f"{where}:{phase}":
        return
    if action == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Event().wait()
