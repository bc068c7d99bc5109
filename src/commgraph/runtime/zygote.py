"""Workers forked from one warmed interpreter, so the ranks of a machine share what they import.

A process that imports torch, PyG and commgraph holds about 0.35-0.5 GB of its own memory (the
interpreter's objects, the relocated data of torch's shared libraries), so eight workers started
as eight interpreters cost about 4 GB before they load a single node. Here one interpreter (the
*zygote*) imports all of it once, freezes its objects out of the garbage collector's reach
(``gc.freeze``, so collections do not write to the shared pages) and forks the ranks; each rank's
pages stay shared with the zygote until written (copy-on-write), so eight ranks cost about what one
does (measured: 0.78 GB against 4.1 GB for eight ranks that only import; ``benchmarks/memory.py``).
Nothing in the zygote starts a thread, initialises CUDA or opens a process group before the fork:
each rank does that itself, as a freshly started one would.

``python -m commgraph.runtime.zygote FD WORKERS MODULE ARGV...`` forks ``WORKERS`` ranks, each
running ``python -m MODULE ARGV...`` with ``RANK`` and ``LOCAL_RANK`` set (the rest of the
environment is the zygote's), and reports on file descriptor ``FD`` one line per event:
``start RANK PID SECONDS`` (SECONDS: the system's monotonic clock just before the fork) and
``exit RANK CODE`` (CODE is ``-SIGNAL`` for a rank killed by a signal).
The zygote dies with its launcher and every rank dies with the zygote (Linux's parent-death
signal), so no rank outlives the job whatever is killed. Each rank leads a process group of its
own (its pid), which the launcher kills with it, and is named ``commgraph-rN`` (``ps``, ``top``,
``/proc/PID/comm``).
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import runpy
import signal
import sys
import time
import traceback
import warnings
from dataclasses import dataclass

from commgraph.lifetime import die_with_parent, name_process

# set in a job's environment: every rank execs a fresh interpreter (a forked one cannot use CUDA)
FRESH_RANKS = "COMMGRAPH_FRESH_RANKS"

# what a worker of any command imports; imported once here, shared by every rank
WARM = (
    "torch",
    "torch.distributed",
    "torch_geometric",
    "commgraph.cli.main",
    "commgraph.train.trainer",
    "commgraph.train.minibatch",
    "commgraph.train.predict",
    "commgraph.analytics.worker",
    "commgraph.pyg.full",  # a user's script under ``commgraph run``: the bridge
    "commgraph.pyg.reduce",
)


def warm() -> None:
    """Import what every rank needs, then keep those objects out of the collector's reach."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in WARM:
            importlib.import_module(name)
    gc.collect()
    gc.freeze()


def run_rank(rank: int, module: str, argv: list[str], zygote: int) -> None:
    """In a forked child of process ``zygote``: become rank ``rank`` running ``python -m module
    argv``, and exit with its exit code (never returns)."""
    code = 1
    try:
        die_with_parent(zygote)
        os.setpgid(0, 0)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the zygote ignores it; a rank need not
        name_process(f"commgraph-r{rank}")
        os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(rank)
        if os.environ.get(FRESH_RANKS) == "1":  # keeps its pid, process group and parent-death signal
            os.execv(sys.executable, [sys.executable, "-m", module, *argv])
        if os.environ.get("OMP_NUM_THREADS"):  # OpenMP read the environment when the zygote loaded it
            sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        atexit._clear()  # the zygote's exit handlers are not this rank's
        sys.argv = [module, *argv]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exit_code(exc.code)
        except BaseException:  # noqa: BLE001 - what an interpreter does with an uncaught error
            traceback.print_exc()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def exit_code(code) -> int:
    """The process exit status for ``SystemExit(code)``, as an interpreter gives it (a message is
    printed on stderr and exits 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def ignore_interrupts() -> None:
    """Ctrl-C reaches the whole foreground process group, the zygote with its launcher: the
    launcher stops the job, and the zygote, which only forks and reports, ignores it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def serve(report_fd: int, workers: int, module: str, argv: list[str]) -> int:
    """Fork ``workers`` ranks of ``python -m module argv`` from this (warmed) process, report their
    starts and exits on ``report_fd``, and return once every rank has exited."""
    report = os.fdopen(report_fd, "w", buffering=1)
    ranks, zygote = {}, os.getpid()
    for rank in range(workers):
        forked = time.monotonic()  # CLOCK_MONOTONIC: the launcher reads the same clock
        pid = os.fork()
        if pid == 0:
            report.close()
            run_rank(rank, module, argv, zygote)
        ranks[pid] = rank
        report.write(f"start {rank} {pid} {forked!r}\n")
    while ranks:
        pid, status = os.wait()
        if pid in ranks:
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            report.write(f"exit {ranks.pop(pid)} {code}\n")
    return 0


