"""Multi-path selection inside a host (LEO, thesis chapter 6.2.2): which communication path each
request of a stream takes, decided online, then priced on the flow-level simulator.

**The request-level model** (equations 6.1, 6.2). Every link direction and every compute server
``e`` keeps a backlog ``B_e`` in seconds of work (a device with ``cores`` has that many servers,
thesis section 6.2.2, "parallel processing at compute node"). Between arrivals it drains,
``B_e <- max(B_e - dt, 0)``; a request ``r`` placed on path ``p`` adds its service ``S(r) / BW(e)``
to each of p's links and ``T_c(e, r)`` to the least backlogged server of each compute device. A
request arriving on ``p`` completes after

    JCT(p, r) = Q(p) + T(p, r),
    Q(p) = sum over p's segments of max_{e in segment} B_e + sum over p's compute devices of min_server B_e,

where ``T(p, r)`` is the request alone on ``p`` (latency, bytes at each segment's bottleneck,
compute). The thesis sums every element's queue; here a transfer segment counts its most backlogged
link once, because a DMA streams through all links of a route at once (cut-through), which is what
the flow simulator does: a request alone, or a burst on one link, finishes in the model when it
finishes in the simulator. Queues of separate segments and compute devices add up
(store-and-forward between them), as in the thesis.

**Selectors.** The baselines are the thesis's (section 6.4.3), fed what a dispatcher really sees:
completions, never the host's queues.

- ``direct``: always the type's first path (the topology's route; the accelerator for a KVS GET).
- ``greedy-intra`` (the thesis's Greedy-Intra): the path whose latest *completed* request had the
  least intra-host JCT (a path nothing has completed on yet counts its traverse time ``T(p, r)``).
  A request dispatched but not completed is invisible to it.
- ``greedy-e2e`` (Greedy-E2E): the same rule fed end-to-end times, the intra-host JCT plus the
  requester NIC's delay, uniform in ``jitter`` (default 3-9 us, the thesis's network variation; a
  path with no completion yet counts ``T`` plus the mean delay).
- ``toll``: equation 6.5 as written, ``T_total(p) = k_hat_p * Q_toll(p, r) + T(p, r)`` with the
  base traverse time ``T``, the communication toll ``Q_toll(p, r) = sum_links S(r) / BW +
  sum_compute T_c``; ``k_hat_p`` starts at 0, grows by one for each completion on ``p`` slower
  than its traverse time, and resets to 0 on one that was not.
- ``toll-jct``: the same with the reading of the thesis's online phase ("based on both the current
  JCT and the communication toll"): ``k_hat_p * Q_toll(p, r) + JCT_p``, the latest completed JCT
  on ``p`` in place of ``T`` (``T`` before any).
- ``toll-inflight``: equation 6.5 fed what a single dispatcher knows exactly instead of stale
  completions: its own requests in flight on each path (dispatched, not yet completed; a completion
  takes one off) and the static path costs. With ``n_p`` in flight, ``T = T(p, r)`` and ``b`` the
  request's occupancy of p's bottleneck (a link's ``S / BW``, or a compute device's
  ``T_c / cores``), p holds ``T / b`` requests, this one included, before they queue; so this one
  waits about ``q b`` with ``q = n_p + 1 - T / b``. ``k_hat_p`` is the thesis's counter read at dispatch: it
  grows by one for each request sent to ``p`` while ``q > 0`` and resets when one is sent with
  ``q <= 0``. ``T_total(p) = T + q b + k_hat_p b`` while ``q > 0``, else ``T``. It reads no queue
  of the model and decides in about a microsecond.
- ``greedy-queue``: the least intra-host JCT now, ``Q(p) + T(p, r)``, read from the model's own
  queues, including requests dispatched a moment ago: the thesis's k = 1 case of the LP. It knows
  what no dispatcher measures, and prices each request exactly as the simulator serves it (on the
  key-value store the model's mean and median completion times are the simulator's on YCSB-C, its
  mean within 0.5 us on YCSB-B), but it is *myopic*: the best path for this request alone, blind to
  the wait it adds to the requests behind it. So it is no optimum of the stream and a rule that
  knows less can beat it (``toll-inflight`` does on the key-value store, by sending more GETs to the
  CPU); never the greedy rule results compare against.
- ``lp``: the k-step optimum (equations 6.3, 6.4) over this request and the next k - 1 (the trace
  is known in advance, as in the thesis's evaluation), solved as a MILP with HiGHS; only the first
  decision is kept. Myopic past its horizon as ``greedy-queue`` is past one request: an optimum of
  the stream only when k spans a busy period. ``max`` is exact as a lower bound because the objective only grows with a
  backlog; the product of a binary choice and a backlog is linearised with big-M; a request for a
  device with several servers chooses the server too. Times enter it in units of the request's
  traverse time: in seconds, microsecond services sit under HiGHS's 1e-7 tolerances. A solve
  stops after :data:`LP_SECONDS` with its best solution (counted in :data:`LP_STATS`). A later
  request in the horizon that must follow another of its type is held to that one's path (whether
  or not it will still be running then).

**Dependencies**: a request that must follow another (``after``) takes its predecessor's path (the
same devices) while that one is still in progress (the thesis's rule) and never completes before
it; in the simulator its transfer starts only once the predecessor has finished, so it is never
overtaken.

**Workloads**: ``poisson:...``, a CSV trace, or ``kvs:...``, the thesis's key-value store
(section 6.4.2, :func:`commgraph.plan.requests.parse_kvs`): GETs served by the accelerator or the
CPU, PUTs by the CPU only, two round trips each (an index lookup where the path computes, then the
value read or written in host memory), the CPU with ``cores`` servers.

The bulk split (:func:`plan_bulk`) is the one-shot case: bytes for several GPUs at once spread over
their candidate paths by a max-flow LP that shares every link between all of them.
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import LinearConstraint, linprog, milp
from scipy.sparse import coo_matrix

from commgraph.errors import PlanError
from commgraph.plan.paths import (CommPath, ComputeStep, PathSet, RequestType, ResolvedPath, Segment, auto_path_set,
                                  candidate_paths, read_paths, resolve_paths)
from commgraph.plan.requests import (KvsSpec, RequestStream, kvs_stream, parse_kvs, parse_poisson, poisson_stream,
                                     read_trace, trace_rows, with_ordered_types)
from commgraph.sim import SimResult, Transfer, simulate
from commgraph.sim.dag import Compute
from commgraph.topology import Topology

SELECTORS = ("direct", "greedy-intra", "greedy-e2e", "toll", "toll-jct", "toll-inflight", "greedy-queue", "lp")
FAITHFUL_GREEDY = ("greedy-intra", "greedy-e2e")  # what a selector is compared against
BULK_PLANNERS = ("direct", "lp")
JITTER = (3e-6, 9e-6)  # the requester NIC's delay (seconds), thesis section 6.4.1
LP_SECONDS = 2.0  # the most one MILP solve may take; then its best solution so far is kept
LP_STATS = {"solves": 0, "time_limited": 0}  # counted over the process, for the benchmark's report
_SLOWER = 1e-9  # a completion counts as queued when it took this fraction longer than its traverse time


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
        self.neck_seconds = np.array([max([g.seconds / g.elements.shape[0] for g in gs if g.compute] or [0.0])
                                      for gs in self.groups])
        self.neck_per_byte = np.array([max([float(g.per_byte.max()) for g in gs if not g.compute] or [0.0])
                                       for gs in self.groups])
        # per type: a path's devices -> the candidate with the same devices (a predecessor's path)
        self.same_route = [{self.paths[p].path.devices: int(p) for p in c} for c in self.candidates]

    def traverse(self, path: int, nbytes: float) -> float:
        """T(p, r)."""
        return float(self.base_fixed[path] + nbytes * self.base_per_byte[path])

    def queue(self, path: int, backlog: np.ndarray) -> float:
        """Q(p): the wait a request arriving now on ``path`` has before it, in the model."""
        return float(sum(backlog[g.elements].min() if g.compute else backlog[g.elements].max()
                         for g in self.groups[path]))

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
        work = sum(share * self.work(int(self.candidates[k][0]), size)
                   for k, (share, size) in enumerate(zip(shares, nbytes)) if share > 0)
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
        result = linprog(np.concatenate([np.zeros(n), [-1.0]]), A_ub=a_ub,
                         b_ub=np.ones(busy.sum()), A_eq=a_eq, b_eq=np.zeros(len(shares)), bounds=[(0, None)] * (n + 1),
                         method="highs")
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
class Workload:
    """A request stream and the paths its types may take; ``rate`` is the Poisson rate (requests
    per second), None for a trace; ``shares`` each type's share of the requests; ``keys`` each
    request's key (a KVS workload) or None."""

    table: PathTable
    stream: RequestStream
    rate: float | None
    label: str = ""
    shares: np.ndarray | None = None
    keys: np.ndarray | None = None

    @property
    def sizes(self) -> np.ndarray:
        return np.array([t.bytes for t in self.table.path_set.types])

    def direct_rate(self) -> float:
        """The all-direct assignment's capacity (requests per second)."""
        return self.table.direct_rate(self._shares(), self.sizes)

    def combined_rate(self) -> float:
        """Every path's capacity together (requests per second)."""
        return self.table.combined_rate(self._shares(), self.sizes)

    def _shares(self) -> np.ndarray:
        if self.shares is not None:
            return self.shares
        return np.bincount(self.stream.kind, minlength=len(self.table.path_set.types)) / len(self.stream)


