"""Local launcher: ``commgraph train ... --workers N`` re-runs the same command in N processes.

The ranks are forked from one warmed interpreter (:mod:`commgraph.runtime.zygote`), so a machine's
workers share the memory of what they import. The launcher hosts the job's key-value store (so the store
outlives any one worker, and survivors can still read who failed), gives every rank the environment
torchrun would give it, and watches them. When a worker exits non-zero or is killed, the others are
given ``grace`` seconds (default :data:`STOP_SECONDS`) to notice and exit with their own message, then
they are killed; the launcher names the first failed rank and returns non-zero. Given
``phase_seconds`` (``--timeout``), the launcher also times the set-up phase each rank says it is in
(:mod:`commgraph.phases`): a rank that stays in one longer stops the job at once, in one line
naming it, its phase and the fix, exit code 2. Under torchrun none of this runs: torchrun's agent
does the watching.

A job of one rank that needs no fresh interpreter (no CUDA), launched by a process that ends with
it (the ``commgraph`` command), runs that rank in the launcher's own process instead
(:func:`run_here`): a rank alone has no peer to tell or wait for, and a forked one would copy
every page of the launcher's it writes while the launcher keeps the original, so the job holds
one copy of everything. Its set-up phases are timed by a thread of the launcher, and SIGINT and
SIGTERM stop it as they stop forked ranks.

No process of the job outlives it: every rank runs in a process group of its own, which the
launcher kills when the job ends, however it ends, so whatever a rank started (DGS's explainer,
its resource tracker) goes with it; and each rank dies with the zygote, the zygote with the
launcher (:func:`~commgraph.lifetime.die_with_parent`), even when one is killed by SIGKILL.
"""

from __future__ import annotations

import datetime
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from commgraph.lifetime import group_members, kill_group
from commgraph.logs import get_logger
from commgraph.phases import RANK_PHASES, RUNNING, STARTING, WARMING_UP, overrun_line
from commgraph.runtime.options import DATA_ENV, DATA_KEY
from commgraph.runtime.world import PROGRESS_KEY, failed_key, phase_key, stopped_key
from commgraph.runtime.zygote import FRESH_RANKS, ForkedZygote

POLL_SECONDS = 0.1
STOP_SECONDS = 1.5  # after a worker fails, how long the others may take to exit with their own message
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # what stops a job the ordinary way
SWEEP_SECONDS = 1.0  # after the ranks exit, how long what they started may take to exit by itself
HERE_ENV = "COMMGRAPH_RANK_HERE"  # set to 1 while a job's one rank runs in the launcher's process (run_here)

log = get_logger(__name__)


