"""The processes of this machine as ``/proc`` shows them: what tests and the suite's guard read to
find a job's processes and the ones left running."""

from __future__ import annotations

from pathlib import Path


def processes() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, name, command line) of every process (from /proc)."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            found[int(entry.name)] = (
                int(stat.rsplit(")", 1)[1].split()[1]),
                (entry / "comm").read_text().strip(),
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"),
            )
        except (OSError, ValueError):
            continue
    return found


def descendants(root: int) -> dict[int, tuple[int, str, str]]:
    """Every process below ``root`` (pid -> parent pid, name, command line)."""
    every = processes()
    found, frontier = {}, {root}
    while frontier:
        frontier = {pid for pid, (parent, _, _) in every.items() if parent in frontier and pid not in found}
        found.update({pid: every[pid] for pid in frontier})
    return found


def alive(pids) -> list[int]:
    """Those of ``pids`` still running (zombies, exited but not reaped, are not)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            alive.append(pid)
    return alive