def load_workload(topology: Topology, spec: str, paths: PathSet | str | None = None) -> Workload:
    """``poisson:...``, ``kvs:...`` or a CSV trace (see :mod:`commgraph.plan.requests`). Types are
    names of ``paths`` (a path set, or its YAML file), or ``SRC:DST`` specs with candidate paths
    from the topology."""
    path_set = read_paths(paths) if isinstance(paths, str) else paths
    if spec.startswith("kvs"):
        if path_set is not None:
            raise PlanError("a kvs workload builds its own paths: leave out --paths")
        return kvs_workload(topology, parse_kvs(spec))
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
        shares = np.full(len(kinds), 1.0 / len(kinds))
        rate = poisson.rate or poisson.load * table.direct_rate(shares, sizes)
        return Workload(table, _ordered(table, poisson_stream(poisson, sizes, rate)), rate, spec, shares)
    if path_set is None:
        rows = trace_rows(spec)
        if any(not row.get("bytes") for row in rows):
            raise PlanError(f"{spec}: without --paths, every row needs bytes (types are SRC:DST)")
        path_set = auto_path_set(topology, list(dict.fromkeys(row["type"] for row in rows)), 0.0)
    table = PathTable(topology, path_set)
    sizes = np.array([t.bytes for t in path_set.types])
    return Workload(table, _ordered(table, read_trace(spec, [t.name for t in path_set.types], sizes)), None, spec)