def launch_local(
    argv: list[str],
    workers: int,
    *,
    grace: float = STOP_SECONDS,
    threads_per_worker: int | None = None,
    module: str = "commgraph",
    zygote: ForkedZygote | None = None,
    fresh: bool | None = None,
    env: dict[str, str] | None = None,
    verdict: Callable[[JobEnd], int] | None = None,
    phase_seconds: float | None = None,
    data: str | None = None,
    here: Callable[[list[str]], int] | None = None,
) -> int:
    """Run ``python -m <module> <argv>`` as ``workers`` ranks on this machine, forked by ``zygote``
    (see :meth:`ForkedZygote.fork`) or by a zygote started for them; the job's exit code. With
    ``fresh`` each forked rank replaces itself with a new interpreter at once; by default it does
    wherever torch sees a CUDA GPU: importing PyG initialises the CUDA driver in the zygote, and a
    child forked from such a process cannot use CUDA at all, not even a CPU job's optimizer (its
    step asks CUDA whether a graph is being captured). ``env`` is added to every rank's
    environment; ``verdict`` turns how the job ended into its exit code, saying why (default
    :func:`name_failed_rank`), while the job's store is still open; ``phase_seconds`` bounds each
    rank's set-up phases (None: unbounded); ``data``, the ranks' options as text, is put in the
    job's store for each rank to read (:func:`job_data`). ``here``, the command's entry (its
    ``main(argv)``), runs a job of one rank that needs no fresh interpreter in this process
    (:func:`run_here`; ``zygote``, if given, is discarded unused)."""
    store = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=max(grace, 30))
    )
    threads = threads_per_worker or max(1, (os.cpu_count() or 1) // workers)
    env = dict(
        os.environ,
        **(env or {}),
        WORLD_SIZE=str(workers),
        LOCAL_WORLD_SIZE=str(workers),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(store.port),
        TORCHELASTIC_USE_AGENT_STORE="True",
        OMP_NUM_THREADS=str(threads),
        COMMGRAPH_THREADS=str(threads),
    )
    if data is not None:
        store.set(DATA_KEY, data)
        env[DATA_ENV] = "1"
    if fresh is None:
        fresh = torch.cuda.is_available()
    if fresh:
        env[FRESH_RANKS] = "1"
    if here is not None and workers == 1 and not fresh:
        if zygote is not None:
            zygote.discard()  # before the rank writes a page the zygote would keep a copy of
        return run_here(here, argv, env, store, phase_seconds, verdict or name_failed_rank)
    children = None
    try:
        with _signals_interrupt():
            try:
                children = ForkedRanks.start(argv, workers, module, env, zygote)
                end = _watch(children.ranks, grace, store, phase_seconds)
            except Interrupted as stop:
                if children is not None:
                    _kill(children.ranks)
                return stopped_by_signal(stop.signum, store)
        if end.overrun is not None:
            _kill(children.ranks)  # before the line: no rank adds its own after it
            log.error(end.overrun.line())
            return 2
        return (verdict or name_failed_rank)(end)
    finally:
        if children is not None:
            _kill(children.ranks)
            _sweep(children.ranks)
            children.close()
        del store


def run_here(
    here: Callable[[list[str]], int],
    argv: list[str],
    env: dict[str, str],
    store,
    phase_seconds: float | None,
    verdict: Callable[[JobEnd], int],
) -> int:
    """Run a job's one rank in this process, ``here(argv)`` with the rank's environment (``env``,
    rank 0, :data:`HERE_ENV`; torch's threads) for its duration; the job's exit code, from
    ``verdict`` as for forked ranks. ``phase_seconds`` bounds its set-up phases (a thread of this
    process watches them and stops the job, exit code 2, with the forked ranks' line); SIGINT and
    SIGTERM stop it with :func:`stopped_by_signal`'s line."""
    saved, threads = dict(os.environ), torch.get_num_threads()
    os.environ.update(env, RANK="0", LOCAL_RANK="0", **{HERE_ENV: "1"})
    torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    done = threading.Event()
    if phase_seconds is not None:
        threading.Thread(target=_watch_here, args=(store, phase_seconds, done), daemon=True).start()
    try:
        with _signals_interrupt():
            try:
                code = here(argv)
            except Interrupted as stop:
                return stopped_by_signal(stop.signum, store)
    finally:
        done.set()
        os.environ.clear()
        os.environ.update(saved)
        torch.set_num_threads(threads)
    failed = None if code == 0 else (0, code)
    return verdict(JobEnd([code], failed, None if failed is None else _own_reason(store, 0), store))


def _watch_here(store, seconds: float, done: threading.Event) -> None:
    """:func:`run_here`'s phase watch: once the rank overruns a set-up phase, say so in the forked
    ranks' line and end the process (exit code 2): a stuck rank of this process cannot be killed
    apart from it."""
    clock = PhaseClock([Rank(0, None, os.getpid(), forked=time.monotonic())], seconds, store)
    while not done.wait(clock.wait(POLL_SECONDS)):
        overrun = clock.overrun()
        if overrun is not None:
            log.error(overrun.line())
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            os._exit(2)


def job_data() -> str:
    """In a rank :func:`launch_local` started with ``data``: that data, read from the job's store."""
    span = datetime.timedelta(seconds=30)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=span)
    return store.get(DATA_KEY).decode()


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached the launcher while its ranks ran (:func:`_signals_interrupt`)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _signals_interrupt():
    """While the job runs, SIGINT (Ctrl-C) and SIGTERM (``kill``, a scheduler's pre-emption) raise
    :class:`Interrupted` in the launcher, once: a second signal does not interrupt the stop. Only
    the main thread can take signals; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        for taken in STOP_SIGNALS:
            signal.signal(taken, signal.SIG_IGN)
        raise Interrupted(signum)

    before = {taken: signal.signal(taken, interrupt) for taken in STOP_SIGNALS}
    try:
        yield
    finally:
        for taken, handler in before.items():
            signal.signal(taken, handler)


def stopped_by_signal(signum: int, store) -> int:
    """Say the job was stopped by ``signum`` and how far it got (what its leader last reported,
    :meth:`~commgraph.runtime.world.World.report_progress`); the shell's code, 128 + ``signum``."""
    far = store.get(PROGRESS_KEY).decode(errors="replace") if store.check([PROGRESS_KEY]) else None
    where = f" {far}" if far else ""
    log.warning(f"commgraph: stopped by {signal.Signals(signum).name}{where}; every rank stopped")
    return 128 + signum


