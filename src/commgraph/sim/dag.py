"""Task DAGs the simulator runs: transfers (bytes over a route) and computations (seconds on a
device), with dependencies. Read from JSON::

    {"tasks": [
      {"id": "fwd0", "type": "compute", "device": "gpu0", "seconds": 0.002},
      {"id": "x01", "type": "transfer", "src": "gpu0", "dst": "gpu1", "bytes": 4e6,
       "priority": 0, "deps": ["fwd0"]},
      {"id": "x05", "type": "transfer", "src": "gpu0", "dst": "gpu5", "bytes": 4e6,
       "route": ["gpu0", "gpu4", "gpu5"]}
    ]}

``priority`` is a strict class, 0 served first (default 0). ``route`` lists the devices a transfer
crosses (default: the topology's route). ``deps`` name tasks that must finish first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from commgraph.errors import SimulationError


@dataclass(frozen=True)
class Transfer:
    """``overhead_s`` adds a fixed cost (a copy-engine or kernel launch) to the route's latency;
    ``max_rate`` (bytes/s) caps the flow below what the links give it (an access method that cannot
    drive the link at full speed, such as zero-copy reads)."""

    id: str
    src: str
    dst: str
    bytes: float
    priority: int = 0
    route: tuple[str, ...] | None = None
    deps: tuple[str, ...] = field(default_factory=tuple)
    overhead_s: float = 0.0
    max_rate: float | None = None


@dataclass(frozen=True)
class Compute:
    id: str
    device: str
    seconds: float
    deps: tuple[str, ...] = field(default_factory=tuple)


Task = Transfer | Compute


def check_dag(tasks: list[Task]) -> list[list[int]]:
    """Validate ids, sizes and dependencies (no unknown task, no cycle) and return, per task, the
    positions of the tasks that depend on it."""
    index: dict[str, int] = {}
    for i, task in enumerate(tasks):
        if task.id in index:
            raise SimulationError(f"duplicate task id {task.id!r}")
        index[task.id] = i
        if isinstance(task, Transfer) and not task.bytes >= 0:
            raise SimulationError(f"task {task.id!r}: bytes must be >= 0, got {task.bytes}")
        if isinstance(task, Transfer) and (task.overhead_s < 0 or (task.max_rate is not None and not task.max_rate > 0)):
            raise SimulationError(f"task {task.id!r}: overhead_s must be >= 0 and max_rate > 0")
        if isinstance(task, Compute) and not task.seconds >= 0:
            raise SimulationError(f"task {task.id!r}: seconds must be >= 0, got {task.seconds}")
    waiting = [0] * len(tasks)
    dependents: list[list[int]] = [[] for _ in tasks]
    for i, task in enumerate(tasks):
        for dep in task.deps:
            if dep not in index:
                raise SimulationError(f"task {task.id!r} depends on unknown task {dep!r}")
            dependents[index[dep]].append(i)
            waiting[i] += 1
    order = [i for i, w in enumerate(waiting) if w == 0]
    for i in order:  # grows while iterating
        for j in dependents[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                order.append(j)
    if len(order) != len(tasks):
        stuck = next(tasks[i].id for i, w in enumerate(waiting) if w > 0)
        raise SimulationError(f"the task graph has a cycle through task {stuck!r}")
    return dependents


def read_json(path: str | Path):
    """A JSON file's contents; :class:`SimulationError` if it is missing or not JSON."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SimulationError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise SimulationError(f"{path}: not valid JSON ({exc})") from None


def read_dag(path: str | Path) -> list[Task]:
    data = read_json(path)
    entries = data.get("tasks") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise SimulationError(f"{path}: expected {{\"tasks\": [...]}}")
    return [_task(entry, f"{path}: task {n}") for n, entry in enumerate(entries)]


def _task(entry: dict, where: str) -> Task:
    if not isinstance(entry, dict):
        raise SimulationError(f"{where}: expected an object")
    kind = entry.get("type")
    fields = {"transfer": {"id", "type", "src", "dst", "bytes", "priority", "route", "deps"},
              "compute": {"id", "type", "device", "seconds", "deps"}}
    if kind not in fields:
        raise SimulationError(f"{where}: type must be 'transfer' or 'compute', got {kind!r}")
    unknown = set(entry) - fields[kind]
    if unknown:
        raise SimulationError(f"{where}: unknown field(s) {sorted(unknown)}")
    try:
        deps = tuple(str(d) for d in entry.get("deps", ()))
        if kind == "transfer":
            route = entry.get("route")
            return Transfer(str(entry["id"]), str(entry["src"]), str(entry["dst"]), float(entry["bytes"]),
                            int(entry.get("priority", 0)),
                            None if route is None else tuple(str(r) for r in route), deps)
        return Compute(str(entry["id"]), str(entry["device"]), float(entry["seconds"]), deps)
    except KeyError as exc:
        raise SimulationError(f"{where}: missing field {exc}") from None
    except (TypeError, ValueError) as exc:
        raise SimulationError(f"{where}: {exc}") from None