def _ordered(table: PathTable, stream: RequestStream) -> RequestStream:
    """Requests of ``ordered`` types follow the previous one of their type."""
    return with_ordered_types(stream, np.array([t.dependency == "ordered" for t in table.path_set.types]))


def kvs_paths(topology: Topology, spec: KvsSpec) -> tuple[PathSet, dict[str, int]]:
    """The key-value store's request types on ``topology`` and its CPU's cores. A GET is served by
    the accelerator (its first path, ``direct``) or by the CPU, a PUT by the CPU only; each is two
    round trips from the NIC: the index lookup where the path computes, then the value read (or
    written) in host memory by the NIC, which no core serves. Devices: ``spec.nic``, ``spec.acc``,
    ``spec.cpu``, by default the first NIC, the first accelerator (else the first GPU) and the first
    CPU. Each request moves ``key + value`` bytes over every link it crosses."""

    def first(kinds: tuple[str, ...], given: str | None, what: str) -> str:
        if given is not None:
            topology.device(given)
            return given
        for kind in kinds:
            found = [d.id for d in topology.devices if d.kind == kind]
            if found:
                return found[0]
        raise PlanError(f"topology {topology.name!r} has no {what} for the kvs workload; name one with {what}=")

    nic, cpu = first(("nic",), spec.nic, "nic"), first(("cpu",), spec.cpu, "cpu")
    acc = first(("accelerator", "gpu"), spec.acc, "acc")

    def via(a: str, b: str) -> tuple[str, ...]:
        return (a, *(h.dst for h in topology.route(a, b)))

    value_trip = via(nic, cpu)[1:] + via(cpu, nic)[1:]  # the second round trip: host memory, no core
    on_acc = via(nic, acc) + via(acc, nic)[1:] + value_trip
    on_cpu = via(nic, cpu) + via(cpu, nic)[1:] + value_trip
    nbytes = spec.key + spec.value
    get = RequestType("get", nbytes, (CommPath(on_acc, ((acc, spec.acc_us * 1e-6),)),
                                      CommPath(on_cpu, ((cpu, spec.cpu_us * 1e-6),))))
    put = RequestType("put", nbytes, (CommPath(on_cpu, ((cpu, spec.put_us * 1e-6),)),))
    return PathSet((get, put)), {cpu: spec.cores}


