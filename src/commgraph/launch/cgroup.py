"""A memory cgroup around a job's whole process tree, where the machine allows one.

``--memory-budget`` is a limit on everything a job's processes hold, the page cache their file
reads fill included. The kernel keeps such a limit for a control group (cgroup); this module makes
one as a child of the launcher's own, in whichever hierarchy the machine mounts with a memory
controller (``/proc/self/mounts``, ``/proc/self/cgroup``):

- **cgroup v2** (``cgroup2``): a child whose parent lists ``memory`` in its
  ``cgroup.subtree_control``, its limit in ``memory.max`` (and ``memory.swap.max`` 0: swap is no
  way around it);
- **cgroup v1** (``cgroup`` with the ``memory`` controller): a child of the process's memory
  cgroup, its limit in ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``, memory
  plus swap, where the kernel has it).

Processes join by their pid written to ``cgroup.procs``; what they fork afterwards is born inside.
The launcher moves itself and the interpreter its workers are forked from, so every worker, and
everything a worker starts, is inside. :meth:`MemoryCap.release` moves those back and removes the
group. Where no group can be made (no memory controller, a read-only hierarchy, no permission),
:func:`cap_memory` returns why, and the job keeps its budget in its own code (the feature cache
is sized to it; :mod:`commgraph.plan.memory`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MOUNTS = Path("/proc/self/mounts")
OWN_CGROUPS = Path("/proc/self/cgroup")


@dataclass(frozen=True)
class MemoryCap:
    """A memory cgroup made for a job: its directory, hierarchy version (1 or 2) and limit."""

    path: Path
    version: int
    limit: int

    @property
    def limit_file(self) -> str:
        return "memory.max" if self.version == 2 else "memory.limit_in_bytes"

    def describe(self) -> str:
        return (
            f"memory budget {self.limit / 1e9:.2f} GB enforced by a cgroup v{self.version} "
            f"({self.path / self.limit_file}) around the whole job"
        )

    def join(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into the group."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def release(self) -> None:
        """Move what is still inside back to the parent group, then remove the group."""
        procs = self.path / "cgroup.procs"
        try:
            inside = procs.read_text().split()
        except OSError:
            return
        for pid in inside:
            try:
                (self.path.parent / "cgroup.procs").write_text(pid)
            except OSError:  # the process has ended meanwhile
                continue
        try:
            self.path.rmdir()
        except OSError:
            pass


def cap_memory(limit: int, name: str, mounts: Path = MOUNTS, own: Path = OWN_CGROUPS) -> MemoryCap | str:
    """A fresh memory cgroup ``name`` limited to ``limit`` bytes, beside nothing else of ours: a
    child of this process's cgroup (v2 tried first, then v1). Returns why not as one line where none
    can be made (the caller says it and keeps the budget in code)."""
    hierarchies = _memory_hierarchies(mounts, own)
    if not hierarchies:
        return f"no memory cgroup hierarchy is mounted ({mounts} lists none)"
    reasons = []
    for version, parent in hierarchies:
        try:
            return _make(version, parent / name, limit)
        except OSError as exc:
            reasons.append(f"v{version} {parent}: {exc.strerror or exc}")
    return "no memory cgroup can be made here (" + "; ".join(reasons) + ")"


def _memory_hierarchies(mounts: Path, own: Path) -> list[tuple[int, Path]]:
    """(version, this process's cgroup directory) of each mounted hierarchy that limits memory:
    v2 where its parent group hands the memory controller to its children, then v1."""
    try:
        mounted = [line.split() for line in mounts.read_text().splitlines()]
        groups = [line.split(":", 2) for line in own.read_text().splitlines()]
    except OSError:
        return []
    paths = {group[1]: group[2].lstrip("/") for group in groups if len(group) == 3}
    found = []
    for fields in mounted:
        if len(fields) < 4:
            continue
        point, kind, options = Path(fields[1]), fields[2], fields[3].split(",")
        if kind == "cgroup2" and "" in paths:
            mine = point / paths[""]
            if "memory" in _read(mine / "cgroup.subtree_control").split():
                found.insert(0, (2, mine))
        elif kind == "cgroup" and "memory" in options:
            key = next((c for c in paths if "memory" in c.split(",")), None)
            if key is not None:
                found.append((1, point / paths[key]))
    return found


def _make(version: int, path: Path, limit: int) -> MemoryCap:
    path.mkdir()
    try:
        if version == 2:
            (path / "memory.max").write_text(str(limit))
            _write_if_present(path / "memory.swap.max", "0")
        else:
            (path / "memory.limit_in_bytes").write_text(str(limit))
            _write_if_present(path / "memory.memsw.limit_in_bytes", str(limit))
    except OSError:
        path.rmdir()
        raise
    return MemoryCap(path, version, limit)


def _write_if_present(path: Path, value: str) -> None:
    if path.exists():
        try:
            path.write_text(value)
        except OSError:  # swap accounting turned off in the kernel: memory alone is limited
            pass


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def job_cgroup_name() -> str:
    """The group's name: unique to this launcher."""
    return f"commgraph-{os.getpid()}"
