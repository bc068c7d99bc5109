"""All-reduce planners: ``ring`` and ``tree``, NCCL's algorithms with as many channels as the
topology has routes, ``ring1`` and ``tree1``, the same on one route each, ``ps`` (sharded parameter
server) and ``lp``, the optimal schedule of Wang, Li, Liberty and Smola (SysML'18): a convex
combination of spanning trees minimising max_e P_e c_e over the spanning-tree polytope, where P_e is
the share of the data crossing link e and c_e the time to send all the data over e.

Costs are normalised to "all the data once over one single link": on an NVLink graph c_e = 1/count
(1 for NV1, 1/2 for NV2, as in the paper), otherwise c_e = (slowest per-link bandwidth) / bandwidth.

The LP runs over the GPUs' direct links when those connect all GPUs (section 2: GPUs aggregate, so
any spanning tree of them is a schedule). Otherwise (switches: NVSwitch planes, PCIe trees, NICs,
clusters) a tree edge between two GPUs is a multi-commodity flow: its bytes may split over every
route the hardware has (every NVSwitch plane, every NIC, a neighbour GPU's NIC through NVLink
where the topology lets GPUs forward). Both are solved exactly by column generation with HiGHS
(:func:`commgraph.plan.packing.pack`): the restricted master gives link prices, and a minimum
spanning tree under those prices (over direct links, or over the cheapest routed path between every
two GPUs) is the column with the most negative reduced cost; none left means optimal, and the
least-priced tree at the last prices is the certificate (a lower bound equal to the value). No tree
is enumerated.

Every plan reports its algorithm bandwidth (bytes / steady-state time, the busiest link direction
setting it) against the partition bound of :mod:`commgraph.plan.packing` (per-GPU bandwidth over
2(n-1)/n, or per-host), the most any of these schedules reaches.

``ring`` runs as NCCL's rings: one ring order per GPU position of a server across several servers
(channel c enters every server at its GPU c, so the channels leave by different NICs), one order on
one server, and every ring hop's bytes split over the routes by a min-max multi-commodity flow LP
(:func:`commgraph.plan.packing.route_demands`), which spreads them over NVSwitch planes and NICs
as NCCL's channels and the NVSwitch's striping do. ``tree`` routes NCCL's trees the same way:
across servers, per channel a chain through each server joined by a double binary tree over the
servers; on one server, the double binary tree over the GPUs. On an NVLink mesh without switches
(DGX-1) ``ring`` runs NCCL's several rings: as many Hamiltonian cycles as share no NVLink (three on
a DGX-1), each in both directions.

Every all-reduce plan is one stage: its sends stream concurrently (chunks pipelined through the
trees or the rings, every tree and ring advancing at its share), and each carries its total bytes,
so pricing it in the simulator (which paces such a stage's sends together, ``plan.price``) gives the
steady-state time plus the routes' latencies.

Each plan also keeps the schedule its sends come from, as data the runtime executes
(:mod:`commgraph.runtime.allreduce`): rings (reduce-scatter then all-gather), each with its share of
the data, and weighted rooted spanning trees for the others: ``tree``'s two binary trees of weight
1/2, ``ps`` as n stars of weight 1/n (worker b serves 1/n of the data), ``lp``'s packing with each
tree rooted at its centre. A tree's share of the data is reduced along its edges towards the root
and broadcast back down the same edges. A ring hop or tree edge may carry ``routes``: the paths its
bytes split over, with their shares (empty: the topology's one route).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from commgraph.errors import PlanError
from commgraph.plan.model import CommPlan, Send
from commgraph.plan.packing import Column, RouteGraph, pack, partition_bound, route_demands
from commgraph.plan.price import price, steady_seconds
from commgraph.topology import Topology

PLANNERS = ("ring", "ring1", "tree", "tree1", "ps", "lp")
CHOICES = ("auto", "native", *PLANNERS)  # what a trainer may run: planned schedules, torch's own, or the cheapest
_WEIGHT_TOL = 1e-6  # a schedule's tree weights (and a hop's route shares) sum to 1 within this


@dataclass(frozen=True)
class Route:
    """A share of one hop's bytes and the devices it crosses, from the hop's sender to its receiver."""

    share: float
    path: tuple[str, ...]


@dataclass(frozen=True)
class Tree:
    """A spanning tree of the workers carrying ``weight`` of the data: reduced along ``edges``
    (child, parent) towards ``root``, then broadcast back down the same edges. ``routes[i]``, when
    given, splits edge i's bytes over paths from the child to the parent (back down reversed)."""

    weight: float
    root: str
    edges: tuple[tuple[str, str], ...]
    routes: tuple[tuple[Route, ...], ...] = ()

    def children(self) -> dict[str, list[str]]:
        """Every node's children, in edge order (leaves have none)."""
        result: dict[str, list[str]] = {self.root: []}
        for child, _ in self.edges:
            result[child] = []
        for child, parent in self.edges:
            result[parent].append(child)
        return result

    def depths(self) -> dict[str, int]:
        """Hops from the root (0 at the root), in breadth-first order."""
        children, depth, queue = self.children(), {self.root: 0}, [self.root]
        for node in queue:  # grows while it is walked: breadth-first
            for child in children[node]:
                depth[child] = depth[node] + 1
                queue.append(child)
        return depth

    def heights(self) -> dict[str, int]:
        """Hops to the deepest node below (0 at a leaf)."""
        children, height = self.children(), {}
        for node in reversed(list(self.depths())):
            height[node] = 1 + max((height[c] for c in children[node]), default=-1)
        return height