def kvs_workload(topology: Topology, spec: KvsSpec) -> Workload:
    """The thesis's key-value store on ``topology`` (:func:`kvs_paths`), at ``spec.rate`` or at
    ``spec.load`` times the direct paths' capacity (GETs on the accelerator, PUTs on the CPU)."""
    path_set, cores = kvs_paths(topology, spec)
    table = PathTable(topology, path_set, cores)
    shares, sizes = np.array([spec.get, spec.put]), np.array([t.bytes for t in path_set.types])
    rate = spec.rate or spec.load * table.direct_rate(shares, sizes)
    stream, keys = kvs_stream(spec, sizes, rate)
    return Workload(table, stream, rate, spec.name, shares, keys)


# -- selectors ------------------------------------------------------------------------------------


class Selector:
    """Chooses a path for each request; ``observe`` hears of each completion when it happens,
    ``decided`` of each dispatch."""

    name = ""

    def start(self, table: PathTable, stream: RequestStream) -> None:
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


class Direct(Selector):
    name = "direct"

    def choose(self, t, backlog):
        return int(self.table.candidates[self.stream.kind[t]][0])


class GreedyIntra(Selector):
    """The thesis's Greedy-Intra: least latest *completed* intra-host JCT."""

    name = "greedy-intra"

    prior = 0.0  # added to T(p, r) on a path with no completion yet

    def start(self, table, stream):
        super().start(table, stream)
        self.last = [None] * len(table.paths)
        self.options = [[(int(p), float(table.base_fixed[p]) + self.prior, float(table.base_per_byte[p])) for p in c]
                        for c in table.candidates]
        self.kinds, self.sizes = stream.kind.tolist(), stream.nbytes.tolist()

    def choose(self, t, backlog):
        size, last = self.sizes[t], self.last
        best, best_cost = -1, float("inf")
        for p, fixed, per_byte in self.options[self.kinds[t]]:
            cost = last[p] if last[p] is not None else fixed + size * per_byte
            if cost < best_cost:
                best, best_cost = p, cost
        return best

    def observe(self, request, path, jct, traverse):
        self.last[path] = jct


class GreedyE2E(GreedyIntra):
    """The thesis's Greedy-E2E: Greedy-Intra fed end-to-end times, the JCT plus the requester
    NIC's delay (uniform in ``jitter`` seconds); a path with no completion yet counts ``T`` plus
    the mean delay."""

    name = "greedy-e2e"

    def __init__(self, jitter: tuple[float, float] = JITTER, seed: int = 0):
        if not 0 <= jitter[0] <= jitter[1]:
            raise PlanError(f"the jitter must be LO-HI with 0 <= LO <= HI, got {jitter}")
        self.jitter, self.seed = jitter, seed
        self.prior = (jitter[0] + jitter[1]) / 2  # an unused path: T plus the mean delay

    def start(self, table, stream):
        super().start(table, stream)
        self.rng = np.random.default_rng(self.seed)

    def observe(self, request, path, jct, traverse):
        self.last[path] = jct + float(self.rng.uniform(*self.jitter))


