"""Packing columns (spanning trees, arborescences, routings) under a bottleneck, the routes through
switches that the columns use, and the partition bound every all-reduce schedule obeys.

``pack`` (:mod:`commgraph.plan.colgen`, re-exported here) is the column generation of Wang, Li,
Liberty and Smola (SysML'18) for any family of columns with a pricing oracle, on a warm-started
HiGHS master.

``RouteGraph`` is the network the columns are routed over: every device, and the link directions
between them as resources (``Hop.resource`` numbering), paths passing only through devices that
forward (``Topology.forwards``: switches, CPUs, NICs, and GPUs where ``gpu_forwarding`` allows).
``shortest`` prices every link direction and returns the cheapest path between every two workers
(scipy's Dijkstra), so a tree edge or a ring hop may take any route the hardware has: every
NVSwitch plane, every NIC, a neighbour GPU's NIC through NVLink.

``partition_bound``: split the workers into p >= 2 groups S_1..S_p (node sets, disjoint, each
holding workers, together holding all). A spanning tree joins them with at least p - 1 edges
between groups; a tree edge carrying a share w of the data both ways enters one group in each
direction, so the trees bring at least 2 (p - 1) M bytes into the groups in all, at most
sum_i B(S_i) per second (B: the bandwidth of the links leaving S_i, per direction). So

    algorithm bandwidth M / T  <=  sum_i B(S_i) / (2 (p - 1)),

which for singletons of n workers of equal bandwidth B is B n / (2 (n - 1)): per-GPU bandwidth over
2(n-1)/n. A ring crosses the groups p times with 2 (n-1)/n M each, no less for p <= n, so the same
bound holds for every schedule here. We take the tightest of the singletons and the hosts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from commgraph.errors import PlanError
from commgraph.plan.colgen import Column, Packing, pack
from commgraph.topology import Topology

_TOL = 1e-9  # relative: a path improves when its reduced cost is below -_TOL x its demand's dual
__all__ = ["Column", "Packing", "pack", "partition_bound", "route_demands", "RouteGraph"]
_TIE = 1e-7  # added to every link price in the path search: among equally priced paths, the fastest, shortest


@dataclass(frozen=True)
class Routing:
    """Demands split over paths: ``value`` the busiest resource's load, ``split[d]`` demand d's
    paths (device indices) with their shares (summing to 1)."""

    value: float
    split: list[dict[tuple[int, ...], float]]


def route_demands(
    routes: RouteGraph, demands: list[tuple[int, int, float]], both_ways: bool, max_rounds: int = 500
) -> Routing:
    """Min-max multi-commodity routing of fixed demands (worker a, worker b, amount; ``both_ways``:
    the amount also flows back along the same path): path flows, a path added per demand and round
    while its reduced cost is negative (the cheapest path under the link prices, against the
    demand's dual), HiGHS on the restricted LP. A second pass, as in ``pack``, keeps the bottleneck
    and moves the least data."""
    pool: list[tuple[int, tuple[int, ...], np.ndarray]] = []  # (demand, path, load of the whole demand)
    known: set[tuple[int, tuple[int, ...]]] = set()

    def add(prices: np.ndarray, duals: np.ndarray | None) -> bool:
        paths, added = routes.shortest(prices, symmetric=both_ways), False
        for d, (a, b, amount) in enumerate(demands):
            path = paths.path(a, b)
            load = amount * routes.load(path, both_ways)
            better = duals is None or float(prices @ load) < duals[d] - _TOL * max(abs(duals[d]), 1e-12)
            if (d, path) not in known and better:
                pool.append((d, path, load))
                known.add((d, path))
                added = True
        return added

    add(np.ones(routes.resources), None)
    value, x = None, None
    for cap in (None, "keep"):
        for _ in range(max_rounds):
            loads = np.array([load for _, _, load in pool]).T  # [resources, paths]
            used = np.flatnonzero(loads.any(axis=1))
            a_res = loads[used]
            n_res, n_paths = a_res.shape
            a_eq = np.zeros((len(demands), n_paths))
            a_eq[[d for d, _, _ in pool], np.arange(n_paths)] = 1.0
            if cap is None:
                objective = np.concatenate([np.zeros(n_paths), [1.0]])
                a_ub = np.hstack([a_res, -np.ones((n_res, 1))])
                a_eq = np.hstack([a_eq, np.zeros((len(demands), 1))])
                b_ub = np.zeros(n_res)
            else:
                objective, a_ub, b_ub = a_res.sum(axis=0), a_res, np.full(n_res, value)
            result = linprog(
                objective,
                A_ub=a_ub,
                b_ub=b_ub,
                A_eq=a_eq,
                b_eq=np.ones(len(demands)),
                bounds=[(0, None)] * objective.size,
                method="highs",
            )
            if result.status != 0:
                raise PlanError(f"the routing LP failed: {result.message}")
            x = result.x[:n_paths]
            bottleneck = float((a_res @ x).max())
            prices = np.zeros(routes.resources)
            prices[used] = np.maximum(-result.ineqlin.marginals, 0.0)
            if not add(prices if cap is None else 1.0 + prices, result.eqlin.marginals):
                break
        value = bottleneck if cap is None else value
    split: list[dict[tuple[int, ...], float]] = [{} for _ in demands]
    for (d, path, _), share in zip(pool, x):
        if share > 1e-10:
            split[d][path] = split[d].get(path, 0.0) + float(share)
    split = [{p: v / sum(s.values()) for p, v in s.items()} for s in split]
    return Routing(value, split)


@dataclass(frozen=True)
class Paths:
    """Cheapest paths from every worker (``shortest``): ``cost[a, b]`` and the devices between."""

    graph: RouteGraph
    cost: np.ndarray  # [workers, workers]
    predecessors: np.ndarray  # [workers, nodes]

    def path(self, a: int, b: int) -> tuple[int, ...]:
        """Device indices from worker ``a`` to worker ``b``."""
        g = self.graph
        node, start, nodes = g.in_node[g.worker_index[b]], g.out_node[g.worker_index[a]], []
        while node != start:
            nodes.append(node)
            node = self.predecessors[a, node]
            if node < 0:
                raise PlanError(f"no route from {g.workers[a]!r} to {g.workers[b]!r} in topology {g.topology.name!r}")
        nodes.append(start)
        return tuple(x % g.n for x in reversed(nodes))


class RouteGraph:
    """The devices of ``topology`` and its link directions as resources (``2 * link + direction``,
    ``Hop.resource``), over ``links`` (default: all; between two devices the fastest, as the
    simulator takes an explicit route). ``cost[r]``: seconds per byte on resource r relative to the
    slowest of these links (so 1 on the slowest)."""

    def __init__(self, topology: Topology, workers: list[str], links: list[int] | None = None):
        self.topology, self.workers, self.n = topology, list(workers), len(topology.devices)
        chosen: dict[tuple[int, int], int] = {}
        for k in range(len(topology.links)) if links is None else links:
            link = topology.links[k]
            pair = tuple(sorted((topology.index[link.a], topology.index[link.b])))
            if pair not in chosen or link.bandwidth_gbps > topology.links[chosen[pair]].bandwidth_gbps:
                chosen[pair] = k
        self.links = sorted(chosen.values())
        self.unit_gbps = min(topology.links[k].bandwidth_gbps for k in self.links)
        self.cost = np.zeros(2 * len(topology.links))
        for k in self.links:
            self.cost[2 * k : 2 * k + 2] = self.unit_gbps / topology.links[k].bandwidth_gbps
        self.in_node = list(range(self.n))
        self.out_node = [i if topology.forwards(d) else self.n + i for i, d in enumerate(topology.devices)]
        self.worker_index = [topology.index[w] for w in self.workers]
        tails, heads, resources = [], [], []
        for k in self.links:
            link = topology.links[k]
            a, b = topology.index[link.a], topology.index[link.b]
            for u, v, r in ((a, b, 2 * k), (b, a, 2 * k + 1)):
                tails.append(self.out_node[u])
                heads.append(self.in_node[v])
                resources.append(r)
        self._tails, self._heads = np.array(tails), np.array(heads)
        self._resources = np.array(resources)
        self._arc = {(t, h): r for t, h, r in zip(tails, heads, resources)}

    @property
    def resources(self) -> int:
        """The number of resources (link directions, then forwarding devices)."""
        return self.cost.size

    def shortest(self, prices: np.ndarray, symmetric: bool) -> Paths:
        """Cheapest paths between the workers when a byte on resource r costs ``prices[r] *
        cost[r]`` (``symmetric``: a path is priced in both directions, for an edge used both ways)."""
        per_byte = (prices + _TIE) * self.cost
        if symmetric:
            per_byte = per_byte + per_byte.reshape(-1, 2)[:, ::-1].ravel()
        weights = per_byte[self._resources]
        graph = csr_matrix((weights, (self._tails, self._heads)), shape=(2 * self.n, 2 * self.n))
        sources = [self.out_node[w] for w in self.worker_index]
        dist, pred = dijkstra(graph, indices=sources, return_predecessors=True)
        cost = dist[:, [self.in_node[w] for w in self.worker_index]]
        if not np.isfinite(cost).all():
            a, b = np.argwhere(~np.isfinite(cost))[0]
            self.topology.route(self.workers[a], self.workers[b])  # raises, naming the pair
        return Paths(self, cost, pred)

    def hops(self, path: tuple[int, ...]) -> list[int]:
        """The resources a path of device indices crosses, in order."""
        return [self._arc[self.out_node[u], self.in_node[v]] for u, v in zip(path, path[1:])]

    def devices(self, path: tuple[int, ...]) -> tuple[str, ...]:
        """The device ids of a path of device indices."""
        return tuple(self.topology.devices[i].id for i in path)

    def load(self, path: tuple[int, ...], both_ways: bool) -> np.ndarray:
        """One unit of data along ``path`` (and back, ``both_ways``) as load per resource."""
        load = np.zeros(self.resources)
        for r in self.hops(path):
            load[r] += self.cost[r]
            if both_ways:
                load[r ^ 1] += self.cost[r ^ 1]
        return load


@dataclass(frozen=True)
class Bound:
    """The partition bound (module docstring): the most algorithm bandwidth any schedule reaches,
    GB/s, and the partition that gives it (``per-GPU`` or ``per-host``)."""

    algbw_gbps: float
    partition: str

    def to_json(self) -> dict:
        """The bound as JSON-ready data."""
        return {"algbw_gbps": self.algbw_gbps, "partition": self.partition}


def partition_bound(topology: Topology, workers: list[str], links: list[int] | None = None) -> Bound:
    """The tightest partition bound of four families over ``links`` (default: all): the workers
    alone, the hosts, and each of these grown to the side of a minimum cut around it (the cut
    separating a worker, or a host's workers, from every other worker: on a server whose NICs hang
    off PCIe, a host's cut runs through its GPUs' PCIe links). A family whose cuts overlap is
    skipped (the bound needs disjoint groups)."""
    chosen = list(range(len(topology.links))) if links is None else list(links)
    bounds = []
    for name, sets in _families(topology, workers, chosen).items():
        if sum(len(s) for s in sets) != len(set().union(*sets)):
            continue
        leaving = sum(_leaving(topology, chosen, s) for s in sets)
        bounds.append(Bound(leaving / (2 * (len(sets) - 1)), name))
    return min(bounds, key=lambda b: b.algbw_gbps)


def gather_bound(topology: Topology, workers: list[str]) -> Bound:
    """The cut bound of an all-gather (and of a reduce-scatter, its reverse): a set S of devices
    holding k of the n workers' shards, 0 < k < n, must take in the other n - k shards (each 1/n
    of the tensor M) over the links entering it, so M / T <= B(S) n / (n - k). The tightest over
    the sets of :func:`partition_bound`'s four families (any one set is a bound here); ForestColl
    shows the best set's bound is reached (Zhao et al., arXiv 2402.06787)."""
    chosen, n, worker_set = list(range(len(topology.links))), len(workers), set(workers)
    bounds = []
    for name, sets in _families(topology, workers, chosen).items():
        for group in sets:
            inside = len(group & worker_set)
            if 0 < inside < n:
                bounds.append(Bound(_leaving(topology, chosen, group) * n / (n - inside), name))
    return min(bounds, key=lambda b: b.algbw_gbps)


