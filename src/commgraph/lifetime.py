"""How long a process of a job lives: never longer than the process that started it.

The zygote, each rank it forks and each process a rank starts (DGS's explainer) call
:func:`die_with_parent` first: Linux then sends it SIGKILL the moment its parent exits, however
the parent exits (an error, ``os._exit``, SIGKILL). Every rank also leads a process group of its
own, which the launcher kills when the job ends (:func:`kill_group`), taking whatever the rank
started, however deep.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

PR_SET_PDEATHSIG, PR_SET_NAME = 1, 15  # <linux/prctl.h>


def die_with_parent(parent: int | None = None) -> bool:
    """Ask the kernel for SIGKILL when this process's parent exits; if the parent is already gone
    (it differs from ``parent``, the pid it had when it started this process), exit now. False
    where the platform has no parent-death signal (then only :func:`kill_group` applies)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return False
    if parent is not None and os.getppid() != parent:  # the parent died before the request above
        os._exit(1)
    return True


def name_process(name: str) -> None:
    """Name this process (its first 15 bytes) as ``ps`` and ``/proc/PID/comm`` show it (Linux)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def kill_group(pgid: int) -> None:
    """SIGKILL every process of group ``pgid`` (nothing if the group is empty already)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def group_members(pgid: int) -> dict[int, str]:
    """The processes of group ``pgid`` still running (pid -> command line; zombies, exited but not
    yet reaped by init, hold nothing and are left out). Empty where there is no ``/proc``."""
    members = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            state, _, group = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
            if int(group) == pgid and state not in ("Z", "X"):
                members[int(entry.name)] = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
        except (OSError, ValueError):
            continue
    return members
