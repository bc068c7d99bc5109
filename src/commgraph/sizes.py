"""Sizes priced before the work: a count or an allocation a command would need is compared with
what the format and the machine can hold, and refused in one line that names the size and the limit.

The limits:

- **int64**: a count (nodes, edges, epochs, tasks) beyond ``2**63 - 1`` cannot index an array;
- **memory**: what this machine can still give (``MemAvailable``), or less where this process's
  address space is capped (``ulimit -v``, ``RLIMIT_AS``): the cap minus what the process already
  maps (``VmSize``);
- **caps**: a size with no natural limit but a cost that grows without bound (a simulation's tasks,
  a planner's variables) has an explicit cap, named in the refusal with the option that raises it.
"""

from __future__ import annotations

import os
import resource
import subprocess
from dataclasses import dataclass

import numpy as np

from commgraph.errors import CommgraphError

INT64_MAX = int(np.iinfo(np.int64).max)


@dataclass(frozen=True)
class Room:
    """``bytes`` this process may still allocate (None where nothing says) and ``source``, what
    limits it, as a refusal says it."""

    bytes: int | None
    source: str


def available_bytes() -> int | None:
    """The memory this machine can still give (``MemAvailable``; None where it is not known)."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def gpu_free_bytes() -> tuple[int, ...] | None:
    """Each GPU's free memory as ``nvidia-smi`` reports it, the ones ``CUDA_VISIBLE_DEVICES``
    names (by index) in its order; None where nvidia-smi does not answer. Asking the driver
    through torch would leave a CUDA context on every GPU in the asking process."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        free = [int(line) * 2**20 for line in done.stdout.split()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and all(v.strip().isdigit() for v in visible.split(",")):
        free = [free[int(v)] for v in visible.split(",") if int(v) < len(free)]
    return tuple(free) or None


def machine_bytes() -> int | None:
    """This machine's physical memory (None where the system does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def room() -> Room:
    """What this process may still allocate: the machine's available memory, or the room left
    under the address-space limit when that is smaller."""
    available = available_bytes()
    cap = resource.getrlimit(resource.RLIMIT_AS)[0]
    if cap != resource.RLIM_INFINITY:
        left = max(cap - _mapped_bytes(), 0)
        if available is None or left < available:
            return Room(left, "left under this process's address-space limit (ulimit -v)")
    return Room(available, "available on this machine")


def _mapped_bytes() -> int:
    try:
        with open("/proc/self/status") as handle:
            return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmSize:"))
    except (OSError, StopIteration):
        return 0


def check_count(what: str, count: int, error: type[CommgraphError]) -> None:
    """Refuse a count beyond int64 (``what``: how the user typed it, e.g. ``--epochs``)."""
    if count > INT64_MAX:
        raise error(f"{what} {count:,} is beyond int64's {INT64_MAX:,}")


def check_room(what: str, nbytes: float, error: type[CommgraphError], advice: str) -> None:
    """Refuse ``nbytes`` (about what ``what`` needs) beyond :func:`room`; ``advice`` says what to
    change."""
    free = room()
    if free.bytes is not None and nbytes > free.bytes:
        raise error(f"{what} needs about {gigabytes(nbytes)} but {gigabytes(free.bytes)} is {free.source}: {advice}")


def check_cap(what: str, size: int, cap: int, option: str, error: type[CommgraphError], advice: str) -> None:
    """Refuse ``size`` beyond ``cap``; ``option`` raises the cap, ``advice`` says what else to change."""
    if size > cap:
        raise error(f"{what} is {size:,}, more than the cap of {cap:,}: {advice}, or raise the cap with {option}")


def gigabytes(nbytes: float) -> str:
    return f"{nbytes / 1e9:,.1f} GB"