def _families(topology: Topology, workers: list[str], chosen: list[int]) -> dict[str, list[set[str]]]:
    """The device sets of the four families (:func:`partition_bound`)."""
    host = {d.id: d.host for d in topology.devices}
    hosts = list(dict.fromkeys(host[w] for w in workers))
    families = {"per-GPU": [{w} for w in workers]}
    if len(hosts) > 1:
        families["per-host"] = [{d for d, h in host.items() if h == name} for name in hosts]
    cuts = _MinCut(topology, chosen, workers)
    families["per-GPU cut"] = [cuts.side({w}) for w in workers]
    if len(hosts) > 1:
        families["per-host cut"] = [cuts.side({w for w in workers if host[w] == name}) for name in hosts]
    return families


def _leaving(topology: Topology, chosen: list[int], group: set[str]) -> float:
    """GB/s of the chosen links with one end in ``group`` (each way)."""
    return sum(
        topology.links[k].bandwidth_gbps
        for k in chosen
        if (topology.links[k].a in group) != (topology.links[k].b in group)
    )


class _MinCut:
    """Minimum cuts between sets of workers over the chosen links (capacities in MB/s, integers
    for scipy's maximum flow)."""

    def __init__(self, topology: Topology, links: list[int], workers: list[str]):
        self.topology, self.workers = topology, workers
        n = len(topology.devices)
        self.source, self.sink = n, n + 1
        rows, cols, caps = [], [], []
        for k in links:
            link = topology.links[k]
            a, b, c = topology.index[link.a], topology.index[link.b], int(round(link.bandwidth_gbps * 1000))
            rows += [a, b]
            cols += [b, a]
            caps += [c, c]
        self.edges = (rows, cols, caps)
        self.big = 2 * sum(caps) + 1

    def side(self, group: set[str]) -> set[str]:
        """The devices on ``group``'s side of a minimum cut from it to every other worker."""
        from scipy.sparse.csgraph import breadth_first_order, maximum_flow

        rows, cols, caps = (list(x) for x in self.edges)
        index = self.topology.index
        for w in self.workers:
            if w in group:
                rows.append(self.source), cols.append(index[w]), caps.append(self.big)
            else:
                rows.append(index[w]), cols.append(self.sink), caps.append(self.big)
        size = self.sink + 1
        capacity = csr_matrix((np.array(caps, dtype=np.int64), (rows, cols)), shape=(size, size))
        capacity.sum_duplicates()
        small = capacity.astype(np.int32) if capacity.max() < 2**31 else capacity
        flow = maximum_flow(small, self.source, self.sink).flow
        residual = (capacity - flow).tocsr()
        residual.data[residual.data < 0] = 0
        residual.eliminate_zeros()
        reached = breadth_first_order(residual, self.source, directed=True, return_predecessors=False)
        return {self.topology.devices[i].id for i in reached if i < self.source}
