"""The peak memory of a process tree: the proportional set size (PSS) of a command and all its
descendants, sampled while it runs, as every memory benchmark here measures it.

PSS comes from ``/proc/PID/smaps_rollup``: a page shared by k processes counts 1/k in each, so the
sum over the tree is what the tree really costs the machine. :func:`measure` runs one command,
samples that sum every ``every`` seconds, and can kill the tree past a memory cap or a time limit;
:func:`commgraph_env` and :func:`commgraph_argv` run ``python -m commgraph`` from this checkout.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
GB = 1e9


CHECKOUT = Path(__file__).resolve().parent.parent


GB = 1e9


def children_map() -> dict[int, list[int]]:
    """Every live process's children, from the parent pid in ``/proc/PID/stat``."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def process_tree(root: int) -> list[int]:
    """``root`` and all its live descendants (root first)."""
    kids, found, stack = children_map(), [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(kids.get(pid, []))
    return found


def pss_bytes(pid: int) -> int:
    """A process's proportional set size in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def shm_used_bytes() -> int:
    """Bytes in use on ``/dev/shm`` (0 where there is none)."""
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return 0
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


def kill_tree(pids: list[int]) -> None:
    """SIGKILL every process in ``pids`` (those already gone are skipped)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@dataclass
class Measurement:
    """One command's run under the sampler."""

    returncode: int
    seconds: float
    peak_bytes: int  # the largest sum of PSS over the tree at one sample
    root_peak_bytes: int  # the command's own process
    other_peak_bytes: list[int]  # every other process's own peak, largest first
    shm_peak_bytes: int  # the largest growth of /dev/shm's use over its use at the start
    status: str  # ok, failed, refused, capped, timeout
    samples: int
    stderr_tail: str = ""
    before_bytes: int | None = None  # with ``until``: the peak at the samples taken before it held


def measure(
    command: list[str],
    *,
    env: dict | None = None,
    cap_bytes: float | None = None,
    time_limit: float | None = None,
    every: float = 0.5,
    stdout_path: Path | None = None,
    until: Callable[[], bool] | None = None,
) -> Measurement:
    """Run ``command`` and sample the PSS of its process tree every ``every`` seconds.

    Args:
        command: the argv to run.
        env: its environment (default: this process's).
        cap_bytes: kill the tree once its PSS sum passes this (status "capped").
        time_limit: kill the tree once it has run this many seconds (status "timeout").
        every: seconds between samples.
        stdout_path: where the command's standard output goes (default: discarded). Its standard
            error's last lines are kept in ``stderr_tail``.
        until: a test of the command's progress (such as "its metrics file has a line"), made
            before each sample: the peak over the samples taken while it was false is kept apart
            (``before_bytes``), a phase's peak within the whole run's.

    Returns:
        Measurement: the peaks, seconds and how the command ended (exit 2 is "refused": the CLI's
        one-line refusal of bad or unfittable options).
    """
    shm_start = shm_used_bytes()
    started = time.perf_counter()
    with (
        tempfile.TemporaryFile(mode="w+") as err,
        open(stdout_path, "w") if stdout_path else open(os.devnull, "w") as out,
    ):
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=err)
        peak, each, shm_peak, samples, status = 0, {}, 0, 0, None
        before = None if until is None else 0
        while proc.poll() is None:
            tick = time.perf_counter()
            reached = until is not None and until()
            pids = process_tree(proc.pid)
            sizes = {pid: pss_bytes(pid) for pid in pids}
            samples += 1
            peak = max(peak, sum(sizes.values()))
            if until is not None and not reached:
                before = peak
            shm_peak = max(shm_peak, shm_used_bytes() - shm_start)
            for pid, size in sizes.items():
                each[pid] = max(each.get(pid, 0), size)
            if cap_bytes is not None and peak > cap_bytes:
                status = "capped"
            elif time_limit is not None and time.perf_counter() - started > time_limit:
                status = "timeout"
            if status is not None:
                kill_tree(process_tree(proc.pid))
                break
            # the next sample one period after this one began: reading a large process's PSS walks its
            # page tables, so a sample of many big processes can itself take longer than a period
            time.sleep(max(0.0, every - (time.perf_counter() - tick)))
        proc.wait()
        seconds = time.perf_counter() - started
        err.seek(0)
        tail = "\n".join(err.read().strip().splitlines()[-5:])
    root_peak = each.pop(proc.pid, 0)
    if status is None:
        status = "ok" if proc.returncode == 0 else "refused" if proc.returncode == 2 else "failed"
    return Measurement(
        proc.returncode,
        seconds,
        peak,
        root_peak,
        sorted(each.values(), reverse=True),
        shm_peak,
        status,
        samples,
        tail,
        before,
    )


def commgraph_env() -> dict:
    """The environment of every command: this checkout's ``src`` first on ``PYTHONPATH``."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(CHECKOUT / "src") + (os.pathsep + path if path else "")}


def commgraph_argv(python: str, args: list[str]) -> list[str]:
    return [python, "-m", "commgraph", *args]


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """The median, with the min-max spread when there are several values."""
    if not values:
        return "-"
    middle = fmt.format(statistics.median(values))
    return middle if len(values) == 1 else f"{middle} ({fmt.format(min(values))}-{fmt.format(max(values))})"
