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

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain, compress
from operator import attrgetter
from pathlib import Path
from typing import NamedTuple

import numpy as np
from numba import njit

from commgraph.errors import SimulationError

_SET = object.__setattr__  # a frozen dataclass's own __setattr__ refuses


@dataclass(frozen=True, slots=True, init=False)
class Transfer:
    """``overhead_s`` adds a fixed cost (a copy-engine or kernel launch) to the route's latency;
    ``max_rate`` (bytes/s) caps the flow below what the links give it (an access method that cannot
    drive the link at full speed, such as zero-copy reads). Frozen, with slots: a model's DAG holds
    millions of them, and slots take about a third of the memory of an instance ``__dict__``
    (112 bytes against 336); built by setting each slot directly, without the generated frozen
    ``__init__``'s per-field reflection."""

    id: str
    src: str
    dst: str
    bytes: float
    priority: int = 0
    route: tuple[str, ...] | None = None
    deps: tuple[str, ...] = ()
    overhead_s: float = 0.0
    max_rate: float | None = None

    def __init__(
        self,
        id: str,
        src: str,
        dst: str,
        bytes: float,
        priority: int = 0,
        route: tuple[str, ...] | None = None,
        deps: tuple[str, ...] = (),
        overhead_s: float = 0.0,
        max_rate: float | None = None,
    ):
        _SET(self, "id", id)
        _SET(self, "src", src)
        _SET(self, "dst", dst)
        _SET(self, "bytes", bytes)
        _SET(self, "priority", priority)
        _SET(self, "route", route)
        _SET(self, "deps", deps)
        _SET(self, "overhead_s", overhead_s)
        _SET(self, "max_rate", max_rate)


@dataclass(frozen=True, slots=True, init=False)
class Compute:
    """Frozen, with slots, built as :class:`Transfer` is."""

    id: str
    device: str
    seconds: float
    deps: tuple[str, ...] = ()

    def __init__(self, id: str, device: str, seconds: float, deps: tuple[str, ...] = ()):
        _SET(self, "id", id)
        _SET(self, "device", device)
        _SET(self, "seconds", seconds)
        _SET(self, "deps", deps)


Task = Transfer | Compute


@contextmanager
def paused_collection() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many tasks: every thousand new objects
    it would walk all the tracked ones (millions of tasks and their tuples), none of which it can
    free. Restores the collector's previous state."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Dependents(NamedTuple):
    """Per task the positions of the tasks that depend on it: ``idx[ptr[i]:ptr[i + 1]]`` (a CSR),
    a topological ``order`` of all tasks, and per task whether it is a transfer and how many
    dependencies it has (``waiting``)."""

    ptr: np.ndarray
    idx: np.ndarray
    order: np.ndarray
    transfer: np.ndarray
    waiting: np.ndarray