@dataclass(frozen=True)
class Ring:
    """A ring ``order`` carrying ``weight`` of the data (reduce-scatter, then all-gather, around it).
    ``routes[i]``, when given, splits the bytes of hop ``order[i] -> order[i + 1]`` over paths."""

    weight: float
    order: tuple[str, ...]
    routes: tuple[tuple[Route, ...], ...] = ()


@dataclass(frozen=True)
class AllReduceSchedule:
    """How an all-reduce of ``planner`` runs over ``devices`` (the workers, in topology order):
    around ``rings`` or over ``trees``, the data cut into one contiguous share per ring or tree by
    weight. Exactly one of the two is given; both are checked when the schedule is made: every ring
    visits every device once, every tree spans the devices with the root at its top, weights are
    positive and sum to 1, every hop's routes join its two ends and their shares sum to 1. A schedule
    that breaks this raises PlanError."""

    planner: str
    devices: tuple[str, ...]
    rings: tuple[Ring, ...] = ()
    trees: tuple[Tree, ...] = ()

    def __post_init__(self) -> None:
        where = f"all-reduce schedule {self.planner!r}"
        if len(self.devices) < 2 or len(set(self.devices)) != len(self.devices):
            raise PlanError(f"{where}: needs 2 or more distinct devices, got {list(self.devices)}")
        if bool(self.rings) == bool(self.trees):
            raise PlanError(f"{where}: needs rings or trees (exactly one of them)")
        for k, ring in enumerate(self.rings):
            if sorted(ring.order) != sorted(self.devices):
                raise PlanError(f"{where}: ring {k} {list(ring.order)} does not visit each of "
                                f"{list(self.devices)} once")
            hops = [(a, ring.order[(i + 1) % len(ring.order)]) for i, a in enumerate(ring.order)]
            _check_routes(ring.routes, hops, f"{where}, ring {k}")
        for k, tree in enumerate(self.trees):
            _check_tree(tree, self.devices, f"{where}, tree {k}")
            _check_routes(tree.routes, list(tree.edges), f"{where}, tree {k}")
        for kind, parts in (("tree", self.trees), ("ring", self.rings)):
            total = sum(part.weight for part in parts)
            if parts and abs(total - 1.0) > _WEIGHT_TOL:
                raise PlanError(f"{where}: {kind} weights sum to {total}, not 1")
            if any(not part.weight > 0 for part in parts):
                raise PlanError(f"{where}: a {kind} weight is not positive")

    @property
    def fan_out(self) -> int:
        """The most routes any hop splits over (1 when none splits)."""
        return max((len(r) for part in (*self.rings, *self.trees) for r in part.routes), default=1)

    def to_json(self) -> dict:
        def routes(part) -> dict:
            return {"routes": [[{"share": r.share, "path": list(r.path)} for r in hop] for hop in part.routes]} \
                if part.routes else {}

        if self.rings:
            return {"devices": list(self.devices),
                    "rings": [{"weight": r.weight, "order": list(r.order), **routes(r)} for r in self.rings]}
        return {"devices": list(self.devices),
                "trees": [{"weight": t.weight, "root": t.root, "edges": [list(e) for e in t.edges], **routes(t)}
                          for t in self.trees]}

    @classmethod
    def from_json(cls, planner: str, data: dict) -> AllReduceSchedule:
        def routes(part: dict) -> tuple:
            return tuple(tuple(Route(float(r["share"]), tuple(map(str, r["path"]))) for r in hop)
                         for hop in part.get("routes", ()))

        try:
            trees = tuple(Tree(float(t["weight"]), str(t["root"]), tuple((str(c), str(p)) for c, p in t["edges"]),
                               routes(t)) for t in data.get("trees", ()))
            rings = tuple(Ring(float(r["weight"]), tuple(map(str, r["order"])), routes(r))
                          for r in data.get("rings", ()))
            if "ring" in data:  # one ring on the topology's routes, as plans before rings had channels
                rings += (Ring(1.0, tuple(map(str, data["ring"]))),)
            return cls(planner, tuple(map(str, data["devices"])), rings, trees)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PlanError(f"all-reduce schedule {planner!r} is malformed ({type(exc).__name__}: {exc})") from None