@dataclass
class ForkedZygote:
    """A zygote forked from the launcher itself before the launcher does any work, so the launcher,
    the zygote and every rank share one copy of what the launcher had imported: on a machine
    without a GPU the launcher imports every rank's modules first (:func:`warm`; measured on a
    products-sized job of one worker: 124 MB less PSS for the three processes than when the zygote
    imported them after the fork, each holding its own copy of what both imported); where ranks
    exec fresh interpreters (a GPU) the zygote warms up while the launcher loads and partitions.
    It then waits for its job on ``control``: :meth:`start` sends it; closing the pipe unsent
    (:meth:`discard`) makes it exit. Watched like a ``subprocess.Popen`` (``poll``, ``wait``,
    ``kill``)."""

    pid: int
    control: int  # write end: the job, as one JSON object
    reports: int  # read end: the zygote's start and exit reports
    returncode: int | None = None
    started: bool = False  # the job was sent

    @classmethod
    def fork(cls) -> ForkedZygote | None:
        """Fork one now, or None where that is not safe: other threads running (a fork copies
        only the caller's, and their locks as they stand) or CUDA initialised."""
        import threading

        import torch

        if hasattr(os, "fork") and not torch.cuda.is_available():
            warm()  # before the fork: the launcher, the zygote and the ranks hold one copy of it all
        if not hasattr(os, "fork") or threading.active_count() > 1 or torch.cuda.is_initialized():
            return None
        control_read, control = os.pipe()
        reports, report_write = os.pipe()
        parent = os.getpid()
        gc.collect()
        gc.freeze()  # nor may the launcher's own collections write to the pages it now shares
        pid = os.fork()
        if pid == 0:  # the zygote
            code = 1
            try:
                os.close(control), os.close(reports)
                die_with_parent(parent)
                ignore_interrupts()
                name_process("commgraph-zyg")
                warm()
                with os.fdopen(control_read) as handle:
                    text = handle.read()
                if text:
                    job = json.loads(text)
                    os.environ.clear()
                    os.environ.update(job["env"])
                    paths = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
                    sys.path[:0] = [entry for entry in paths if entry not in sys.path]  # as a new interpreter would
                    code = serve(report_write, job["workers"], job["module"], job["argv"])
                else:
                    code = 0
            except BaseException:  # noqa: BLE001 - the zygote never returns into the launcher's code
                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(control_read), os.close(report_write)
        return cls(pid, control, reports)

    def start(self, argv: list[str], workers: int, module: str, env: dict) -> int:
        """Send the job; the read end of the zygote's reports."""
        self.started = True
        with os.fdopen(self.control, "w") as handle:
            json.dump({"argv": argv, "workers": workers, "module": module, "env": env}, handle)
        return self.reports

    def discard(self) -> None:
        """No job after all: the zygote is stopped (it may still be warming up) and reaped."""
        for fd in (self.control, self.reports):
            try:
                os.close(fd)
            except OSError:
                pass
        self.kill()
        self.wait()

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    fd, workers, module, worker_argv = int(argv[0]), int(argv[1]), argv[2], argv[3:]
    die_with_parent()
    ignore_interrupts()
    if os.environ.get(FRESH_RANKS) != "1":
        warm()
    return serve(fd, workers, module, worker_argv)


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))  # no interpreter shutdown: its exit handlers are for the ranks' imports