class GreedyQueue(Selector):
    """The least intra-host JCT from the model's live queues: the k = 1 LP, a reference."""

    name = "greedy-queue"

    def choose(self, t, backlog):
        size, table = self.stream.nbytes[t], self.table
        costs = [table.queue(p, backlog) + table.traverse(p, size) for p in table.candidates[self.stream.kind[t]]]
        return int(table.candidates[self.stream.kind[t]][int(np.argmin(costs))])


class Toll(Selector):
    """Equation 6.5 in plain Python over a handful of candidates (microseconds per decision), with
    the base traverse time ``T`` (``current=False``) or the latest completed JCT (``current=True``,
    ``toll-jct``)."""

    name = "toll"

    def __init__(self, current: bool = False):
        self.current = current
        self.name = "toll-jct" if current else "toll"

    def start(self, table, stream):
        super().start(table, stream)
        self.k_hat = [0] * len(table.paths)
        self.last = [None] * len(table.paths)
        self.options = [[(int(p), float(table.toll_fixed[p]), float(table.toll_per_byte[p]),
                          float(table.base_fixed[p]), float(table.base_per_byte[p])) for p in c]
                        for c in table.candidates]
        self.kinds, self.sizes = stream.kind.tolist(), stream.nbytes.tolist()

    def choose(self, t, backlog):
        size, k_hat, last = self.sizes[t], self.k_hat, self.last
        best, best_cost = -1, float("inf")
        for p, toll_fixed, toll_per_byte, base_fixed, base_per_byte in self.options[self.kinds[t]]:
            now = last[p] if self.current and last[p] is not None else base_fixed + size * base_per_byte
            cost = k_hat[p] * (toll_fixed + size * toll_per_byte) + now
            if cost < best_cost:
                best, best_cost = p, cost
        return best

    def observe(self, request, path, jct, traverse):
        self.k_hat[path] = self.k_hat[path] + 1 if jct > traverse * (1 + _SLOWER) else 0
        self.last[path] = jct


class TollInflight(Selector):
    """The toll trade-off from the dispatcher's own requests in flight per path and the static path
    costs (module docstring): ``T + q b + k_hat b`` while ``q > 0``, ``T`` otherwise."""

    name = "toll-inflight"

    def start(self, table, stream):
        super().start(table, stream)
        self.inflight = [0] * len(table.paths)
        self.k_hat = [0] * len(table.paths)
        self.options = [{int(p): (float(table.base_fixed[p]), float(table.base_per_byte[p]),
                                  float(table.neck_seconds[p]), float(table.neck_per_byte[p])) for p in c}
                        for c in table.candidates]
        self.kinds, self.sizes = stream.kind.tolist(), stream.nbytes.tolist()

    def _queued(self, p: int, size: float, costs: tuple[float, float, float, float]) -> tuple[float, float, float]:
        """(T, b, q): the request alone, its bottleneck occupancy, and how many of p's in-flight
        requests it would wait for at the bottleneck (p holds ``T / b``, this one included, without
        queueing)."""
        fixed, per_byte, neck_seconds, neck_per_byte = costs
        alone, neck = fixed + size * per_byte, max(neck_seconds, size * neck_per_byte)
        return alone, neck, (self.inflight[p] + 1 - alone / neck if neck > 0 else 0.0)

    def choose(self, t, backlog):
        size, k_hat = self.sizes[t], self.k_hat
        best, best_cost = -1, float("inf")
        for p, costs in self.options[self.kinds[t]].items():
            alone, neck, queued = self._queued(p, size, costs)
            cost = alone + (queued + k_hat[p]) * neck if queued > 0 else alone
            if cost < best_cost:
                best, best_cost = p, cost
        return best

    def decided(self, t, path):
        costs = self.options[self.kinds[t]].get(path)
        if costs is not None:  # k_hat: requests sent in a row into p's queue, reset when it is empty
            self.k_hat[path] = self.k_hat[path] + 1 if self._queued(path, self.sizes[t], costs)[2] > 0 else 0
        self.inflight[path] += 1

    def observe(self, request, path, jct, traverse):
        self.inflight[path] -= 1


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