def _check_routes(routes: tuple[tuple[Route, ...], ...], hops: list[tuple[str, str]], where: str) -> None:
    if not routes:
        return
    if len(routes) != len(hops):
        raise PlanError(f"{where}: {len(routes)} route lists for {len(hops)} hops")
    for (a, b), hop in zip(hops, routes):
        if not hop or abs(sum(r.share for r in hop) - 1.0) > _WEIGHT_TOL or any(not r.share > 0 for r in hop):
            raise PlanError(f"{where}: the routes of hop {a} -> {b} need positive shares summing to 1")
        for route in hop:
            if len(route.path) < 2 or route.path[0] != a or route.path[-1] != b:
                raise PlanError(f"{where}: route {list(route.path)} does not lead from {a} to {b}")


def _check_tree(tree: Tree, devices: tuple[str, ...], where: str) -> None:
    if not tree.weight > 0:
        raise PlanError(f"{where}: weight {tree.weight} is not positive")
    children = [c for c, _ in tree.edges]
    nodes = {tree.root, *children, *(p for _, p in tree.edges)}
    if nodes != set(devices) or len(children) != len(devices) - 1 or len(set(children)) != len(children) \
            or tree.root in children:
        raise PlanError(f"{where}: edges {[list(e) for e in tree.edges]} rooted at {tree.root!r} are not a "
                        f"spanning tree of {list(devices)} with one parent per node")
    if len(tree.depths()) != len(devices):
        raise PlanError(f"{where}: not every device reaches the root {tree.root!r} (the edges hold a cycle)")


class CostGraph:
    """The GPUs, the candidate tree edges between them, and the physical links each one uses."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.workers = [d.id for d in topology.workers]
        if len(self.workers) < 2:
            raise PlanError(f"topology {topology.name!r} has {len(self.workers)} worker device(s); all-reduce needs 2")
        index = {w: i for i, w in enumerate(self.workers)}
        direct = [(k, index[l.a], index[l.b]) for k, l in enumerate(topology.links)
                  if l.a in index and l.b in index]
        pairs = [(a, b) for _, a, b in direct]
        self.direct = len(_min_spanning_tree(len(self.workers), pairs, np.zeros(len(pairs)))) == len(self.workers) - 1
        if self.direct:
            self.pairs = [(a, b) for _, a, b in direct]
            uses = [[k] for k, _, _ in direct]
            self.paths = [(self.workers[a], self.workers[b]) for a, b in self.pairs]
        else:
            self.pairs = [(a, b) for a in range(len(self.workers)) for b in range(a + 1, len(self.workers))]
            hops = [topology.route(self.workers[a], self.workers[b]) for a, b in self.pairs]
            uses = [[h.link for h in route] for route in hops]
            self.paths = [(route[0].src, *(h.dst for h in route)) for route in hops]
        self.links = sorted({k for u in uses for k in u})
        column = {k: i for i, k in enumerate(self.links)}
        self.usage = np.zeros((len(self.pairs), len(self.links)))  # times each pair's path crosses a link
        for p, u in enumerate(uses):
            for k in u:
                self.usage[p, column[k]] += 1
        chosen = [topology.links[k] for k in self.links]
        if all(l.kind == "nvlink" for l in chosen):
            self.cost = np.array([1.0 / l.count for l in chosen])
        else:
            unit = min(l.bandwidth_gbps / l.count for l in chosen)
            self.cost = np.array([unit / l.bandwidth_gbps for l in chosen])
        self.unit_gbps = min(topology.links[k].bandwidth_gbps * c for k, c in zip(self.links, self.cost))

    @property
    def n(self) -> int:
        return len(self.workers)

    def lower_bound(self) -> float | None:
        """Lemma 2.1: (n - 1) / sum_e 1/c_e. It holds when GPUs aggregate on every edge (direct
        links); through switches a tree edge may cross several links, so there is none (None)."""
        return (self.n - 1) / float(np.sum(1.0 / self.cost)) if self.direct else None


def _min_spanning_tree(n: int, pairs: list[tuple[int, int]], weights: np.ndarray) -> list[int]:
    """Kruskal over the candidate pairs; returns the chosen pair indices."""
    parent = list(range(n))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    tree = []
    for p in np.lexsort((np.arange(len(pairs)), weights)):
        a, b = pairs[p]
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[ra] = rb
            tree.append(int(p))
    return tree


def solve_tree_packing(graph: CostGraph, max_columns: int = 3000) -> tuple[float, list[tuple[float, list[int]]]]:
    """Optimal value of min max_e P_e c_e over the candidate pairs (their one path each) and the
    trees (pair indices) with their weights."""
    load_per_pair = graph.usage * graph.cost  # [pairs, links]: normalised time one tree edge adds

    def cheapest(weights: np.ndarray) -> Column:
        tree = _min_spanning_tree(graph.n, graph.pairs, load_per_pair @ weights)
        return Column(tuple(sorted(tree)), load_per_pair[tree].sum(axis=0))

    packing = pack(cheapest, len(graph.links), max_columns)
    return packing.value, [(w, list(c.key)) for w, c in packing.columns]


def plan_allreduce(planner: str, topology: Topology, nbytes: float) -> CommPlan:
    """The all-reduce of ``nbytes`` on ``topology`` by ``planner``: one stage of aggregated sends
    (what the simulator prices) and, in ``notes["schedule"]``, the schedule they come from (what
    the runtime executes; read it back with :func:`allreduce_schedule`). ``notes["bandwidth"]``:
    the plan's algorithm bandwidth against the partition bound (module docstring)."""
    if planner not in PLANNERS:
        raise PlanError(f"unknown all-reduce planner {planner!r}; choose one of {', '.join(PLANNERS)}")
    if not nbytes > 0:
        raise PlanError(f"--bytes must be > 0, got {nbytes}")
    graph = CostGraph(topology)
    plan = CommPlan("allreduce", planner, topology.name)
    if planner == "lp" and graph.direct:
        value, trees = solve_tree_packing(graph)
        schedule = _packed_trees(graph, trees)
        plan.notes.update(_packing_notes(graph, value, trees))
    elif planner == "lp":
        schedule, notes = _routed_trees(graph)
        plan.notes.update(notes)
    elif planner in ("ring", "tree"):
        schedule = _routed(graph, _ring(graph, channels=True) if planner == "ring" else _nccl_trees(graph))
    else:
        schedule = {"ring1": _ring, "tree1": _double_binary_trees, "ps": _sharded_servers}[planner](graph)
    plan.stages.append(_sends(graph, schedule, nbytes))
    plan.notes["schedule"] = schedule.to_json()
    plan.notes["normalized_time"] = normalized_time(plan, graph, nbytes)
    plan.notes["lower_bound"] = graph.lower_bound()
    gpu_links = graph.direct and all(len(send.route) == 2 for send in plan.stages[0])
    plan.notes["bandwidth"] = _bandwidth(plan, graph, nbytes, gpu_links_only=gpu_links)
    return plan


