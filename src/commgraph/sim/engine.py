"""Event-driven flow-level simulation of a task DAG on a Topology.

Each (link, direction) is a resource of the link's bandwidth, and so is each switch with a
``forward_gbps`` (one resource for everything crossing it, both ways). A transfer first pays the per-message
overhead of every link on its route that has one: on each such hop a setup flow of ``overhead x
bandwidth`` bytes occupies that link direction alone, so messages sharing a link pay their
overheads one after another (two messages on one link take 2 x overhead + bytes / bandwidth), while
the hops of one message set up concurrently. When all its setup flows are done, its data flow
crosses the whole route. Flows share resources max-min fairly within strict priority classes; after
its last byte a transfer waits the sum of its links' latencies, then finishes. Computations on one
device run one at a time (``cores`` gives a device several servers: that many at once), in the
order they become ready. Rates change only at events (a flow or task starting or ending), and then
only in the connected part of the network the event touched: flows that share no resource, even
transitively, with a changed one keep their rates, because max-min allocations of disjoint
components are independent; a resource whose capacity the others imply (:func:`implied`) never
limits a rate, so it joins no component (without a recorded timeline, which needs its load).
Events at the same instant are handled together. The event loop
runs compiled (:mod:`commgraph.sim.events`), and an event costs in proportion to the part of the
network it touched, not to the number of links or live flows.
"""

from __future__ import annotations

import itertools
from copy import copy
from dataclasses import dataclass
from functools import cached_property
from itertools import compress
from operator import attrgetter

import numpy as np
from numba import njit, types
from numba.typed import Dict

from commgraph.errors import SimulationError, TopologyError
from commgraph.sim.dag import Dependents, Task, Transfer, check_dag
from commgraph.sim.events import simulate_events
from commgraph.sim.tables import Flows, Outcome, Tasks
from commgraph.topology.model import Hop, Topology


