"""Multi-path selection inside a host (LEO, thesis chapter 6.2.2): which communication path each
request of a stream takes, decided online, then priced on the flow-level simulator.

**The request-level model** (equations 6.1, 6.2). Every link direction and every compute device
``e`` keeps a backlog ``B_e`` in seconds of work. Between arrivals it drains,
``B_e <- max(B_e - dt, 0)``; a request ``r`` placed on path ``p`` adds its service
``S(r) / BW(e)`` to each of p's links and ``T_c(e, r)`` to each compute device. A request arriving
on ``p`` completes after

    JCT(p, r) = Q(p) + T(p, r),
    Q(p) = sum over p's segments of max_{e in segment} B_e + sum over p's compute devices of B_e,

where ``T(p, r)`` is the request alone on ``p`` (latency, bytes at each segment's bottleneck,
compute). The thesis sums every element's queue; here a transfer segment counts its most backlogged
link once, because a DMA streams through all links of a route at once (cut-through), which is what
the flow simulator does: a request alone, or a burst on one link, finishes in the model when it
finishes in the simulator. Queues of separate segments and compute devices add up
(store-and-forward between them), as in the thesis.

**Selectors** (each decides at the request's arrival, seeing only what has completed by then unless
said otherwise):

- ``direct``: always the type's first path (the topology's route).
- ``greedy-e2e``: the path whose latest completed request took the least time end to end (a path
  nothing has used yet counts its traverse time ``T(p, r)``): a stale signal.
- ``greedy-intra``: the least intra-host JCT now, ``Q(p) + T(p, r)`` from the host's own queues;
  the thesis's k = 1 case of the LP.
- ``toll``: equation 6.5, ``T_total(p) = k_hat_p * Q_toll(p, r) + T(p, r)`` with the
  communication toll ``Q_toll(p, r) = sum_links S(r) / BW + sum_compute T_c``; ``k_hat_p`` starts
  at 0, grows by one for each completion on ``p`` slower than its traverse time, and resets to 0 on
  one that was not.
- ``lp``: the k-step optimum (equations 6.3, 6.4) over this request and the next k - 1 (the trace
  is known in advance, as in the thesis's evaluation), solved as a MILP with HiGHS; only the first
  decision is kept. ``max`` is exact as a lower bound because the objective only grows with a
  backlog; the product of a binary choice and a backlog is linearised with big-M. A later request in
  the horizon that must follow another of its type is held to that one's path (whether or not it
  will still be running then).

**Dependencies**: a request that must follow another (``after``) takes its predecessor's path while
that one is still in progress (the thesis's rule) and never completes before it; in the simulator
its transfer starts only once the predecessor has finished, so it is never overtaken.

The bulk split (:func:`plan_bulk`) is the one-shot case: bytes for several GPUs at once spread over
their candidate paths by a max-flow LP that shares every link between all of them.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import LinearConstraint, linprog, milp
from scipy.sparse import coo_matrix

from commgraph.errors import PlanError
from commgraph.plan.paths import (ComputeStep, PathSet, ResolvedPath, Segment, auto_path_set, candidate_paths,
                                  read_paths, resolve_paths)
from commgraph.plan.requests import (RequestStream, parse_poisson, poisson_stream, read_trace, trace_rows,
                                     with_ordered_types)
from commgraph.sim import SimResult, Transfer, simulate
from commgraph.sim.dag import Compute
from commgraph.topology import Topology

SELECTORS = ("direct", "greedy-e2e", "greedy-intra", "toll", "lp")
BULK_PLANNERS = ("direct", "lp")
_SLOWER = 1e-9  # a completion counts as queued when it took this fraction longer than its traverse time


class PathTable:
    """Every request type's resolved paths as arrays over *elements*: link directions
    ``0 .. 2L-1`` (the simulator's resource ids) and compute devices ``2L + device index``."""

    def __init__(self, topology: Topology, paths: PathSet):
        self.topology, self.path_set = topology, paths
        resolved = resolve_paths(paths, topology)
        self.paths: list[ResolvedPath] = [p for per_type in resolved for p in per_type]
        sizes = np.cumsum([0] + [len(per_type) for per_type in resolved])
        self.candidates = [np.arange(sizes[k], sizes[k + 1]) for k in range(len(resolved))]
        self.n_elements = 2 * len(topology.links) + len(topology.devices)
        self.groups: list[list[np.ndarray]] = []
        self.elements, self.per_byte, self.fixed = [], [], []
        for p in self.paths:
            groups, per_byte, fixed = [], [], []
            for step in p.steps:
                if isinstance(step, Segment):
                    groups.append(step.resources)
                    per_byte.append(step.inv_bandwidth)
                    fixed.append(np.zeros(step.resources.shape[0]))
                else:
                    groups.append(np.array([2 * len(topology.links) + topology.index[step.device]]))
                    per_byte.append(np.zeros(1))
                    fixed.append(np.array([step.seconds]))
            self.groups.append(groups)
            self.elements.append(np.concatenate(groups))
            self.per_byte.append(np.concatenate(per_byte))
            self.fixed.append(np.concatenate(fixed))
        self.base_fixed = np.array([p.fixed_seconds for p in self.paths])
        self.base_per_byte = np.array([p.seconds_per_byte for p in self.paths])
        self.toll_fixed = np.array([p.toll_seconds(0.0) for p in self.paths])
        self.toll_per_byte = np.array([p.toll_per_byte for p in self.paths])

    def traverse(self, path: int, nbytes: float) -> float:
        """T(p, r)."""
        return float(self.base_fixed[path] + nbytes * self.base_per_byte[path])

    def queue(self, path: int, backlog: np.ndarray) -> float:
        """Q(p): the wait a request arriving now on ``path`` has before it, in the model."""
        return float(sum(backlog[g].max() for g in self.groups[path]))

    def service(self, path: int, nbytes: float) -> np.ndarray:
        return nbytes * self.per_byte[path] + self.fixed[path]

    def direct_rate(self, kinds: np.ndarray, nbytes: np.ndarray) -> float:
        """Requests per second, types drawn uniformly from ``kinds`` with sizes ``nbytes``, at which
        the busiest element of the all-direct assignment is busy all the time."""
        work = np.zeros(self.n_elements)
        for kind, size in zip(kinds, nbytes):
            path = self.candidates[kind][0]
            np.add.at(work, self.elements[path], self.service(path, size) / len(kinds))
        return 1.0 / float(work.max())


@dataclass
class Workload:
    """A request stream and the paths its types may take; ``rate`` is the Poisson rate (requests
    per second), None for a trace."""

    table: PathTable
    stream: RequestStream
    rate: float | None


def load_workload(topology: Topology, spec: str, paths: PathSet | str | None = None) -> Workload:
    """``poisson:...`` or a CSV trace (see :mod:`commgraph.plan.requests`). Types are names of
    ``paths`` (a path set, or its YAML file), or ``SRC:DST`` specs with candidate paths from the
    topology."""
    path_set = read_paths(paths) if isinstance(paths, str) else paths
    if spec.startswith("poisson"):
        poisson = parse_poisson(spec)
        if path_set is None:
            if not poisson.types:
                raise PlanError("give the request types: types=SRC:DST[+SRC:DST...], or a path set with --paths")
            path_set = auto_path_set(topology, list(poisson.types), poisson.size, poisson.compute)
        elif poisson.compute:
            raise PlanError("compute= applies to SRC:DST types; a path set gives each type's compute itself")
        names = list(poisson.types) or [t.name for t in path_set.types]
        kinds = np.array([path_set.type_index(name) for name in names])
        table = PathTable(topology, PathSet(tuple(path_set.types[k] for k in kinds)))
        sizes = np.array([t.bytes for t in table.path_set.types])
        rate = poisson.rate or poisson.load * table.direct_rate(np.arange(len(kinds)), sizes)
        return Workload(table, _ordered(table, poisson_stream(poisson, sizes, rate)), rate)
    if path_set is None:
        rows = trace_rows(spec)
        if any(not row.get("bytes") for row in rows):
            raise PlanError(f"{spec}: without --paths, every row needs bytes (types are SRC:DST)")
        path_set = auto_path_set(topology, list(dict.fromkeys(row["type"] for row in rows)), 0.0)
    table = PathTable(topology, path_set)
    sizes = np.array([t.bytes for t in path_set.types])
    return Workload(table, _ordered(table, read_trace(spec, [t.name for t in path_set.types], sizes)), None)


def _ordered(table: PathTable, stream: RequestStream) -> RequestStream:
    """Requests of ``ordered`` types follow the previous one of their type."""
    return with_ordered_types(stream, np.array([t.dependency == "ordered" for t in table.path_set.types]))


# -- selectors ------------------------------------------------------------------------------------


class Selector:
    """Chooses a path for each request; ``observe`` hears of each completion when it happens."""

    name = ""

    def start(self, table: PathTable, stream: RequestStream) -> None:
        self.table, self.stream = table, stream

    def choose(self, t: int, backlog: np.ndarray) -> int:
        raise NotImplementedError

    def observe(self, path: int, jct: float, traverse: float) -> None:
        """A request on ``path`` completed after ``jct`` seconds; alone it would take ``traverse``."""

    def decided(self, t: int, path: int) -> None:
        """Request ``t`` takes ``path`` (this selector's choice, or its predecessor's path)."""


class Direct(Selector):
    name = "direct"

    def choose(self, t, backlog):
        return int(self.table.candidates[self.stream.kind[t]][0])


class GreedyE2E(Selector):
    name = "greedy-e2e"

    def start(self, table, stream):
        super().start(table, stream)
        self.last = np.full(len(table.paths), np.nan)

    def choose(self, t, backlog):
        candidates = self.table.candidates[self.stream.kind[t]]
        seen = self.last[candidates]
        alone = self.table.base_fixed[candidates] + self.stream.nbytes[t] * self.table.base_per_byte[candidates]
        return int(candidates[np.argmin(np.where(np.isnan(seen), alone, seen))])

    def observe(self, path, jct, traverse):
        self.last[path] = jct


class GreedyIntra(Selector):
    name = "greedy-intra"

    def choose(self, t, backlog):
        size, table = self.stream.nbytes[t], self.table
        costs = [table.queue(p, backlog) + table.traverse(p, size) for p in table.candidates[self.stream.kind[t]]]
        return int(table.candidates[self.stream.kind[t]][int(np.argmin(costs))])


class Toll(Selector):
    """Equation 6.5 in plain Python over a handful of candidates (microseconds per decision)."""

    name = "toll"

    def start(self, table, stream):
        super().start(table, stream)
        self.k_hat = [0] * len(table.paths)
        self.options = [[(int(p), float(table.toll_fixed[p]), float(table.toll_per_byte[p]),
                          float(table.base_fixed[p]), float(table.base_per_byte[p])) for p in c]
                        for c in table.candidates]
        self.kinds, self.sizes = stream.kind.tolist(), stream.nbytes.tolist()

    def choose(self, t, backlog):
        size, k_hat = self.sizes[t], self.k_hat
        best, best_cost = -1, float("inf")
        for p, toll_fixed, toll_per_byte, base_fixed, base_per_byte in self.options[self.kinds[t]]:
            cost = k_hat[p] * (toll_fixed + size * toll_per_byte) + base_fixed + size * base_per_byte
            if cost < best_cost:
                best, best_cost = p, cost
        return best

    def observe(self, path, jct, traverse):
        self.k_hat[path] = self.k_hat[path] + 1 if jct > traverse * (1 + _SLOWER) else 0


class LookaheadLP(Selector):
    """Equations 6.3-6.4 over the next ``k`` requests, solved with HiGHS (see the module docstring)."""

    name = "lp"

    def __init__(self, k: int = 8):
        if k < 1:
            raise PlanError(f"the LP's horizon k must be >= 1, got {k}")
        self.k = k

    def start(self, table, stream):
        super().start(table, stream)
        self.chosen = np.full(len(stream), -1, dtype=np.int64)

    def choose(self, t, backlog):
        return _solve_horizon(self.table, self.stream, t, min(self.k, len(self.stream) - t), backlog, self.chosen)

    def decided(self, t, path):
        self.chosen[t] = path


def make_selector(name: str, k: int = 8) -> Selector:
    kinds = {"direct": Direct, "greedy-e2e": GreedyE2E, "greedy-intra": GreedyIntra, "toll": Toll}
    if name == "lp":
        return LookaheadLP(k)
    if name not in kinds:
        raise PlanError(f"unknown selector {name!r}; choose from {', '.join(SELECTORS)} or all")
    return kinds[name]()


def _solve_horizon(table: PathTable, stream: RequestStream, t: int, k: int, backlog: np.ndarray,
                   chosen: np.ndarray) -> int:
    """The first decision of the k-step MILP from request ``t`` with the model's ``backlog`` now."""
    steps = range(t, t + k)
    cands = [table.candidates[stream.kind[s]] for s in steps]
    elements = np.unique(np.concatenate([table.elements[p] for c in cands for p in c]))
    col = {e: i for i, e in enumerate(elements.tolist())}
    n_x = sum(len(c) for c in cands)
    x = np.cumsum([0] + [len(c) for c in cands])  # x of step i, path j: x[i] + j
    b0 = n_x  # B of step i >= 1, element e: b0 + (i - 1) * len(elements) + col[e]
    n_b = (k - 1) * len(elements)
    objective = [0.0] * (n_x + n_b)
    rows, cols, vals, upper, lower = [], [], [], [], []

    def add_row(entries: list[tuple[int, float]], lo: float, hi: float) -> None:
        r = len(upper)
        for c, v in entries:
            rows.append(r), cols.append(c), vals.append(v)
        lower.append(lo), upper.append(hi)

    def new_var(cost: float) -> int:
        objective.append(cost)
        return len(objective) - 1

    # ceiling[i, e]: the most backlog element e can hold at step i (everything before it on e)
    ceiling = np.zeros((k, len(elements)))
    ceiling[0] = backlog[elements]
    for i, (s, c) in enumerate(zip(steps[:-1], cands[:-1])):
        most = np.zeros(table.n_elements)
        for p in c:
            np.maximum.at(most, table.elements[p], table.service(p, stream.nbytes[s]))
        ceiling[i + 1] = ceiling[i] + most[elements]
    for i, (s, c) in enumerate(zip(steps, cands)):
        add_row([(x[i] + j, 1.0) for j in range(len(c))], 1.0, 1.0)  # (6.4)
        size = stream.nbytes[s]
        for j, p in enumerate(c):
            base = table.traverse(p, size)
            if i == 0:
                objective[x[i] + j] = table.queue(p, backlog) + base
                continue
            objective[x[i] + j] = base
            marks = [new_var(0.0) for _ in table.groups[p]]
            for g, mark in zip(table.groups[p], marks):
                for e in g.tolist():  # m >= B_e
                    add_row([(b0 + (i - 1) * len(elements) + col[e], 1.0), (mark, -1.0)], -np.inf, 0.0)
            big_m = sum(float(ceiling[i, [col[e] for e in g.tolist()]].max()) for g in table.groups[p])
            w = new_var(1.0)  # w >= sum m - M (1 - x)
            add_row([(m, 1.0) for m in marks] + [(w, -1.0), (x[i] + j, big_m)], -np.inf, big_m)
        predecessor = stream.after[s]
        if predecessor >= 0 and stream.kind[predecessor] == stream.kind[s]:
            if predecessor >= t:  # in the horizon: the same path
                i0 = predecessor - t
                for j in range(len(c)):
                    add_row([(x[i] + j, 1.0), (x[i0] + j, -1.0)], 0.0, 0.0)
            elif i > 0:
                j = int(np.flatnonzero(c == chosen[predecessor])[0])
                add_row([(x[i] + j, 1.0)], 1.0, 1.0)
        if i + 1 < k:  # (6.1, 6.2): B_{i+1} >= B_i + service - dt, as a lower bound
            dt = float(stream.arrival[s + 1] - stream.arrival[s])
            adds: dict[int, list[tuple[int, float]]] = {}
            for j, p in enumerate(c):
                for e, v in zip(table.elements[p].tolist(), table.service(p, size).tolist()):
                    adds.setdefault(e, []).append((x[i] + j, v))
            for e, ce in col.items():
                entries = [(b0 + i * len(elements) + ce, -1.0)] + adds.get(e, [])
                if i == 0:
                    add_row(entries, -np.inf, dt - float(backlog[e]))
                else:
                    add_row(entries + [(b0 + (i - 1) * len(elements) + ce, 1.0)], -np.inf, dt)
    n = len(objective)
    matrix = coo_matrix((vals, (rows, cols)), shape=(len(upper), n)).tocsr()
    integrality = np.zeros(n)
    integrality[:n_x] = 1
    upper_bounds = np.full(n, np.inf)
    upper_bounds[:n_x] = 1.0
    upper_bounds[b0 : b0 + n_b] = ceiling[1:].ravel()
    result = milp(np.array(objective), constraints=LinearConstraint(matrix, lower, upper), integrality=integrality,
                  bounds=(np.zeros(n), upper_bounds), options={"mip_rel_gap": 1e-6})
    if result.status != 0 or result.x is None:
        raise PlanError(f"the path-selection MILP failed at request {t}: {result.message}")
    return int(cands[0][int(np.argmax(result.x[: len(cands[0])]))])


# -- the online run and its price -----------------------------------------------------------------


@dataclass
class Selection:
    """One selector's choices: ``path`` per request (index into ``PathTable.paths``), the model's
    ``completion`` times, and seconds spent deciding each request."""

    selector: str
    path: np.ndarray
    completion: np.ndarray
    decide_seconds: np.ndarray

    def model_jct(self, stream: RequestStream) -> np.ndarray:
        return self.completion - stream.arrival


def select(table: PathTable, stream: RequestStream, selector: Selector) -> Selection:
    """Run ``selector`` over the stream in arrival order on the request-level model: completions
    are reported to it when they happen, dependencies pin a request to its predecessor's path."""
    n = len(stream)
    selector.start(table, stream)
    backlog = np.zeros(table.n_elements)
    path = np.full(n, -1, dtype=np.int64)
    completion, decide = np.zeros(n), np.zeros(n)
    pending: list[tuple[float, int]] = []
    now = 0.0
    for t in range(n):
        arrival = float(stream.arrival[t])
        while pending and pending[0][0] <= arrival:
            _, done = heapq.heappop(pending)
            selector.observe(int(path[done]), completion[done] - stream.arrival[done],
                             table.traverse(int(path[done]), stream.nbytes[done]))
        np.maximum(backlog - (arrival - now), 0.0, out=backlog)
        now = arrival
        before = stream.after[t]
        candidates = table.candidates[stream.kind[t]]
        if before >= 0 and completion[before] > arrival and path[before] in candidates:
            choice = int(path[before])
        else:
            tick = time.perf_counter()
            choice = selector.choose(t, backlog)
            decide[t] = time.perf_counter() - tick
        path[t] = choice
        selector.decided(t, choice)
        jct = table.queue(choice, backlog) + table.traverse(choice, stream.nbytes[t])
        completion[t] = max(arrival + jct, completion[before] if before >= 0 else 0.0)
        np.add.at(backlog, table.elements[choice], table.service(choice, stream.nbytes[t]))
        heapq.heappush(pending, (completion[t], t))
    return Selection(selector.name, path, completion, decide)


def request_tasks(table: PathTable, stream: RequestStream, path: np.ndarray) -> tuple[list, np.ndarray]:
    """The simulator's DAG for a selection: per request a timer that fires at its arrival, then its
    path's steps in order (transfers on an explicit route, computes on their device), after its
    predecessor's last step. Returns (tasks, index of each request's last task)."""
    tasks: list = []
    last = np.zeros(len(stream), dtype=np.int64)
    for t in range(len(stream)):
        p = table.paths[path[t]]
        origin = p.path.devices[0]
        tasks.append(Transfer(f"r{t}", origin, origin, 0.0, overhead_s=float(stream.arrival[t])))
        deps = (f"r{t}",) if stream.after[t] < 0 else (f"r{t}", tasks[last[stream.after[t]]].id)
        for n, step in enumerate(p.steps):
            name = f"r{t}.{n}"
            if isinstance(step, ComputeStep):
                tasks.append(Compute(name, step.device, step.seconds, deps))
            else:
                tasks.append(Transfer(name, step.devices[0], step.devices[-1], float(stream.nbytes[t]),
                                      route=step.devices, deps=deps))
            deps = (name,)
        last[t] = len(tasks) - 1
    return tasks, last


@dataclass
class Priced:
    """A selection run on the flow simulator: per-request completion time (arrival to last byte
    or compute) and the simulator's result (link use)."""

    jct: np.ndarray
    result: SimResult = field(repr=False)

    def summary(self) -> dict:
        return {"mean_s": float(self.jct.mean()), "median_s": float(np.median(self.jct)),
                "p99_s": float(np.percentile(self.jct, 99)), "max_s": float(self.jct.max())}


def price_selection(table: PathTable, stream: RequestStream, path: np.ndarray) -> Priced:
    tasks, last = request_tasks(table, stream, path)
    result = simulate(table.topology, tasks, timeline=False)
    return Priced(result.finish[last] - stream.arrival, result)


# -- bulk transfers split over paths --------------------------------------------------------------


@dataclass(frozen=True)
class BulkPart:
    gpu: str
    devices: tuple[str, ...]
    bytes: float

    def to_dict(self) -> dict:
        return {"gpu": self.gpu, "devices": list(self.devices), "bytes": self.bytes}


@dataclass(frozen=True)
class BulkPlan:
    """``parts`` carrying each GPU's bytes; ``bound_seconds`` is the max-flow bound (the LP's
    optimum, latencies left out) for ``lp`` and the route's own for ``direct``."""

    planner: str
    parts: tuple[BulkPart, ...]
    bound_seconds: float

    def tasks(self) -> list[Transfer]:
        """Transfers for the simulator; the ``lp`` split caps each part at its LP rate, so the
        simulator runs the LP's flow rather than its own max-min shares."""
        capped = self.planner == "lp" and self.bound_seconds > 0
        return [Transfer(f"{part.gpu}.{n}", part.devices[0], part.devices[-1], part.bytes, route=part.devices,
                         max_rate=part.bytes / self.bound_seconds if capped else None)
                for n, part in enumerate(self.parts) if part.bytes > 0]


def plan_bulk(topology: Topology, src: str, gpus: list[str], nbytes: float, planner: str) -> BulkPlan:
    """``nbytes`` from ``src`` to each of ``gpus`` at once. ``direct``: each GPU's route.
    ``lp``: the split over every GPU's candidate paths (:func:`candidate_paths`) minimising the time
    ``T`` by which all arrive, subject to every link direction (and every switch with a forwarding
    limit) carrying at most its bandwidth x ``T``, all GPUs' parts together."""
    if planner not in BULK_PLANNERS:
        raise PlanError(f"unknown bulk planner {planner!r}; choose from {', '.join(BULK_PLANNERS)} or all")
    if not nbytes > 0:
        raise PlanError(f"--bytes must be > 0, got {nbytes}")
    if not gpus or len(set(gpus)) != len(gpus):
        raise PlanError(f"give each target GPU once, got {gpus}")
    per_gpu = {gpu: candidate_paths(topology, src, gpu) for gpu in gpus}
    if planner == "direct":
        parts = tuple(BulkPart(gpu, paths[0].devices, nbytes) for gpu, paths in per_gpu.items())
        return BulkPlan("direct", parts, _bound(topology, parts))
    columns = [(gpu, p.devices) for gpu, paths in per_gpu.items() for p in paths]
    counts = _resource_counts(topology, [devices for _, devices in columns])  # [resources, columns]
    capacity = _capacities(topology)
    limited = np.isfinite(capacity) & (counts.sum(axis=1) > 0)
    n = len(columns)
    # variables: each column's share of a GPU's bytes, then T (seconds)
    objective = np.concatenate([np.zeros(n), [1.0]])
    a_ub = np.hstack([counts[limited], -(capacity[limited] / nbytes)[:, None]])
    a_eq = np.zeros((len(gpus), n + 1))
    for j, (gpu, _) in enumerate(columns):
        a_eq[gpus.index(gpu), j] = 1.0
    result = linprog(objective, A_ub=a_ub, b_ub=np.zeros(a_ub.shape[0]), A_eq=a_eq, b_eq=np.ones(len(gpus)),
                     bounds=[(0, None)] * (n + 1), method="highs")
    if result.status != 0:
        raise PlanError(f"the bulk-split LP failed: {result.message}")
    parts = tuple(BulkPart(gpu, devices, float(share * nbytes)) for (gpu, devices), share
                  in zip(columns, result.x[:n]) if share > 1e-9)
    return BulkPlan("lp", parts, float(result.x[n]))


def _capacities(topology: Topology) -> np.ndarray:
    """Bytes per second of each link direction, then of each device (a forwarding limit, or none)."""
    links = np.repeat([link.bandwidth_gbps * 1e9 for link in topology.links], 2)
    devices = np.array([d.forward_gbps * 1e9 if d.forward_gbps else np.inf for d in topology.devices])
    return np.concatenate([links, devices])


def _resource_counts(topology: Topology, routes: list[tuple[str, ...]]) -> np.ndarray:
    """[resources, routes]: how many times each route crosses each link direction, and each device
    it forwards through (intermediate devices)."""
    counts = np.zeros((2 * len(topology.links) + len(topology.devices), len(routes)))
    for j, devices in enumerate(routes):
        for a, b in zip(devices, devices[1:]):
            k = max(topology.links_between(a, b), key=lambda i: topology.links[i].bandwidth_gbps)
            counts[2 * k + (0 if topology.links[k].a == a else 1), j] += 1
        for device in devices[1:-1]:
            counts[2 * len(topology.links) + topology.index[device], j] += 1
    return counts


def _bound(topology: Topology, parts: tuple[BulkPart, ...]) -> float:
    """The time the busiest resource needs for everything the parts put on it."""
    load = _resource_counts(topology, [p.devices for p in parts]) @ np.array([p.bytes for p in parts])
    return float((load / _capacities(topology)).max())


# -- a comparison of selectors on one workload ----------------------------------------------------


@dataclass
class SelectorReport:
    selection: Selection
    priced: Priced

    def to_dict(self, table: PathTable, stream: RequestStream, links: int = 8) -> dict:
        """The simulated completion times, the model's mean, decision time, path shares and the
        busiest ``links`` link directions."""
        counts = np.bincount(self.selection.path, minlength=len(table.paths))
        rows = sorted(self.priced.result.link_rows(), key=lambda row: -row["utilisation"])[:links]
        return {**self.priced.summary(),
                "model_mean_s": float(self.selection.model_jct(stream).mean()),
                "decide_us": float(self.selection.decide_seconds.mean() * 1e6),
                "paths": {table.paths[p].path.name: int(c) for p, c in enumerate(counts) if c},
                "links": [{"link": r["link"], "kind": r["kind"], "utilisation": r["utilisation"]} for r in rows]}


def compare_selectors(workload: Workload, names: list[str], k: int = 8, progress=None) -> dict[str, SelectorReport]:
    """Each selector run on the model, then its choices priced on the flow simulator."""
    reports = {}
    for name in names:
        selection = select(workload.table, workload.stream, make_selector(name, k))
        reports[name] = SelectorReport(selection, price_selection(workload.table, workload.stream, selection.path))
        if progress is not None:
            progress(name)
    return reports