def allreduce_schedule(plan: CommPlan) -> AllReduceSchedule:
    """The schedule an all-reduce plan was made from (checked: see :class:`AllReduceSchedule`)."""
    if plan.kind != "allreduce":
        raise PlanError(f"an all-reduce schedule comes from an all-reduce plan, not {plan.kind!r}")
    if "schedule" not in plan.notes:
        raise PlanError(f"the {plan.planner!r} all-reduce plan for {plan.topology!r} carries no schedule; "
                        "plan it again with this version of commgraph")
    return AllReduceSchedule.from_json(plan.planner, plan.notes["schedule"])


def native_seconds(topology: Topology, nbytes: float) -> float:
    """torch's own all_reduce of ``nbytes`` across the topology's workers: as measured when the
    topology was calibrated with it (``calibrated.allreduce``), else priced as our ``ring``, the
    algorithm Gloo and NCCL use for large tensors, with NCCL's channels over every route."""
    measured = None if topology.calibrated is None else topology.calibrated.allreduce_seconds(nbytes)
    if measured is not None:
        return measured
    return price(plan_allreduce("ring", topology, nbytes), topology)["modeled_seconds"]


def choose_allreduce(topology: Topology, nbytes: float) -> str:
    """What ``auto`` runs: the all-reduce priced fastest for ``nbytes`` on ``topology``, torch's
    own (``native_seconds``) or a planned schedule (the simulator's price). Ties (within 1e-9
    relative) go to the earlier of ``native``, ``lp``, ``tree``, ``ps``."""
    seconds = {"native": native_seconds(topology, nbytes)}
    seconds |= {name: price(plan_allreduce(name, topology, nbytes), topology)["modeled_seconds"]
                for name in ("lp", "tree", "ps")}
    fastest = min(seconds.values())
    return next(name for name, time in seconds.items() if time <= fastest * (1 + 1e-9))