@dataclass
class SimResult:
    """What happened: per task start/finish (seconds), per resource busy time and bytes, and the
    utilisation change points ``(time, resource, utilisation)`` when a timeline was recorded."""

    topology: Topology
    tasks: list[Task]
    start: np.ndarray
    finish: np.ndarray
    busy_seconds: np.ndarray
    bytes_moved: np.ndarray
    timeline: tuple[np.ndarray, np.ndarray, np.ndarray] | None

    @property
    def makespan(self) -> float:
        return float(self.finish.max()) if self.finish.size else 0.0

    def link_seconds(self) -> np.ndarray:
        """Per link direction (resource ``2 * link + direction``), the seconds its bytes take at the
        link's full bandwidth: a bound on the makespan that no schedule of the same flows beats."""
        capacity = np.repeat([link.bandwidth_gbps * 1e9 for link in self.topology.links], 2)
        return self.bytes_moved / capacity

    def resource_name(self, resource: int) -> str:
        link = self.topology.links[resource // 2]
        a, b = (link.a, link.b) if resource % 2 == 0 else (link.b, link.a)
        return f"{a}->{b}"

    def link_rows(self) -> list[dict]:
        """One row per link direction that carried traffic."""
        seconds = self.link_seconds()
        return [
            {
                "link": self.resource_name(int(r)),
                "kind": self.topology.links[r // 2].kind,
                "bytes": float(self.bytes_moved[r]),
                "busy_seconds": float(self.busy_seconds[r]),
                "utilisation": float(seconds[r] / self.makespan) if self.makespan > 0 else 0.0,
            }
            for r in np.flatnonzero(self.bytes_moved > 0)
        ]

    def to_dict(self) -> dict:
        return {
            "topology": self.topology.name,
            "makespan_seconds": self.makespan,
            "tasks": [
                {
                    "id": t.id,
                    "type": "transfer" if isinstance(t, Transfer) else "compute",
                    "start": float(s),
                    "finish": float(f),
                }
                for t, s, f in zip(self.tasks, self.start, self.finish)
            ],
            "links": self.link_rows(),
        }


def simulate(
    topology: Topology,
    tasks: list[Task],
    *,
    timeline: bool = True,
    incremental: bool = True,
    cores: dict[str, int] | None = None,
) -> SimResult:
    """Run ``tasks`` on ``topology`` and return when everything happened. ``timeline`` records
    every utilisation change (for plots); ``incremental=False`` recomputes all rates at every event
    (the textbook method, same results, for comparison); ``cores`` (device id -> servers, default
    1) lets a device run that many computations at once, first come first served."""
    dependents = check_dag(tasks)
    flows = _Flows(topology, tasks, dependents.transfer, merge=True)
    for device, count in (cores or {}).items():
        if device not in topology.index or not (isinstance(count, int) and count >= 1):
            raise SimulationError(f"cores: {device!r} must be a device of the topology with >= 1 cores, got {count!r}")
    table = flows.table()
    if not timeline:  # a recorded timeline needs every resource's load, not only whether it is busy
        table = binding_first(table, ~implied(table))
    outcome = simulate_events(
        table, _task_arrays(topology, tasks, dependents, flows, cores or {}), incremental, timeline
    )
    return _result(topology, tasks, flows, _spread_back(outcome, flows.stands_for), timeline)


def merge_identical(flows: Flows) -> tuple[Flows, np.ndarray]:
    """Resources of one capacity that carry the same flows with the same weights are one
    constraint (under packet spraying, a fat-tree's parallel links between two tiers: every flow
    loads each alike): keep the first of each such set on the routes, which leaves every rate
    the same and each event's work smaller. Returns the flows so reduced and, per resource, the
    resource that stands for it (itself if kept)."""
    stands_for = identical_columns(flows.ptr, flows.resources, flows.weights, flows.capacity)
    keep = stands_for[flows.resources] == flows.resources
    n_rows = flows.ptr.shape[0] - 1
    owner = np.repeat(np.arange(n_rows), np.diff(flows.ptr))
    ptr = np.concatenate([[0], np.cumsum(np.bincount(owner[keep], minlength=n_rows))]).astype(np.int64)
    reduced = flows._replace(ptr=ptr, resources=flows.resources[keep], weights=flows.weights[keep], bound=ptr[1:])
    return reduced, stands_for


def identical_columns(ptr: np.ndarray, resources: np.ndarray, weights: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Per resource, the first resource (itself if none) of the same capacity whose entries in the
    rows of the CSR (``ptr``, ``resources``, ``weights``) are its own: the same rows, the same
    weights (:func:`merge_identical`'s sets, the rows being flows or the paths they take)."""
    n_res, n_rows = capacity.shape[0], ptr.shape[0] - 1
    owner = np.repeat(np.arange(n_rows), np.diff(ptr))
    by = np.lexsort((owner, resources))
    res, flow, weight = resources[by], owner[by], weights[by]
    nnz = np.bincount(res, minlength=n_res)
    start = np.concatenate([[0], np.cumsum(nnz)[:-1]])
    mix = np.random.default_rng(0).random((2, n_rows)) + 1.0  # column signatures, checked exactly below
    keys = np.column_stack([np.bincount(res, weights=weight * m[flow], minlength=n_res) for m in mix] + [capacity, nnz])
    _, group = np.unique(keys, axis=0, return_inverse=True)
    stands_for = np.arange(n_res)
    first: dict[int, int] = {}
    for r in np.flatnonzero(nnz > 0):
        kept = first.setdefault(int(group.ravel()[r]), int(r))
        a, b = slice(start[kept], start[kept] + nnz[kept]), slice(start[r], start[r] + nnz[r])
        if kept != r and np.array_equal(flow[a], flow[b]) and np.array_equal(weight[a], weight[b]):
            stands_for[r] = kept
    return stands_for


def binding_first(flows: Flows, binding: np.ndarray) -> Flows:
    """``flows`` with ``binding`` (per resource: whether it can limit a rate) and each route
    reordered so that its binding resources come first, each part in its route order
    (``bound``: where they end). Rates are the same: every sum over a resource's flows keeps
    its order, and so does the order in which an event meets the resources."""
    n_rows = flows.ptr.shape[0] - 1
    owner = np.repeat(np.arange(n_rows), np.diff(flows.ptr))
    loose = ~binding[flows.resources]
    order = np.lexsort((loose, owner))
    bound = flows.ptr[1:] - np.bincount(owner[loose], minlength=n_rows)
    return flows._replace(resources=flows.resources[order], weights=flows.weights[order], binding=binding, bound=bound)


def implied(flows: Flows) -> np.ndarray:
    r"""Per resource, whether the other resources' capacities imply its own, so that it never
    limits a rate and max-min allocations are the same without it (under packet spraying, a
    full-bisection fat-tree's links between switches: every flow crossing an edge switch's uplinks
    comes from a server below it, and those servers' links fill first or with them).

    Each flow has covers, entries of its route: the first and the last of least ``capacity /
    weight``, and of the links every path of the flow crosses (weight 1), the first and the last
    carrying the most flows (a server's network link rather than one GPU's). Whatever the rates, a
    cover ``s`` carries ``w_s x_f`` of flow ``f`` and at most its capacity ``C_s`` in all, so a
    resource ``r`` for which one kind of cover gives
    :math:`\sum_f w_{rf} x_f \le \sum_s C_s \max_{f: cover(f) = s} w_{rf} / w_{sf} \le C_r` can
    never be exceeded; it is implied (to a relative ``1e-9``, rounding). A cover is never implied,
    so each implied resource rests on resources that stay.

    The rows of ``flows`` may be paths that several flows share (``flows.path``): a resource's
    users count every flow of its rows, and covers and ratios are the same for every flow of a
    row."""
    n_rows = flows.ptr.shape[0] - 1
    shared = np.ones(n_rows) if flows.path is None else np.bincount(flows.path, minlength=n_rows)
    row = np.repeat(np.arange(n_rows), np.diff(flows.ptr))
    users = np.bincount(flows.resources, weights=shared[row], minlength=flows.capacity.shape[0]).astype(np.int64)
    return _implied(flows.ptr, flows.resources, flows.weights, flows.capacity, users)


@njit(cache=True)
def _implied(ptr, resources, weights, capacity, users):  # pragma: no cover
    n_res, n_flows = capacity.shape[0], ptr.shape[0] - 1  # rows: flows, or paths that flows share
    covers = np.full((4, n_flows), -1, np.int64)  # per kind of cover, per flow: its position in the route
    is_cover = np.zeros(n_res, np.bool_)
    for f in range(n_flows):
        least, most = np.inf, -1
        for j in range(ptr[f], ptr[f + 1]):
            r = resources[j]
            limit = capacity[r] / weights[j]
            if limit < least:
                least, covers[0, f] = limit, j
            if limit <= least:
                covers[1, f] = j
            if weights[j] == 1.0 and users[r] > most:
                most, covers[2, f] = users[r], j
            if weights[j] == 1.0 and users[r] >= most:
                covers[3, f] = j
        for kind in range(4):
            if covers[kind, f] >= 0:
                is_cover[resources[covers[kind, f]]] = True
    bound = np.zeros((4, n_res))
    for kind in range(4):
        largest = Dict.empty(key_type=types.int64, value_type=types.float64)  # (resource, cover) -> max ratio
        for f in range(n_flows):
            c = covers[kind, f]
            if c < 0:
                continue
            s = resources[c]
            for j in range(ptr[f], ptr[f + 1]):
                r = resources[j]
                if is_cover[r]:
                    continue
                key = r * n_res + s
                ratio = weights[j] / weights[c]
                if ratio > largest.get(key, 0.0):
                    largest[key] = ratio
        for key, ratio in largest.items():
            bound[kind, key // n_res] += capacity[key % n_res] * ratio
    out = np.zeros(n_res, np.bool_)
    for r in range(n_res):
        tightest = min(min(bound[0, r], bound[1, r]), min(bound[2, r], bound[3, r]))
        out[r] = users[r] > 0 and not is_cover[r] and tightest <= capacity[r] * (1.0 + 1e-9)
    return out


def _spread_back(outcome: Outcome, stands_for: np.ndarray) -> Outcome:
    """The outcome per resource again: each merged resource's busy time and utilisation changes
    are those of the resource that stood for it (changes ordered by time, then resource)."""
    members = np.bincount(stands_for, minlength=stands_for.shape[0])
    if np.all(members == 1):
        return outcome
    grouped = np.argsort(stands_for, kind="stable")
    at = np.concatenate([[0], np.cumsum(members)[:-1]])
    copies = members[outcome.record_resource]
    record = np.repeat(np.arange(copies.shape[0]), copies)
    offset = np.arange(record.shape[0]) - np.repeat(np.cumsum(copies) - copies, copies)
    resource = grouped[at[outcome.record_resource[record]] + offset]
    time = outcome.record_time[record]
    order = np.lexsort((resource, time))
    return outcome._replace(
        busy=outcome.busy[stands_for],
        record_time=time[order],
        record_resource=resource[order],
        record_utilisation=outcome.record_utilisation[record][order],
    )


class _Flows:
    """The flows, each on a row of a CSR over resources (``path``; rows ``row_ptr``,
    ``row_resources``, ``row_weights``), plus per-flow size, latency and class. A transfer's data
    flow ``f`` is followed by its setup flows ``f + 1 .. f + setups[f]``, one per hop with a
    per-message overhead; ``owner`` maps a setup flow to its data flow (-1 for data flows). Data
    flows on one path share its row, and so do setup flows of one hop of one path; a flow with a
    private rate cap has its own row. ``merge`` leaves on the routes one resource of each set that
    :func:`merge_identical` would merge, found on the distinct paths (so the full sprayed routes
    of every flow are never built; flow by flow when a flow has a private rate cap, which could
    match a link only it crosses); ``stands_for`` gives, per resource, the one left for it.
    ``ptr``, ``resources``, ``weights`` and ``lengths`` are the routes flow by flow (built when
    read)."""

    def __init__(self, topology: Topology, tasks: list[Task], transfer: np.ndarray, *, merge: bool = False):
        capacity = [link.bandwidth_gbps * 1e9 for link in topology.links for _ in (0, 1)]
        forwarding = {}  # a switch with a forwarding limit: one resource shared by all that cross it
        for device in topology.devices:
            if device.forward_gbps is not None:
                forwarding[device.id] = len(capacity)
                capacity.append(device.forward_gbps * 1e9)
        computes = list(compress(tasks, (~transfer).tolist()))
        for device in dict.fromkeys(map(_DEVICE, computes)):
            if device not in topology.index:
                _unknown(next(t for t in computes if t.device == device), device)
        transfers = np.flatnonzero(transfer)
        moving = list(compress(tasks, transfer.tolist()))
        t = len(moving)
        # per transfer, the first transfer of its key (src, dst, route): transfers with one key share
        # a path, numbered in order of first use (the keys are made one at a time, not all held)
        first: dict[tuple, int] = {}
        firsts = np.fromiter(map(first.setdefault, map(_PATH_KEY, moving), itertools.count()), dtype=np.int64, count=t)
        used, p = np.unique(firsts, return_inverse=True)
        table = [_path(topology, moving[i], forwarding) for i in used.tolist()]
        rate = np.array(list(map(_MAX_RATE, moving)), dtype=object)
        cap = rate != None  # noqa: E711 (elementwise on an object array)
        rates = np.where(cap, rate, 0.0).astype(np.float64)
        paths = _PathTable(table)
        cap &= paths.length[p] > 0  # a private resource of that capacity (none for a flow with no hops)
        self.capacity = np.concatenate([np.array(capacity, dtype=np.float64), rates[cap]])
        self.stands_for = np.arange(self.capacity.shape[0])
        if merge and not cap.any():
            paths, self.stands_for = paths.merged(self.capacity)
        n_set = paths.setups[p]
        per = 1 + n_set  # a data flow, then its setup flows
        data = np.zeros(t + 1, dtype=np.int64)
        np.cumsum(per, out=data[1:])
        n = int(data[-1])
        data = data[:-1]
        kind = np.ones(n, dtype=bool)  # setup flow
        kind[data] = False
        setup_of = np.flatnonzero(kind)  # the setup flows, in order: each one's rank within its transfer
        rank = setup_of - np.repeat(data, n_set) - 1
        setup_path = np.repeat(p, n_set)
        n_paths, n_setups = paths.length.shape[0], paths.setup_resources.shape[0]
        self.path = np.empty(n, dtype=np.int64)
        self.path[data] = p
        self.path[setup_of] = n_paths + paths.setup_ptr[setup_path] + rank  # one row per setup hop of a path
        own = _ranges(paths.ptr[p[cap]], paths.length[p[cap]])  # capped flows' routes, then their caps
        own_length = paths.length[p[cap]] + 1
        own_ptr = np.concatenate([[0], np.cumsum(own_length)]).astype(np.int64)
        at = _ranges(own_ptr[:-1], own_length - 1)
        own_resources = np.empty(int(own_ptr[-1]), dtype=np.int64)
        own_resources[at] = paths.resources[own]
        own_resources[own_ptr[1:] - 1] = len(capacity) + np.arange(int(cap.sum()))
        own_weights = np.ones(own_resources.shape[0], dtype=np.float64)
        own_weights[at] = paths.weights[own]
        self.path[data[cap]] = n_paths + n_setups + np.arange(int(cap.sum()))
        lengths = np.concatenate([paths.length, np.ones(n_setups, dtype=np.int64), own_length])
        self.row_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.row_resources = np.concatenate([paths.resources, paths.setup_resources, own_resources])
        self.row_weights = np.concatenate([paths.weights, np.ones(n_setups), own_weights])
        self.sizes = np.zeros(n, dtype=np.float64)
        self.sizes[data] = np.fromiter(map(_BYTES, moving), dtype=np.float64, count=t)
        self.sizes[setup_of] = paths.setup_bytes[paths.setup_ptr[setup_path] + rank]
        self.latency = np.zeros(n, dtype=np.float64)
        self.latency[data] = paths.seconds[p] + np.fromiter(map(_OVERHEAD, moving), dtype=np.float64, count=t)
        self.priority = np.repeat(np.fromiter(map(_PRIORITY, moving), dtype=np.int64, count=t), per)
        self.task_of = np.repeat(transfers, per)
        self.owner = np.repeat(data, per)
        self.owner[data] = -1
        self.setups = np.zeros(n, dtype=np.int64)
        self.setups[data] = n_set
        self.task_flow = np.full(len(tasks), -1, dtype=np.int64)
        self.task_flow[transfers] = data
        if merge and cap.any():
            reduced, self.stands_for = merge_identical(self.arrays())
            self.row_ptr, self.row_resources, self.row_weights = reduced.ptr, reduced.resources, reduced.weights
            self.path = np.arange(n, dtype=np.int64)
            for name in ("ptr", "resources", "weights", "lengths"):  # built from the rows before the merge
                del self.__dict__[name]

    @cached_property
    def lengths(self) -> np.ndarray:
        return np.diff(self.row_ptr)[self.path]

    @cached_property
    def ptr(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)

    @cached_property
    def resources(self) -> np.ndarray:
        return self.row_resources[_ranges(self.row_ptr[self.path], self.lengths)]

    @cached_property
    def weights(self) -> np.ndarray:
        return self.row_weights[_ranges(self.row_ptr[self.path], self.lengths)]

    def arrays(self) -> Flows:
        """The table with a row per flow (``path`` None: flow ``f``'s row is row ``f``)."""
        return self._flows(self.ptr, self.resources, self.weights, None)

    def table(self) -> Flows:
        """The table with the rows the flows share."""
        return self._flows(self.row_ptr, self.row_resources, self.row_weights, self.path)

    def _flows(self, ptr: np.ndarray, resources: np.ndarray, weights: np.ndarray, path: np.ndarray | None) -> Flows:
        return Flows(
            ptr,
            resources,
            weights,
            self.sizes,
            self.latency,
            self.priority,
            self.task_of,
            self.owner,
            self.setups,
            self.capacity,
            np.ones(self.capacity.shape[0], dtype=np.bool_),
            ptr[1:],
            path,
        )

    def bytes_per_resource(self) -> np.ndarray:
        """Bytes every resource carries: each data flow's size times its share on each resource of
        its route (a merged resource: those of the one that stands for it, the same sum), summed
        flow by flow in route order."""
        total = _bytes_per_resource(
            self.path,
            self.row_ptr,
            self.row_resources,
            self.row_weights,
            self.sizes,
            self.owner,
            self.capacity.shape[0],
        )
        return total[self.stands_for]


@njit(cache=True)
def _bytes_per_resource(path, ptr, resources, weights, sizes, owner, n_res):  # pragma: no cover
    total = np.zeros(n_res)
    for f in range(path.shape[0]):
        if owner[f] < 0:
            p = path[f]
            for j in range(ptr[p], ptr[p + 1]):
                total[resources[j]] += sizes[f] * weights[j]
    return total


class _PathTable:
    """Distinct paths (:func:`_path` tuples) as arrays: per path its route (CSR ``ptr``,
    ``resources``, ``weights``), ``length``, ``seconds`` and setup flows (CSR ``setup_ptr``,
    ``setup_resources``, ``setup_bytes``; ``setups`` per path)."""

    def __init__(self, table: list[tuple]):
        self.length = np.array([len(route) for route, _, _, _ in table], dtype=np.int64)
        self.ptr = np.concatenate([[0], np.cumsum(self.length)]).astype(np.int64)
        self.resources = np.array([r for route, _, _, _ in table for r in route], dtype=np.int64)
        self.weights = np.array([w for _, shares, _, _ in table for w in shares], dtype=np.float64)
        self.seconds = np.array([seconds for _, _, seconds, _ in table], dtype=np.float64)
        self.setups = np.array([len(overheads) for _, _, _, overheads in table], dtype=np.int64)
        self.setup_ptr = np.concatenate([[0], np.cumsum(self.setups)]).astype(np.int64)
        self.setup_resources = np.array([r for *_, overheads in table for r, _ in overheads], dtype=np.int64)
        self.setup_bytes = np.array([b for *_, overheads in table for _, b in overheads], dtype=np.float64)

    def merged(self, capacity: np.ndarray) -> tuple[_PathTable, np.ndarray]:
        """The table with one resource of each set that carries the same flows with the same
        weights (:func:`identical_columns` over the paths and, one row each, the setup flows:
        flows on one path load its resources alike), and per resource the one that stands for it."""
        n_setups = self.setup_resources.shape[0]
        rows = np.concatenate([self.ptr, self.ptr[-1] + 1 + np.arange(n_setups)])
        stands_for = identical_columns(
            rows,
            np.concatenate([self.resources, self.setup_resources]),
            np.concatenate([self.weights, np.ones(n_setups)]),
            capacity,
        )
        keep = stands_for[self.resources] == self.resources
        reduced = copy(self)
        reduced.length = np.bincount(
            np.repeat(np.arange(self.length.shape[0]), self.length)[keep], minlength=self.length.shape[0]
        )
        reduced.ptr = np.concatenate([[0], np.cumsum(reduced.length)]).astype(np.int64)
        reduced.resources, reduced.weights = self.resources[keep], self.weights[keep]
        return reduced, stands_for


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``starts[k], starts[k] + 1, ..., starts[k] + lengths[k] - 1`` for every ``k``, concatenated."""
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(total, dtype=np.int64)


def _path(topology: Topology, task: Transfer, forwarding: dict[str, int]) -> tuple:
    """A transfer's route as resources (its link directions, then the forwarding limits of the
    switches it crosses) with the share of its bytes each carries (1 on one path; a sprayed flow's
    fraction of paths through the link: :meth:`Topology.spread`), the sum of its links' latencies in
    seconds, and per link direction with a per-message overhead, the bytes of its setup flow
    (``overhead x bandwidth``). Latencies and overheads are those of the flow's ECMP route (a
    fabric's equal-cost paths have the same hops' kinds)."""
    hops = _hops(topology, task)
    spread = [(h, 1.0) for h in hops] if task.route is not None else topology.spread(task.src, task.dst)
    crossed: dict[str, float] = {}  # switch with a forwarding limit -> share of the flow crossing it
    for h, share in spread:
        if h.dst in forwarding and h.dst != task.dst:
            crossed[h.dst] = crossed.get(h.dst, 0.0) + share
    route = [h.resource for h, _ in spread] + [forwarding[d] for d in crossed]
    shares = [share for _, share in spread] + list(crossed.values())
    seconds = sum(topology.links[h.link].latency_us for h in hops) * 1e-6
    setups = [
        (h.resource, topology.links[h.link].overhead_us * 1e-6 * (topology.links[h.link].bandwidth_gbps * 1e9))
        for h in hops
        if topology.links[h.link].overhead_us > 0
    ]
    return route, shares, seconds, setups


_BYTES, _DEVICE, _MAX_RATE, _OVERHEAD, _PRIORITY, _SECONDS = (
    attrgetter(f) for f in ("bytes", "device", "max_rate", "overhead_s", "priority", "seconds")
)
_PATH_KEY = attrgetter("src", "dst", "route")


def _unknown(task: Task, device: str) -> None:
    raise SimulationError(f"task {task.id!r}: unknown device {device!r}")


def _hops(topology: Topology, task: Transfer) -> list[Hop]:
    for device in (task.src, task.dst, *(task.route or ())):
        if device not in topology.index:
            _unknown(task, device)
    if task.route is None:
        try:
            return topology.route(task.src, task.dst)
        except TopologyError as exc:
            raise SimulationError(f"task {task.id!r}: {exc}") from None
    path = list(task.route)
    if path[0] != task.src or path[-1] != task.dst:
        raise SimulationError(f"task {task.id!r}: route must start at {task.src!r} and end at {task.dst!r}")
    hops = []
    for a, b in zip(path, path[1:]):
        links = topology.links_between(a, b)
        if not links:
            raise SimulationError(f"task {task.id!r}: route step {a} -> {b} has no link")
        k = max(links, key=lambda j: topology.links[j].bandwidth_gbps)
        hops.append(Hop(k, a, b, topology.links[k].a == a))
    return hops


def _task_arrays(
    topology: Topology, tasks: list[Task], dependents: Dependents, flows: _Flows, cores: dict[str, int]
) -> Tasks:
    """The DAG as arrays for the event loop: computations' devices and seconds, transfers' data
    flows, dependents as a CSR, and per device its servers and the room of its ready queue."""
    compute = ~dependents.transfer
    computes = list(compress(tasks, compute.tolist()))
    device = np.full(len(tasks), -1, dtype=np.int64)
    device[compute] = np.fromiter(map(topology.index.__getitem__, map(_DEVICE, computes)), np.int64, len(computes))
    seconds = np.zeros(len(tasks), dtype=np.float64)
    seconds[compute] = np.fromiter(map(_SECONDS, computes), np.float64, len(computes))
    n_dev = len(topology.devices)
    servers = np.ones(n_dev, dtype=np.int64)
    for name, count in cores.items():
        servers[topology.index[name]] = count
    dep_ptr, dep_idx = dependents.ptr, dependents.idx
    queue_ptr = np.concatenate([[0], np.cumsum(np.bincount(device[compute], minlength=n_dev))]).astype(np.int64)
    return Tasks(compute, seconds, device, flows.task_flow, dep_ptr, dep_idx, dependents.waiting, servers, queue_ptr)


def _result(topology: Topology, tasks: list[Task], flows: _Flows, outcome: Outcome, timeline: bool) -> SimResult:
    unfinished = np.flatnonzero(np.isnan(outcome.finish))
    if unfinished.size:
        raise SimulationError(f"task {tasks[unfinished[0]].id!r} never finished: its flow gets no bandwidth")
    real = 2 * len(topology.links)  # forwarding limits and private rate caps are not links
    points = None
    if timeline:
        keep = outcome.record_resource < real
        points = (outcome.record_time[keep], outcome.record_resource[keep], outcome.record_utilisation[keep])
    return SimResult(
        topology, tasks, outcome.start, outcome.finish, outcome.busy[:real], flows.bytes_per_resource()[:real], points
    )