@dataclass
class Rank:
    """A rank forked by the zygote, watched like a ``subprocess.Popen`` (``poll``, ``wait``,
    ``kill``) through the zygote's reports (``group`` None: the rank :func:`run_here` runs in
    this process, whose phases alone are watched)."""

    rank: int
    group: ForkedRanks | None
    pid: int | None = None
    code: int | None = None
    forked: float | None = None  # when, on the monotonic clock

    def poll(self) -> int | None:
        self.group.read(block=False)
        return self.code

    def wait(self) -> int:
        while self.code is None and self.group.read(block=True):
            pass
        return self.code

    def kill(self) -> None:
        """SIGKILL the rank and its process group (what it started); a rank not forked yet (its
        zygote still warming up) by killing the zygote, with which every rank dies."""
        if self.code is not None:
            return
        if self.pid is None:
            self.group.zygote.kill()
        else:
            kill_group(self.pid)


@dataclass
class ForkedRanks:
    """The zygote process and the ranks it forked, from its report pipe."""

    zygote: subprocess.Popen | ForkedZygote
    reports: int
    ranks: list[Rank] = field(default_factory=list)
    pending: bytes = b""

    @classmethod
    def start(
        cls, argv: list[str], workers: int, module: str, env: dict, zygote: ForkedZygote | None = None
    ) -> ForkedRanks:
        """The ranks, forked by ``zygote`` (one the launcher forked from itself) or by a fresh
        ``python -m commgraph.runtime.zygote``."""
        if zygote is not None:
            read = zygote.start(argv, workers, module, env)
        else:
            read, write = os.pipe()
            zygote = subprocess.Popen(
                [sys.executable, "-m", "commgraph.runtime.zygote", str(write), str(workers), module, *argv],
                env=env,
                pass_fds=(write,),
            )
            os.close(write)
        os.set_blocking(read, False)
        group = cls(zygote, read)
        group.ranks = [Rank(rank, group) for rank in range(workers)]
        return group

    def read(self, *, block: bool) -> bool:
        """Take in the zygote's reports (``block``: wait for some); False once it has no more to
        say (then every rank not reported gets the zygote's exit code, or 1)."""
        while True:
            try:
                chunk = os.read(self.reports, 4096)
            except BlockingIOError:
                if not block:
                    return True
                select.select([self.reports], [], [], POLL_SECONDS)  # wakes as soon as a report comes
                continue
            if not chunk:
                self._ended()
                return False
            self._take(chunk)
            if block:
                return True

    def _take(self, chunk: bytes) -> None:
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        for line in lines:
            event, rank, value, *forked = line.decode().split()
            if event == "start":
                self.ranks[int(rank)].pid = int(value)
                self.ranks[int(rank)].forked = float(forked[0])
            else:
                self.ranks[int(rank)].code = int(value)

    def _ended(self) -> None:
        code = self.zygote.wait()
        for rank in self.ranks:
            if rank.code is None:
                rank.code = code or 1

    def close(self) -> None:
        if self.zygote.poll() is None:
            self.zygote.kill()
        self.zygote.wait()
        os.close(self.reports)