def make_selector(name: str, k: int = 8, jitter: tuple[float, float] = JITTER, seed: int = 0) -> Selector:
    """A selector by name (:data:`SELECTORS`); ``k`` is the LP's horizon, ``jitter`` (seconds) and
    ``seed`` greedy-e2e's requester-NIC delay."""
    if name == "lp":
        return LookaheadLP(k)
    if name == "greedy-e2e":
        return GreedyE2E(jitter, seed)
    kinds = {"direct": Direct, "greedy-intra": GreedyIntra, "greedy-queue": GreedyQueue, "toll": Toll,
             "toll-inflight": TollInflight}
    if name == "toll-jct":
        return Toll(current=True)
    if name not in kinds:
        raise PlanError(f"unknown selector {name!r}; choose from {', '.join(SELECTORS)} or all")
    return kinds[name]()


def _solve_horizon(table: PathTable, stream: RequestStream, t: int, k: int, backlog: np.ndarray,
                   chosen: np.ndarray) -> int:
    """The first decision of the k-step MILP from request ``t`` with the model's ``backlog`` now.
    Its columns are (path, variant): a request for a device with several servers picks one (at
    step 0 the least backlogged one, where the model puts it)."""
    steps = range(t, t + k)
    cands = [table.candidates[stream.kind[s]] for s in steps]
    # in units of this request's traverse time on its first path: HiGHS misjudges microsecond-sized
    # coefficients given in seconds
    unit = max(table.traverse(int(cands[0][0]), stream.nbytes[t]), 1e-12)
    backlog = backlog / unit
    options = [[(int(p), v) for p in c for v in table.variants(int(p), backlog if i == 0 else None)]
               for i, c in enumerate(cands)]
    elements = np.unique(np.concatenate([v_e for opts in options for _, v in opts for v_e, *_ in v]))
    col = {e: i for i, e in enumerate(elements.tolist())}
    n_x = sum(len(o) for o in options)
    x = np.cumsum([0] + [len(o) for o in options])  # x of step i, option j: x[i] + j
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

    def service(variant, size: float) -> list[tuple[int, float]]:
        return [(int(e), float(v) / unit) for elems, compute, per_byte, seconds in variant
                for e, v in zip(elems.tolist(), (np.full(elems.shape[0], seconds) if compute else size * per_byte))]

    # ceiling[i, e]: the most backlog element e can hold at step i (everything before it on e)
    ceiling = np.zeros((k, len(elements)))
    ceiling[0] = backlog[elements]
    for i, s in enumerate(steps[:-1]):
        most = np.zeros(table.n_elements)
        for _, v in options[i]:
            total = np.zeros(table.n_elements)  # a path may cross a link direction twice (two round trips)
            for e, amount in service(v, stream.nbytes[s]):
                total[e] += amount
            np.maximum(most, total, out=most)
        ceiling[i + 1] = ceiling[i] + most[elements]
    for i, s in enumerate(steps):
        add_row([(x[i] + j, 1.0) for j in range(len(options[i]))], 1.0, 1.0)  # (6.4)
        size = stream.nbytes[s]
        for j, (p, v) in enumerate(options[i]):
            base = table.traverse(p, size) / unit
            if i == 0:
                objective[x[i] + j] = sum(float(backlog[el].max()) for el, *_ in v) + base
                continue
            objective[x[i] + j] = base
            marks = [new_var(0.0) for _ in v]
            for (el, *_), mark in zip(v, marks):
                for e in el.tolist():  # m >= B_e
                    add_row([(b0 + (i - 1) * len(elements) + col[e], 1.0), (mark, -1.0)], -np.inf, 0.0)
            big_m = sum(float(ceiling[i, [col[e] for e in el.tolist()]].max()) for el, *_ in v)
            w = new_var(1.0)  # w >= sum m - M (1 - x)
            add_row([(m, 1.0) for m in marks] + [(w, -1.0), (x[i] + j, big_m)], -np.inf, big_m)
        predecessor = stream.after[s]
        if predecessor >= 0 and stream.kind[predecessor] == stream.kind[s]:
            paths_of = np.array([p for p, _ in options[i]])
            if predecessor >= t:  # in the horizon: the same path
                i0 = predecessor - t
                before = np.array([p for p, _ in options[i0]])
                for p in np.unique(paths_of):
                    add_row([(x[i] + j, 1.0) for j in np.flatnonzero(paths_of == p)]
                            + [(x[i0] + j, -1.0) for j in np.flatnonzero(before == p)], 0.0, 0.0)
            elif i > 0:
                add_row([(x[i] + j, 1.0) for j in np.flatnonzero(paths_of == chosen[predecessor])], 1.0, 1.0)
        if i + 1 < k:  # (6.1, 6.2): B_{i+1} >= B_i + service - dt, as a lower bound
            dt = float(stream.arrival[s + 1] - stream.arrival[s]) / unit
            adds: dict[int, list[tuple[int, float]]] = {}
            for j, (_, v) in enumerate(options[i]):
                for e, amount in service(v, size):
                    adds.setdefault(e, []).append((x[i] + j, amount))
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
    for presolve in (True, False):  # HiGHS's presolve now and then ends in a solve error; without it, not
        result = milp(np.array(objective), constraints=LinearConstraint(matrix, lower, upper), integrality=integrality,
                      bounds=(np.zeros(n), upper_bounds),
                      options={"mip_rel_gap": 1e-6, "presolve": presolve, "time_limit": LP_SECONDS})
        if result.status in (0, 1) and result.x is not None:  # 1: the time limit, with its best solution
            break
    LP_STATS["solves"] += 1
    LP_STATS["time_limited"] += int(result.status == 1)
    if result.status not in (0, 1) or result.x is None:
        raise PlanError(f"the path-selection MILP failed at request {t}: {result.message}")
    return options[0][int(np.argmax(result.x[: len(options[0])]))][0]


