"""The request-level path model of LEO's multi-path selection (``docs/multipath.md``): every
request type's resolved paths as arrays over link directions and compute servers, the backlog each
element keeps (equations 6.1, 6.2), and the interface every selector implements."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from commgraph.errors import PlanError
from commgraph.plan.paths import PathSet, ResolvedPath, Segment, resolve_paths
from commgraph.topology import Topology
from commgraph.workload.requests import RequestStream


@dataclass
class _Group:
    """One step of a path in the model: a transfer segment's link directions (``compute=False``:
    each gets ``bytes x per_byte``) or a compute device's servers (``compute=True``: the least
    backlogged one gets ``seconds``)."""

    elements: np.ndarray
    compute: bool
    per_byte: np.ndarray
    seconds: float = 0.0


class PathTable:
    """Every request type's resolved paths as arrays over *elements*: link directions
    ``0 .. 2L-1`` (the simulator's resource ids), then each device's compute servers (``cores``,
    default 1 per device)."""

    def __init__(self, topology: Topology, paths: PathSet, cores: dict[str, int] | None = None):
        self.topology, self.path_set = topology, paths
        self.cores = dict(cores or {})
        for device, count in self.cores.items():
            topology.device(device)
            if not (isinstance(count, (int, np.integer)) and count >= 1):
                raise PlanError(f"cores of {device!r} must be an integer >= 1, got {count!r}")
        resolved = resolve_paths(paths, topology)
        self.paths: list[ResolvedPath] = [p for per_type in resolved for p in per_type]
        sizes = np.cumsum([0] + [len(per_type) for per_type in resolved])
        self.candidates = [np.arange(sizes[k], sizes[k + 1]) for k in range(len(resolved))]
        n_links = 2 * len(topology.links)
        starts = n_links + np.cumsum([0] + [self.cores.get(d.id, 1) for d in topology.devices])
        self.servers = {d.id: np.arange(starts[i], starts[i + 1]) for i, d in enumerate(topology.devices)}
        self.n_elements = int(starts[-1])
        self.groups: list[list[_Group]] = []
        for p in self.paths:
            groups = []
            for step in p.steps:
                if isinstance(step, Segment):
                    groups.append(_Group(step.resources, False, step.inv_bandwidth))
                else:
                    slots = self.servers[step.device]
                    groups.append(_Group(slots, True, np.zeros(slots.shape[0]), step.seconds))
            self.groups.append(groups)
        self.elements = [np.concatenate([g.elements for g in groups]) for groups in self.groups]
        self.base_fixed = np.array([p.fixed_seconds for p in self.paths])
        self.base_per_byte = np.array([p.seconds_per_byte for p in self.paths])
        self.toll_fixed = np.array([p.toll_seconds(0.0) for p in self.paths])
        self.toll_per_byte = np.array([p.toll_per_byte for p in self.paths])
        # the bottleneck: the most a request occupies one link (per byte) or one device (its compute over its servers)
        self.neck_seconds = np.array(
            [max([g.seconds / g.elements.shape[0] for g in gs if g.compute] or [0.0]) for gs in self.groups]
        )
        self.neck_per_byte = np.array(
            [max([float(g.per_byte.max()) for g in gs if not g.compute] or [0.0]) for gs in self.groups]
        )
        # per type: a path's devices -> the candidate with the same devices (a predecessor's path)
        self.same_route = [{self.paths[p].path.devices: int(p) for p in c} for c in self.candidates]

    def traverse(self, path: int, nbytes: float) -> float:
        """T(p, r)."""
        return float(self.base_fixed[path] + nbytes * self.base_per_byte[path])

    def queue(self, path: int, backlog: np.ndarray) -> float:
        """Q(p): the wait a request arriving now on ``path`` has before it, in the model."""
        return float(
            sum(backlog[g.elements].min() if g.compute else backlog[g.elements].max() for g in self.groups[path])
        )

    def add(self, path: int, nbytes: float, backlog: np.ndarray) -> None:
        """Put a request of ``nbytes`` on ``path``: its service on every link, its compute on the
        least backlogged server of each device."""
        for g in self.groups[path]:
            if g.compute:
                backlog[g.elements[int(np.argmin(backlog[g.elements]))]] += g.seconds
            else:
                np.add.at(backlog, g.elements, nbytes * g.per_byte)

    def bottleneck(self, path: int, nbytes: float) -> float:
        """b(p, r): seconds the request holds p's busiest element, per server of it."""
        return max(float(self.neck_seconds[path]), nbytes * float(self.neck_per_byte[path]))

    def work(self, path: int, nbytes: float) -> np.ndarray:
        """Seconds of work per element, a device's compute spread over its servers (capacities)."""
        load = np.zeros(self.n_elements)
        for g in self.groups[path]:
            if g.compute:
                load[g.elements] += g.seconds / g.elements.shape[0]
            else:
                np.add.at(load, g.elements, nbytes * g.per_byte)
        return load

    def direct_rate(self, shares: np.ndarray, nbytes: np.ndarray) -> float:
        """Requests per second, of type k with probability ``shares[k]`` and size ``nbytes[k]``, at
        which the busiest element of the all-direct assignment is busy all the time."""
        work = sum(
            share * self.work(int(self.candidates[k][0]), size)
            for k, (share, size) in enumerate(zip(shares, nbytes))
            if share > 0
        )
        return 1.0 / float(np.max(work))

    def combined_rate(self, shares: np.ndarray, nbytes: np.ndarray) -> float:
        """The most requests per second every path together carries, each type split over its paths
        as a fluid (an LP): the paths' combined capacity."""
        columns = [(k, int(p)) for k, share in enumerate(shares) if share > 0 for p in self.candidates[k]]
        loads = np.array([self.work(p, nbytes[k]) for k, p in columns]).T  # [elements, columns]
        busy = loads.any(axis=1)
        n = len(columns)
        a_eq = np.zeros((len(shares), n + 1))
        for j, (k, _) in enumerate(columns):
            a_eq[k, j] = 1.0
        a_eq[:, n] = -np.asarray(shares)
        a_ub = np.hstack([loads[busy], np.zeros((busy.sum(), 1))])
        result = linprog(
            np.concatenate([np.zeros(n), [-1.0]]),
            A_ub=a_ub,
            b_ub=np.ones(busy.sum()),
            A_eq=a_eq,
            b_eq=np.zeros(len(shares)),
            bounds=[(0, None)] * (n + 1),
            method="highs",
        )
        if result.status != 0:
            raise PlanError(f"the capacity LP failed: {result.message}")
        return float(result.x[n])

    def variants(self, path: int, backlog: np.ndarray | None = None) -> list[list[tuple]]:
        """The path with each compute step on one server, every choice of server (or, with
        ``backlog``, the least backlogged one): ``[(elements, compute, per_byte, seconds), ...]``
        per variant, for the LP."""
        options = []
        for g in self.groups[path]:
            if not g.compute:
                options.append([(g.elements, False, g.per_byte, 0.0)])
            elif backlog is not None:
                e = g.elements[int(np.argmin(backlog[g.elements]))]
                options.append([(np.array([e]), True, np.zeros(1), g.seconds)])
            else:
                options.append([(np.array([e]), True, np.zeros(1), g.seconds) for e in g.elements])
        return [list(v) for v in itertools.product(*options)]


@dataclass
class SolveStats:
    """MILP solves of one selection run: how many, and how many stopped at the time limit
    (:data:`~commgraph.plan.multipath.lp.LP_SECONDS`) with their best solution so far."""

    solves: int = 0
    time_limited: int = 0

    def __add__(self, other: SolveStats) -> SolveStats:
        """Both runs' solves together."""
        return SolveStats(self.solves + other.solves, self.time_limited + other.time_limited)


class Selector:
    """Chooses a path for each request; ``observe`` hears of each completion when it happens,
    ``decided`` of each dispatch. ``stats``: a selector that solves an optimisation counts its
    solves of the current run there (:class:`SolveStats`); None for
    the others."""

    name = ""
    stats: SolveStats | None = None

    def start(self, table: PathTable, stream: RequestStream) -> None:
        """Begin a run over ``stream`` on ``table``, forgetting any earlier run."""
        self.table, self.stream = table, stream

    def choose(self, t: int, backlog: np.ndarray) -> int:
        """The path for request ``t``; only ``greedy-queue`` and ``lp`` read ``backlog`` (the
        model's queues)."""
        raise NotImplementedError

    def observe(self, request: int, path: int, jct: float, traverse: float) -> None:
        """Request ``request`` on ``path`` completed after ``jct`` seconds (intra-host); alone it
        would take ``traverse``."""

    def decided(self, t: int, path: int) -> None:
        """Request ``t`` takes ``path`` (this selector's choice, or its predecessor's path)."""