def make_allreduce(name: str, topology: Topology, nbytes: float) -> AllReduceSchedule | None:
    """The schedule ``--allreduce NAME`` runs for a gradient of ``nbytes`` on ``topology``, or None
    for torch's own all_reduce (``native``, or what ``auto`` chose)."""
    if name not in CHOICES:
        raise PlanError(f"unknown --allreduce {name!r}; choose one of {', '.join(CHOICES)}")
    if name == "auto":
        name = choose_allreduce(topology, nbytes)
    return None if name == "native" else allreduce_schedule(plan_allreduce(name, topology, nbytes))


# -- schedules ------------------------------------------------------------------------------------

def _ring(graph: CostGraph, channels: bool = False) -> AllReduceSchedule:
    """``ring1``'s one ring; with ``channels``, on an NVLink mesh its link-disjoint Hamiltonian
    cycles both ways, and on servers of equally many workers one ring per GPU position: ring c
    visits every server's workers from its c-th on (module docstring)."""
    order = [graph.workers[i] for i in _ring_order(graph)]
    hosts = _hosts(graph)
    cycles = _disjoint_cycles(graph) if channels and graph.direct else []
    if len(cycles) > 1:  # NCCL's rings on an NVLink mesh: link-disjoint cycles, each both ways
        rings = [tuple(graph.workers[i] for i in c) for cycle in cycles for c in (cycle, cycle[:1] + cycle[:0:-1])]
        return AllReduceSchedule("ring", tuple(graph.workers), rings=tuple(Ring(1.0 / len(rings), r) for r in rings))
    if not channels or len(hosts) < 2 or len({len(h) for h in hosts}) != 1:
        name = "ring" if channels else "ring1"
        return AllReduceSchedule(name, tuple(graph.workers), rings=(Ring(1.0, tuple(order)),))
    size = len(hosts[0])
    rings = tuple(Ring(1.0 / size, tuple(w for h in hosts for w in h[c:] + h[:c])) for c in range(size))
    return AllReduceSchedule("ring", tuple(graph.workers), rings=rings)


def _hosts(graph: CostGraph) -> list[list[str]]:
    """The workers of each host, hosts in order of their first worker."""
    by_host: dict[str, list[str]] = {}
    for w in graph.workers:
        by_host.setdefault(graph.topology.device(w).host, []).append(w)
    return list(by_host.values())