# -- the online run and its price -----------------------------------------------------------------


@dataclass
class Selection:
    """One selector's choices: ``path`` per request (index into ``PathTable.paths``), the model's
    ``completion`` times, and seconds spent deciding each request (0 where a dependency decided)."""

    selector: str
    path: np.ndarray
    completion: np.ndarray
    decide_seconds: np.ndarray
    decided: np.ndarray = None  # True where the selector chose (not pinned by a dependency)

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
    chose = np.zeros(n, dtype=bool)
    pending: list[tuple[float, int]] = []
    now = 0.0
    for t in range(n):
        arrival = float(stream.arrival[t])
        while pending and pending[0][0] <= arrival:
            _, done = heapq.heappop(pending)
            selector.observe(done, int(path[done]), completion[done] - stream.arrival[done],
                             table.traverse(int(path[done]), stream.nbytes[done]))
        np.maximum(backlog - (arrival - now), 0.0, out=backlog)
        now = arrival
        before = stream.after[t]
        same = (table.same_route[stream.kind[t]].get(table.paths[path[before]].path.devices, -1)
                if before >= 0 and completion[before] > arrival else -1)
        if same >= 0:
            choice = same
        else:
            tick = time.perf_counter()
            choice = selector.choose(t, backlog)
            decide[t] = time.perf_counter() - tick
            chose[t] = True
        path[t] = choice
        selector.decided(t, choice)
        jct = table.queue(choice, backlog) + table.traverse(choice, stream.nbytes[t])
        completion[t] = max(arrival + jct, completion[before] if before >= 0 else 0.0)
        table.add(choice, stream.nbytes[t], backlog)
        heapq.heappush(pending, (completion[t], t))
    return Selection(selector.name, path, completion, decide, chose)


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
    result = simulate(table.topology, tasks, timeline=False, cores=table.cores or None)
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
        """The simulated completion times, the model's mean, decision time (over the requests the
        selector decided), path shares and the busiest ``links`` link directions."""
        counts = np.bincount(self.selection.path, minlength=len(table.paths))
        rows = sorted(self.priced.result.link_rows(), key=lambda row: -row["utilisation"])[:links]
        decided = self.selection.decided if self.selection.decided is not None else slice(None)
        seconds = self.selection.decide_seconds[decided]
        return {**self.priced.summary(),
                "model_mean_s": float(self.selection.model_jct(stream).mean()),
                "decide_us": float(seconds.mean() * 1e6) if seconds.size else 0.0,
                "paths": {_path_label(table, p): int(c) for p, c in enumerate(counts) if c},
                "links": [{"link": r["link"], "kind": r["kind"], "utilisation": r["utilisation"]} for r in rows]}