def check_dag(tasks: list[Task]) -> Dependents:
    """Validate ids, sizes and dependencies (no unknown task, no cycle) and return, per task, the
    positions of the tasks that depend on it, with a topological order. Vectorised: the fields are
    read by C-level iteration (``map``, ``attrgetter``), the checks run in numpy, the order
    compiled."""
    n = len(tasks)
    index = dict(zip(map(_ID, tasks), range(n)))
    if len(index) != n:
        seen: set[str] = set()
        duplicate = next(t.id for t in tasks if t.id in seen or seen.add(t.id))
        raise SimulationError(f"duplicate task id {duplicate!r}")
    transfer = np.array(list(map(type, tasks)), dtype=object) == Transfer
    size = np.fromiter(map(_size, tasks), dtype=np.float64, count=n)
    bad = np.flatnonzero(~((size >= 0) & (size < np.inf)))
    if bad.size:
        task = tasks[bad[0]]
        field = "bytes" if transfer[bad[0]] else "seconds"
        raise SimulationError(f"task {task.id!r}: {field} must be a finite number >= 0, got {getattr(task, field)}")
    moving = list(compress(tasks, transfer.tolist()))
    overhead = np.fromiter(map(_OVERHEAD, moving), dtype=np.float64, count=len(moving))
    rate = np.array(list(map(_MAX_RATE, moving)), dtype=object)
    capped = rate != None  # noqa: E711 (elementwise on an object array)
    wrong = ~((overhead >= 0) & (overhead < np.inf))
    wrong[capped] |= ~(rate[capped].astype(np.float64) > 0)
    if wrong.any():
        task = moving[int(np.flatnonzero(wrong)[0])]
        raise SimulationError(f"task {task.id!r}: overhead_s must be finite and >= 0, and max_rate > 0")
    lists = list(map(_DEPS, tasks))
    counts = np.fromiter(map(len, lists), dtype=np.int64, count=n)
    flat = list(chain.from_iterable(lists))
    try:
        deps = np.fromiter(map(index.__getitem__, flat), dtype=np.int64, count=len(flat))
    except KeyError:
        owner = np.repeat(np.arange(n), counts)
        k = next(k for k, d in enumerate(flat) if d not in index)
        raise SimulationError(f"task {tasks[owner[k]].id!r} depends on unknown task {flat[k]!r}") from None
    owner = np.repeat(np.arange(n, dtype=np.int64), counts)
    by = np.argsort(deps, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(np.bincount(deps, minlength=n))
    idx = owner[by]
    order = topological_order(ptr, idx, counts)
    if order.shape[0] != n:
        placed = np.zeros(n, dtype=bool)
        placed[order] = True
        raise SimulationError(f"the task graph has a cycle through task {tasks[int(np.flatnonzero(~placed)[0])].id!r}")
    return Dependents(ptr, idx, order, transfer, counts)


_ID, _DEPS, _OVERHEAD, _MAX_RATE = (attrgetter(f) for f in ("id", "deps", "overhead_s", "max_rate"))


def _size(task: Task) -> float:
    return task.bytes if type(task) is Transfer else task.seconds


@njit(cache=True)
def topological_order(ptr, idx, waiting):  # pragma: no cover
    """Kahn's order of the tasks whose dependency counts are ``waiting`` and dependents the CSR
    (``ptr``, ``idx``); shorter than the task count when there is a cycle."""
    n = waiting.shape[0]
    left = waiting.copy()
    order = np.empty(n, np.int64)
    tail = 0
    for i in range(n):
        if left[i] == 0:
            order[tail] = i
            tail += 1
    head = 0
    while head < tail:
        v = order[head]
        head += 1
        for k in range(ptr[v], ptr[v + 1]):
            j = idx[k]
            left[j] -= 1
            if left[j] == 0:
                order[tail] = j
                tail += 1
    return order[:tail]


def read_json(path: str | Path):
    """A JSON file's contents; :class:`SimulationError` if it is missing or not JSON."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SimulationError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise SimulationError(f"{path}: not UTF-8 text (byte {exc.start}); expected a JSON file") from None
    except OSError as exc:
        raise SimulationError(f"{path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise SimulationError(f"{path}: not valid JSON ({exc})") from None


def read_dag(path: str | Path) -> list[Task]:
    data = read_json(path)
    entries = data.get("tasks") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise SimulationError(f'{path}: expected {{"tasks": [...]}}')
    return [_task(entry, f"{path}: task {n}") for n, entry in enumerate(entries)]


def _task(entry: dict, where: str) -> Task:
    if not isinstance(entry, dict):
        raise SimulationError(f"{where}: expected an object")
    kind = entry.get("type")
    fields = {
        "transfer": {"id", "type", "src", "dst", "bytes", "priority", "route", "deps"},
        "compute": {"id", "type", "device", "seconds", "deps"},
    }
    if kind not in fields:
        raise SimulationError(f"{where}: type must be 'transfer' or 'compute', got {kind!r}")
    unknown = set(entry) - fields[kind]
    if unknown:
        raise SimulationError(f"{where}: unknown field(s) {sorted(unknown)}")
    try:
        deps = tuple(str(d) for d in entry.get("deps", ()))
        if kind == "transfer":
            route = entry.get("route")
            return Transfer(
                str(entry["id"]),
                str(entry["src"]),
                str(entry["dst"]),
                float(entry["bytes"]),
                int(entry.get("priority", 0)),
                None if route is None else tuple(str(r) for r in route),
                deps,
            )
        return Compute(str(entry["id"]), str(entry["device"]), float(entry["seconds"]), deps)
    except KeyError as exc:
        raise SimulationError(f"{where}: missing field {exc}") from None
    except (TypeError, ValueError) as exc:
        raise SimulationError(f"{where}: {exc}") from None