def _double_binary_trees(graph: CostGraph) -> AllReduceSchedule:
    """Two binary trees in heap order over the workers, the second over the order shifted by n/2,
    half the data each (NCCL's double binary tree, without its leaf/inner-node swap)."""
    n, trees = graph.n, []
    for shift in (0, 1):
        order = [graph.workers[(i + shift * (n // 2)) % n] for i in range(n)]
        edges = tuple((order[i], order[(i - 1) // 2]) for i in range(1, n))
        trees.append(Tree(0.5, order[0], edges))
    return AllReduceSchedule("tree1", tuple(graph.workers), trees=tuple(trees))


def _nccl_trees(graph: CostGraph) -> AllReduceSchedule:
    """NCCL's trees across servers of equally many workers: per channel c (one per GPU position)
    and per tree of the double binary tree over the servers, a chain through every server's
    workers from its c-th on, the chains' heads joined by that binary tree; 1/(2 x channels) of the
    data each. On one server (or unequal ones), ``tree1``'s double binary tree over the workers."""
    hosts = _hosts(graph)
    if len(hosts) < 2 or len({len(h) for h in hosts}) != 1:
        return _double_binary_trees(graph)
    size, count, trees = len(hosts[0]), len(hosts), []
    for c in range(size):
        for shift in (0, 1):
            order = [hosts[(k + shift * (count // 2)) % count] for k in range(count)]
            chains = [h[c:] + h[:c] for h in order]
            edges = [(chain[i], chain[i - 1]) for chain in chains for i in range(1, size)]
            edges += [(chains[k][0], chains[(k - 1) // 2][0]) for k in range(1, count)]
            trees.append(Tree(1.0 / (2 * size), chains[0][0], tuple(edges)))
    return AllReduceSchedule("tree", tuple(graph.workers), trees=tuple(trees))


def _sharded_servers(graph: CostGraph) -> AllReduceSchedule:
    """The parameter server as trees: worker b serves 1/n of the data, a star rooted at b that
    every other worker sends its share to and receives the sum from."""
    workers = graph.workers
    trees = tuple(Tree(1.0 / len(workers), b, tuple((a, b) for a in workers if a != b)) for b in workers)
    return AllReduceSchedule("ps", tuple(workers), trees=trees)


def _routed(graph: CostGraph, schedule: AllReduceSchedule) -> AllReduceSchedule:
    """``schedule`` (single-route rings or trees) with every hop split over the topology's routes by
    the min-max routing LP (:func:`commgraph.plan.packing.route_demands`)."""
    index = {w: i for i, w in enumerate(graph.workers)}
    n = graph.n
    demand: dict[tuple[int, int], float] = {}  # (sender, receiver) -> share of the data it carries
    for ring in schedule.rings:
        for a, b in zip(ring.order, ring.order[1:] + ring.order[:1]):
            key = (index[a], index[b])
            demand[key] = demand.get(key, 0.0) + 2 * (n - 1) / n * ring.weight
    for tree in schedule.trees:
        for child, parent in tree.edges:
            key = tuple(sorted((index[child], index[parent])))
            demand[key] = demand.get(key, 0.0) + tree.weight
    hops, both_ways = sorted(demand), bool(schedule.trees)
    topology, workers = graph.topology, graph.workers
    direct = [k for k, l in enumerate(topology.links) if l.a in index and l.b in index]
    if graph.direct and all(topology.links_between(workers[a], workers[b]) for a, b in hops):
        routes = RouteGraph(topology, workers, direct)  # NCCL's NVLink rings: the GPUs' own links only
    else:
        routes = RouteGraph(topology, workers)
    routing = route_demands(routes, [(a, b, demand[a, b]) for a, b in hops], both_ways)
    split = dict(zip(hops, routing.split))

    def routes_of(a: str, b: str) -> tuple[Route, ...]:
        hop = (index[a], index[b])
        flip = hop not in split
        shares = split[hop[::-1] if flip else hop]
        return tuple(Route(share, routes.devices(path[::-1] if flip else path)) for path, share in shares.items())

    rings = tuple(Ring(r.weight, r.order, tuple(routes_of(a, b) for a, b in zip(r.order, r.order[1:] + r.order[:1])))
                  for r in schedule.rings)
    trees = tuple(Tree(t.weight, t.root, t.edges, tuple(routes_of(c, p) for c, p in t.edges)) for t in schedule.trees)
    return AllReduceSchedule(schedule.planner[:-1] if schedule.planner.endswith("1") else schedule.planner,
                             schedule.devices, rings, trees)


def _routed_trees(graph: CostGraph) -> tuple[AllReduceSchedule, dict]:
    """``lp`` through switches: spanning trees whose edges take any route, packed by column
    generation (a column: a minimum spanning tree of the workers under the cheapest routed path
    between every two), the trees of the mix merged with their edges split over the routes."""
    routes = RouteGraph(graph.topology, graph.workers)
    n = graph.n
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]

    def cheapest(prices: np.ndarray) -> Column:
        paths = routes.shortest(prices, symmetric=True)
        tree = [pairs[p] for p in _min_spanning_tree(n, pairs, np.array([paths.cost[a, b] for a, b in pairs]))]
        edges = tuple(sorted((a, b, paths.path(a, b)) for a, b in tree))
        return Column(edges, sum(routes.load(path, True) for _, _, path in edges))

    packing = pack(cheapest, routes.resources)
    merged: dict[tuple[tuple[int, int], ...], tuple[float, dict]] = {}
    for weight, column in packing.columns:
        shape = tuple((a, b) for a, b, _ in column.key)
        total, split = merged.get(shape, (0.0, {}))
        for a, b, path in column.key:
            split.setdefault((a, b), {})
            split[a, b][path] = split[a, b].get(path, 0.0) + weight
        merged[shape] = (total + weight, split)
    trees = []
    for shape, (weight, split) in merged.items():
        root = _centre(n, list(shape))
        parent = _search(n, list(shape), root).parent
        edges, hops = [], []
        for a, b in shape:
            child = b if parent[b] == a else a
            edges.append((graph.workers[child], graph.workers[parent[child]]))
            hops.append(tuple(Route(share / weight, routes.devices(path if child == a else path[::-1]))
                              for path, share in split[a, b].items()))
        trees.append(Tree(weight, graph.workers[root], tuple(edges), tuple(hops)))
    unit, links = routes.unit_gbps, graph.topology.links
    load = sum(w * c.load for w, c in packing.columns).reshape(-1, 2).max(axis=1)
    utilisation = {f"{links[k].a}-{links[k].b}": float(load[k] / packing.value) for k in np.flatnonzero(load)}
    notes = {"optimum": packing.value, "optimum_fraction": str(Fraction(packing.value).limit_denominator(1000)),
             "certificate": {"lower_bound": packing.lower_bound, "converged": packing.converged,
                             "algbw_gbps_at_most": unit / packing.lower_bound},
             "trees": [{"weight": t.weight, "edges": [list(e) for e in t.edges]} for t in trees],
             "link_utilisation": utilisation}
    return AllReduceSchedule("lp", tuple(graph.workers), trees=tuple(trees)), notes


def _packed_trees(graph: CostGraph, trees: list[tuple[float, list[int]]]) -> AllReduceSchedule:
    """The LP's weighted spanning trees, each rooted at a centre (the fewest hops to its deepest
    node, so the fewest pipeline rounds) and its edges pointed towards that root."""
    rooted = []
    for weight, chosen in trees:
        edges = [graph.pairs[p] for p in chosen]
        root = _centre(graph.n, edges)
        parent = _search(graph.n, edges, root).parent
        children = [b if parent[b] == a else a for a, b in edges]
        rooted.append(Tree(weight, graph.workers[root],
                           tuple((graph.workers[c], graph.workers[parent[c]]) for c in children)))
    return AllReduceSchedule("lp", tuple(graph.workers), trees=tuple(rooted))


def _packing_notes(graph: CostGraph, value: float, trees: list[tuple[float, list[int]]]) -> dict:
    """The LP's optimum, its trees as the LP found them and each link's load relative to the busiest."""
    share = (np.array([w for w, _ in trees]) @ np.array([graph.usage[t].sum(axis=0) for _, t in trees])) * graph.cost
    utilisation = {f"{graph.topology.links[k].a}-{graph.topology.links[k].b}": float(u / value)
                   for k, u in zip(graph.links, share)}
    return {"optimum": value, "optimum_fraction": str(Fraction(value).limit_denominator(1000)),
            "trees": [{"weight": w, "edges": [[graph.workers[a], graph.workers[b]]
                                              for a, b in (graph.pairs[p] for p in t)]} for w, t in trees],
            "link_utilisation": utilisation}


def _sends(graph: CostGraph, schedule: AllReduceSchedule, nbytes: float) -> list[Send]:
    """The schedule's bytes as sends, one per ordered worker pair and route: a ring hop carries
    2(n-1)/n of its ring's share, a tree edge its tree's share each way. Hops without routes take
    the direct link on a direct-link machine, else the topology's route."""
    sends: dict[tuple[str, str, tuple[str, ...]], float] = {}

    def add(a: str, b: str, amount: float, routes: tuple[Route, ...], reverse: bool = False) -> None:
        for route in routes or (Route(1.0, _route(graph, b, a) if reverse else _route(graph, a, b)),):
            path = route.path[::-1] if reverse else route.path
            key = (a, b, path)
            sends[key] = sends.get(key, 0.0) + amount * route.share

    n = len(schedule.devices)
    for ring in schedule.rings:
        hops = list(zip(ring.order, ring.order[1:] + ring.order[:1]))
        for i, (a, b) in enumerate(hops):  # reduce-scatter then all-gather: 2(n-1) segments of 1/n
            add(a, b, 2 * (n - 1) / n * ring.weight * nbytes, ring.routes[i] if ring.routes else ())
    for tree in schedule.trees:
        for i, (child, parent) in enumerate(tree.edges):
            routes = tree.routes[i] if tree.routes else ()
            add(child, parent, tree.weight * nbytes, routes)  # reduce up
            add(parent, child, tree.weight * nbytes, routes, reverse=True)  # broadcast down, the same links back
    return [Send(a, b, amount, route=path) for (a, b, path), amount in sorted(sends.items())]


def _bandwidth(plan: CommPlan, graph: CostGraph, nbytes: float, gpu_links_only: bool) -> dict:
    """The plan's algorithm bandwidth in the steady state (bytes over the busiest link direction's
    time), its bus bandwidth (nccl-tests: x 2(n-1)/n) and the algorithm bandwidth against the
    partition bound over the links the plan may use (``gpu_links_only``: on a direct-link machine
    ``lp`` packs trees of GPU-to-GPU links only, as the paper does, and NCCL's rings run on them)."""
    topology = graph.topology
    algbw = nbytes / steady_seconds(plan.stages[0], topology) / 1e9
    workers = set(graph.workers)
    links = [k for k, l in enumerate(topology.links) if l.a in workers and l.b in workers] if gpu_links_only else None
    bound = partition_bound(topology, graph.workers, links)
    return {"algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (graph.n - 1) / graph.n,
            "bound": {**bound.to_json(), "links": "gpu-to-gpu" if gpu_links_only else "all"},
            "of_bound": algbw / bound.algbw_gbps}


@dataclass(frozen=True)
class _Search:
    parent: list[int]  # the start's is -1
    order: list[int]  # breadth-first: the last is a node farthest from the start


def _search(n: int, edges: list[tuple[int, int]], start: int) -> _Search:
    """Breadth-first search of a tree given by its edges over node ids 0..n-1."""
    neighbours: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        neighbours[a].append(b)
        neighbours[b].append(a)
    parent, order = [-2] * n, [start]
    parent[start] = -1
    for node in order:
        for nxt in neighbours[node]:
            if parent[nxt] == -2:
                parent[nxt] = node
                order.append(nxt)
    return _Search(parent, order)


def _centre(n: int, edges: list[tuple[int, int]]) -> int:
    """A centre of a tree: the middle of a longest path, found by two breadth-first searches (the
    node farthest from any node ends a longest path)."""
    search = _search(n, edges, _search(n, edges, 0).order[-1])
    path = [search.order[-1]]
    while search.parent[path[-1]] != -1:
        path.append(search.parent[path[-1]])
    return path[len(path) // 2]


def _route(graph: CostGraph, a: str, b: str) -> tuple[str, ...]:
    """Direct-link graphs: the tree edge itself; otherwise the topology's route (left empty)."""
    return (a, b) if graph.direct and graph.topology.links_between(a, b) else ()


def normalized_time(plan: CommPlan, graph: CostGraph, nbytes: float) -> float:
    """max over link directions of (bytes / all the data) x c_e, for the plan's routes."""
    column = {k: i for i, k in enumerate(graph.links)}
    load = {}
    topology = graph.topology
    for send in plan.stages[0]:
        hops = topology.route(send.src, send.dst) if not send.route else [
            h for x, y in zip(send.route, send.route[1:]) for h in topology.route(x, y)]
        for hop in hops:
            key = hop.resource
            load[key] = load.get(key, 0.0) + send.nbytes / nbytes
    worst = 0.0
    for resource, share in load.items():
        link = resource // 2
        if link in column:
            cost = graph.cost[column[link]]
        else:  # a link outside the cost graph (e.g. PCIe used by a ring on an NVLink machine)
            cost = graph.unit_gbps / topology.links[link].bandwidth_gbps
        worst = max(worst, share * cost)
    return worst


def _ring_order(graph: CostGraph) -> list[int]:
    """A Hamiltonian cycle over direct links with the widest narrowest link, if one exists (small n:
    depth-first search); otherwise the workers in order."""
    n = graph.n
    if not graph.direct or n > 16:
        return list(range(n))
    width = np.zeros((n, n))
    for p, (a, b) in enumerate(graph.pairs):
        width[a, b] = width[b, a] = max(width[a, b], 1.0 / graph.cost[graph.usage[p].argmax()])
    best: tuple[float, list[int]] = (0.0, list(range(n)))

    def search(path: list[int], narrowest: float) -> None:
        nonlocal best
        if narrowest <= best[0]:
            return
        if len(path) == n:
            closing = width[path[-1], path[0]]
            if closing > 0 and min(narrowest, closing) > best[0]:
                best = (min(narrowest, closing), list(path))
            return
        for nxt in range(n):
            if nxt not in path and width[path[-1], nxt] > 0:
                search(path + [nxt], min(narrowest, width[path[-1], nxt]))

    search([0], np.inf)
    return best[1]


def _disjoint_cycles(graph: CostGraph, budget: int = 200_000) -> list[list[int]]:
    """As many Hamiltonian cycles over the direct links as the links' counts allow, each link used
    by at most ``count`` of them (NVLink rings that share no NVLink: three on a DGX-1), by
    depth-first search with backtracking over the cycles found (at most ``budget`` steps); none
    beyond 16 workers."""
    n = graph.n
    if n > 16 or n < 3:
        return []
    capacity = np.zeros((n, n), dtype=int)
    for p, (a, b) in enumerate(graph.pairs):
        count = graph.topology.links[graph.links[int(graph.usage[p].argmax())]].count
        capacity[a, b] = capacity[b, a] = capacity[a, b] + count
    steps, best = 0, []

    def cycles(found: list[list[int]]) -> None:
        nonlocal best, steps
        if len(found) > len(best):
            best = [list(c) for c in found]
        path, seen = [0], {0}

        def extend() -> bool:
            nonlocal steps
            steps += 1
            if steps > budget:
                return True
            if len(path) == n:
                if capacity[path[-1], 0] > 0:
                    hops = list(zip(path, path[1:] + path[:1]))
                    for a, b in hops:
                        capacity[a, b] -= 1
                        capacity[b, a] -= 1
                    cycles(found + [list(path)])
                    for a, b in hops:
                        capacity[a, b] += 1
                        capacity[b, a] += 1
                return steps > budget
            for nxt in range(n):
                if nxt not in seen and capacity[path[-1], nxt] > 0:
                    path.append(nxt)
                    seen.add(nxt)
                    if extend():
                        return True
                    path.pop()
                    seen.discard(nxt)
            return False

        extend()

    cycles([])
    return best