@dataclass
class JobEnd:
    """How a local job ended, as the launcher saw it.

    Args:
        codes: each rank's exit code (None: still running when the others' grace ran out).
        failed: the rank that failed first and its exit code (None: every rank exited 0).
        reason: what that rank wrote of its failure itself (None: it said nothing).
        store: the job's store, still open: what the ranks wrote in it.
        overrun: the set-up phase that overran, which stopped the job (None: none did).
    """

    codes: list[int | None]
    failed: tuple[int, int] | None
    reason: str | None
    store: dist.Store
    overrun: Overrun | None = None


@dataclass(frozen=True)
class Overrun:
    """A set-up phase overran ``seconds``: ``phase``, where ``ranks`` still are, the ranks furthest
    behind (None: the zygote's warm-up, :data:`~commgraph.phases.WARMING_UP`, before it forks the
    ranks)."""

    ranks: tuple[int, ...] | None
    phase: str
    seconds: float

    def line(self) -> str:
        return overrun_line(self.ranks, self.phase, self.seconds)


class PhaseClock:
    """Times the phase each rank says it is in (:func:`~commgraph.runtime.world.phase_key`): a rank
    is :data:`~commgraph.phases.STARTING` from its fork (the zygote's clock) until it says
    otherwise, and each phase but :data:`~commgraph.phases.RUNNING` may last ``seconds``; so may
    the zygote's warm-up before it forks the ranks. A rank's own waits start later than its phase
    (a rank that timed out waiting for a late one started waiting after the late one's phase began),
    so the phase's bound is met first."""

    def __init__(self, ranks: list[Rank], seconds: float, store):
        self.ranks, self.seconds, self.store = ranks, seconds, store
        self.created = time.monotonic()
        self.phase = [STARTING] * len(ranks)
        self.since: list[float | None] = [None] * len(ranks)

    def overrun(self) -> Overrun | None:
        """Once a running rank is past its phase's bound (reading the phases the ranks wrote), the
        ranks furthest behind: those in the earliest phase (a rank waiting there for a stuck one
        cannot be told from it)."""
        now = time.monotonic()
        late = False
        for rank, child in enumerate(self.ranks):
            if child.code is not None or self.phase[rank] == RUNNING:
                continue
            if child.forked is None:
                if now - self.created >= self.seconds:
                    return Overrun(None, WARMING_UP, self.seconds)
                continue
            if self.since[rank] is None:
                self.since[rank] = child.forked
            key = phase_key(rank)
            phase = self.store.get(key).decode() if self.store.check([key]) else STARTING
            if phase != self.phase[rank]:
                self.phase[rank], self.since[rank] = phase, now
            late = late or now - self.since[rank] >= self.seconds
        if not late:
            return None
        running = [rank for rank, child in enumerate(self.ranks) if child.code is None and self.phase[rank] != RUNNING]
        phase = min((self.phase[rank] for rank in running), key=list(RANK_PHASES).index)
        return Overrun(tuple(rank for rank in running if self.phase[rank] == phase), phase, self.seconds)

    def wait(self, most: float) -> float:
        """How long to sleep, at most ``most``: up to the next bound of a running rank's phase."""
        bounds = [
            self.created if since is None else since
            for phase, since, child in zip(self.phase, self.since, self.ranks)
            if phase != RUNNING and child.code is None
        ]
        return max(0.0, min([most, *(bound + self.seconds - time.monotonic() for bound in bounds)]))