def _path_label(table: PathTable, path: int) -> str:
    """The path's devices, after its type's name when the table has several types."""
    name = table.paths[path].path.name
    return name if len(table.path_set.types) == 1 else f"{table.path_set.types[table.paths[path].kind].name} {name}"


def compare_selectors(workload: Workload, names: list[str], k: int = 8, progress=None,
                      jitter: tuple[float, float] = JITTER, seed: int = 0) -> dict[str, SelectorReport]:
    """Each selector run on the model, then its choices priced on the flow simulator."""
    reports = {}
    for name in names:
        selection = select(workload.table, workload.stream, make_selector(name, k, jitter, seed))
        reports[name] = SelectorReport(selection, price_selection(workload.table, workload.stream, selection.path))
        if progress is not None:
            progress(name)
    return reports


# -- a sweep over the offered rate ----------------------------------------------------------------


def with_option(spec: str, key: str, value) -> str:
    """``spec`` (``poisson:...`` or ``kvs:...``) with option ``key`` set to ``value`` (and, for
    ``load``, no ``rate``)."""
    head, _, body = spec.partition(":")
    drop = {key, "rate"} if key == "load" else {key}
    items = [item for item in body.split(",") if item and item.partition("=")[0] not in drop]
    return f"{head}:{','.join([*items, f'{key}={value}'])}"


@dataclass
class SweepPoint:
    """One offered load (a multiple of the direct paths' capacity): per selector the simulated
    completion times of every seed's stream together, and the decision times."""

    load: float
    rate: float
    jct: dict[str, list[np.ndarray]]
    decide: dict[str, list[np.ndarray]]

    def row(self, name: str) -> dict:
        jct = np.concatenate(self.jct[name])
        per_seed = [float(np.median(j)) for j in self.jct[name]]
        decide = np.concatenate(self.decide[name]) if self.decide[name] else np.zeros(1)
        return {"load": self.load, "rate_per_s": self.rate, "median_s": float(np.median(jct)),
                "mean_s": float(jct.mean()), "p99_s": float(np.percentile(jct, 99)),
                "median_per_seed_s": per_seed, "decide_us": float(decide.mean() * 1e6)}


def sweep(topology: Topology, spec: str, loads: list[float], names: list[str], k: int = 8, seeds: int = 1,
          jitter: tuple[float, float] = JITTER, progress=None) -> list[SweepPoint]:
    """``spec`` at each of ``loads`` (times the direct paths' capacity) with seeds 0 .. seeds - 1
    (the spec's own seed is the first), every selector priced on the simulator."""
    if not loads or any(not load > 0 for load in loads):
        raise PlanError(f"the sweep's loads must be > 0, got {loads}")
    if seeds < 1:
        raise PlanError(f"seeds must be >= 1, got {seeds}")
    first = int(dict(item.partition("=")[::2] for item in spec.partition(":")[2].split(",") if item).get("seed", 0))
    points = []
    for load in loads:
        point = SweepPoint(load, 0.0, {n: [] for n in names}, {n: [] for n in names})
        for seed in range(first, first + seeds):
            workload = load_workload(topology, with_option(with_option(spec, "load", load), "seed", seed))
            point.rate = workload.rate
            for name, report in compare_selectors(workload, names, k, jitter=jitter, seed=seed).items():
                point.jct[name].append(report.priced.jct)
                decided = report.selection.decided
                point.decide[name].append(report.selection.decide_seconds[decided])
            if progress is not None:
                progress(load, seed)
        points.append(point)
    return points


def sustainable(points: list[SweepPoint], name: str, bound_s: float) -> float:
    """The highest offered rate (requests per second) at which ``name``'s median completion time
    stays under ``bound_s``, every lower load of the sweep too (0 if the lowest already fails)."""
    best = 0.0
    for point in sorted(points, key=lambda p: p.load):
        if point.row(name)["median_s"] > bound_s:
            break
        best = point.rate
    return best