def _watch(children: list[Rank], grace: float, store, phase_seconds: float | None = None) -> JobEnd:
    """Wait for the ranks; how the job ended. A rank that fails is announced in ``store``
    (unless it said why itself), so that the others name it at once. With ``phase_seconds`` a
    rank's set-up phase that overruns it ends the watch first (:class:`PhaseClock`): a rank that
    failed waiting for it waited from a later start."""
    first_failure: tuple[int, int] | None = None
    reason = None
    deadline = None
    clock = PhaseClock(children, phase_seconds, store) if phase_seconds is not None else None
    while True:
        codes = [child.poll() for child in children]
        if clock is not None and first_failure is None:
            overrun = clock.overrun()
            if overrun is not None:
                return JobEnd(codes, None, None, store, overrun)
        if first_failure is None:
            failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                first_failure, reason = _first_failure(store, failed, codes)
                if grace <= 0:  # the others are killed at once: nobody to tell
                    break
                deadline = time.monotonic() + grace
                for rank, code in failed:
                    _announce(store, rank, code)
        if all(code is not None for code in codes):
            break
        if deadline is not None and time.monotonic() > deadline:
            break
        time.sleep(POLL_SECONDS if clock is None or first_failure is not None else clock.wait(POLL_SECONDS))
    return JobEnd(codes, first_failure, reason, store)


def _first_failure(store, failed: list[tuple[int, int]], codes: list[int | None]) -> tuple[tuple[int, int], str | None]:
    """Of ranks seen failing at once, the one that caused it (the lowest that did not say it
    stopped because of another), and its own reason. When every rank seen failing stopped because
    of another, the cause is the lowest rank that wrote its own reason, though it has not exited
    yet (a raising rank still unwinding while a peer's collective already failed): its code is
    then taken as 1, a raised exception's."""
    rank, code = min(failed, key=lambda item: (store.check([stopped_key(item[0])]), item[0]))
    if store.check([stopped_key(rank)]):
        causes = [
            other
            for other in range(len(codes))
            if store.check([failed_key(other)]) and not store.check([stopped_key(other)])
        ]
        if causes:
            rank = causes[0]
            code = codes[rank] if codes[rank] not in (None, 0) else 1
    return (rank, code), _own_reason(store, rank)


def _own_reason(store, rank: int) -> str | None:
    key = failed_key(rank)
    return store.get(key).decode(errors="replace") if store.check([key]) else None


def name_failed_rank(end: JobEnd) -> int:
    """The default verdict: 0, or 1 after naming the first failed rank and how it ended."""
    if end.failed is None:
        return 0
    rank, code = end.failed
    log.error(f"commgraph: error: worker rank {rank} {describe_exit(code)}; the job stopped")
    return 1


def describe_exit(code: int) -> str:
    """How a process with exit code ``code`` (``-SIGNAL``: killed) ended, in words."""
    return f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"


def _announce(store, rank: int, code: int) -> None:
    """Write how ``rank`` ended where the others look first (:func:`~commgraph.runtime.world.failed_key`),
    unless the rank wrote its own reason."""
    key = failed_key(rank)
    if not store.check([key]):
        store.set(key, describe_exit(code))


def _kill(children: list[Rank]) -> None:
    """Kill the ranks still running, each with its process group, and reap them."""
    for child in children:
        if child.poll() is None:
            child.kill()
    for child in children:
        child.wait()


def _sweep(children: list[Rank]) -> None:
    """Kill what the ranks started and left behind (a DGS explainer of a killed rank, perhaps still
    starting up, before it could ask to die with its parent), except the resource trackers of
    Python's multiprocessing: they remove the rank's named semaphores once its other processes
    are gone, and get :data:`SWEEP_SECONDS` to, then they are killed too."""
    groups = [child.pid for child in children if child.pid is not None]
    for pgid in groups:
        for pid, command in group_members(pgid).items():
            if "multiprocessing.resource_tracker" not in command:
                _kill_pid(pid)
    deadline = time.monotonic() + SWEEP_SECONDS
    while groups and time.monotonic() < deadline:
        groups = [pgid for pgid in groups if group_members(pgid)]
        time.sleep(POLL_SECONDS / 2)
    for pgid in groups:
        kill_group(pgid)


def _kill_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
