"""All-reduce planners: ``ring``, ``tree`` (double binary tree), ``ps`` (sharded parameter server,
the baseline) and ``lp``, the optimal schedule of Wang, Li, Liberty and Smola (SysML'18): a convex
combination of spanning trees minimising max_e P_e c_e over the spanning-tree polytope, where P_e is
the share of the data crossing link e and c_e the time to send all the data over e.

Costs are normalised to "all the data once over one single link": on an NVLink graph c_e = 1/count
(1 for NV1, 1/2 for NV2, as in the paper), otherwise c_e = (slowest per-link bandwidth) / bandwidth.

The LP runs over the GPUs' direct links when those connect all GPUs (section 2: GPUs aggregate, so
any spanning tree of them is a schedule). Otherwise (PCIe switch trees, clusters: section 3) a tree
edge between two GPUs is their routed path through devices that forward but cannot aggregate, and
P_e counts how many tree edges cross physical link e. The LP is solved exactly by column generation
with HiGHS (scipy): the restricted master gives link prices, and a minimum spanning tree under those
prices is the column with the most negative reduced cost; none left means optimal. No tree is
enumerated, so it is the true optimum of the LP on any topology.

Every all-reduce plan is one stage: its sends stream concurrently (chunks pipelined through the
trees or the ring), and each carries its total bytes, so pricing it in the simulator gives the
steady-state time.

Each plan also keeps the schedule its sends come from, as data the runtime executes
(:mod:`commgraph.runtime.allreduce`): a ring order for ``ring`` (reduce-scatter then all-gather), and
weighted rooted spanning trees for the others: ``tree``'s two binary trees of weight 1/2, ``ps`` as n
stars of weight 1/n (worker b serves 1/n of the data), ``lp``'s packing with each tree rooted at its
centre. A tree's share of the data is reduced along its edges towards the root and broadcast back
down the same edges.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy.optimize import linprog

from commgraph.errors import PlanError
from commgraph.plan.model import CommPlan, Send
from commgraph.plan.price import price
from commgraph.topology import Topology

PLANNERS = ("ring", "tree", "ps", "lp")
CHOICES = ("auto", "native", *PLANNERS)  # what a trainer may run: planned schedules, torch's own, or the cheapest
_TOL = 1e-10
_WEIGHT_TOL = 1e-6  # a schedule's tree weights sum to 1 within this


@dataclass(frozen=True)
class Tree:
    """A spanning tree of the workers carrying ``weight`` of the data: reduced along ``edges``
    (child, parent) towards ``root``, then broadcast back down the same edges."""

    weight: float
    root: str
    edges: tuple[tuple[str, str], ...]

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
class AllReduceSchedule:
    """How an all-reduce of ``planner`` runs over ``devices`` (the workers, in topology order):
    around ``ring`` (reduce-scatter then all-gather), or over ``trees`` (the data cut into one
    contiguous share per tree by weight). Exactly one of the two is given; both are checked when the
    schedule is made: the ring visits every device once, every tree spans the devices with the root
    at its top, weights are positive and sum to 1. A schedule that breaks this raises PlanError."""

    planner: str
    devices: tuple[str, ...]
    ring: tuple[str, ...] = ()
    trees: tuple[Tree, ...] = ()

    def __post_init__(self) -> None:
        where = f"all-reduce schedule {self.planner!r}"
        if len(self.devices) < 2 or len(set(self.devices)) != len(self.devices):
            raise PlanError(f"{where}: needs 2 or more distinct devices, got {list(self.devices)}")
        if bool(self.ring) == bool(self.trees):
            raise PlanError(f"{where}: needs a ring or trees (exactly one of them)")
        if self.ring and sorted(self.ring) != sorted(self.devices):
            raise PlanError(f"{where}: the ring {list(self.ring)} does not visit each of {list(self.devices)} once")
        for k, tree in enumerate(self.trees):
            _check_tree(tree, self.devices, f"{where}, tree {k}")
        total = sum(tree.weight for tree in self.trees)
        if self.trees and abs(total - 1.0) > _WEIGHT_TOL:
            raise PlanError(f"{where}: tree weights sum to {total}, not 1")

    def to_json(self) -> dict:
        if self.ring:
            return {"devices": list(self.devices), "ring": list(self.ring)}
        return {"devices": list(self.devices),
                "trees": [{"weight": t.weight, "root": t.root, "edges": [list(e) for e in t.edges]}
                          for t in self.trees]}

    @classmethod
    def from_json(cls, planner: str, data: dict) -> AllReduceSchedule:
        try:
            trees = tuple(Tree(float(t["weight"]), str(t["root"]), tuple((str(c), str(p)) for c, p in t["edges"]))
                          for t in data.get("trees", ()))
            return cls(planner, tuple(map(str, data["devices"])), tuple(map(str, data.get("ring", ()))), trees)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PlanError(f"all-reduce schedule {planner!r} is malformed ({type(exc).__name__}: {exc})") from None


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
        self._pair_index = {(a, b): p for p, (a, b) in enumerate(self.pairs)}
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

    def path(self, a: int, b: int) -> tuple[str, ...]:
        """The devices a tree edge from worker ``a`` to worker ``b`` crosses."""
        if (a, b) in self._pair_index:
            return self.paths[self._pair_index[a, b]]
        return self.paths[self._pair_index[b, a]][::-1]

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


def solve_tree_packing(graph: CostGraph, max_columns: int = 2000) -> tuple[float, list[tuple[float, list[int]]]]:
    """Optimal value of min max_e P_e c_e and the trees (pair indices) with their weights."""
    load_per_pair = graph.usage * graph.cost  # [pairs, links]: normalised time one tree edge adds

    def cheapest(weights: np.ndarray) -> list[int]:
        return _min_spanning_tree(graph.n, graph.pairs, weights)

    return pack(load_per_pair, cheapest, max_columns)


def pack(load_per_edge: np.ndarray, cheapest, max_columns: int = 2000) -> tuple[float, list[tuple[float, list[int]]]]:
    """Column generation over a family of edge sets (spanning trees, arborescences): minimise the
    bottleneck max_r sum_T alpha_T load_T[r] over convex combinations, where load_T is the sum of
    ``load_per_edge`` rows of T's edges and ``cheapest(weights)`` returns the member of the family
    with the least total edge weight (the pricing problem). The optimum is often reached by many
    mixes; a second LP picks, among them, one that moves the least data in total, so links off the
    bottleneck carry no more than needed."""
    columns = [cheapest(load_per_edge.sum(axis=1))]
    value, _ = _column_generation(load_per_edge, cheapest, columns, None, max_columns)
    _, thrifty = _column_generation(load_per_edge, cheapest, columns, value, max_columns)
    return value, thrifty


def _column_generation(load_per_edge, cheapest, columns, cap, max_columns):
    """Minimise the bottleneck (``cap`` None) or, with every resource at most ``cap``, the total
    load. ``columns`` grows in place. Returns (bottleneck value, weighted columns)."""
    while True:
        a_res = np.array([load_per_edge[c].sum(axis=0) for c in columns]).T  # [resources, columns]
        n_res, n_cols = a_res.shape
        if cap is None:  # variables: column weights, then z
            objective = np.concatenate([np.zeros(n_cols), [1.0]])
            a_ub = np.hstack([a_res, -np.ones((n_res, 1))])
            a_eq = np.concatenate([np.ones(n_cols), [0.0]])[None, :]
        else:
            objective = a_res.sum(axis=0)
            a_ub, a_eq = a_res, np.ones((1, n_cols))
        result = linprog(objective, A_ub=a_ub, b_ub=np.full(n_res, 0.0 if cap is None else cap),
                         A_eq=a_eq, b_eq=[1.0], bounds=[(0, None)] * objective.size, method="highs")
        if result.status != 0:
            raise PlanError(f"the packing LP failed: {result.message}")
        prices = -result.ineqlin.marginals  # >= 0: what one more unit of load on a resource costs
        convexity = result.eqlin.marginals[0]
        edge_price = load_per_edge @ (prices if cap is None else 1.0 + prices)
        column = cheapest(edge_price)
        if float(edge_price[column].sum()) >= convexity - _TOL or len(columns) >= max_columns:
            weights = result.x[:n_cols]
            bottleneck = float((a_res @ weights).max())
            return bottleneck, [(float(w), c) for w, c in zip(weights, columns) if w > _TOL]
        columns.append(column)


def plan_allreduce(planner: str, topology: Topology, nbytes: float) -> CommPlan:
    """The all-reduce of ``nbytes`` on ``topology`` by ``planner``: one stage of aggregated sends
    (what the simulator prices) and, in ``notes["schedule"]``, the schedule they come from (what
    the runtime executes; read it back with :func:`allreduce_schedule`)."""
    if planner not in PLANNERS:
        raise PlanError(f"unknown all-reduce planner {planner!r}; choose one of {', '.join(PLANNERS)}")
    if not nbytes > 0:
        raise PlanError(f"--bytes must be > 0, got {nbytes}")
    graph = CostGraph(topology)
    plan = CommPlan("allreduce", planner, topology.name)
    if planner == "lp":
        value, trees = solve_tree_packing(graph)
        schedule = _packed_trees(graph, trees)
        plan.notes.update(_packing_notes(graph, value, trees))
    else:
        schedule = {"ring": _ring, "tree": _double_binary_trees, "ps": _sharded_servers}[planner](graph)
    sends = _sends(graph, schedule, nbytes)
    plan.stages.append([Send(graph.workers[a], graph.workers[b], amount,
                             route=graph.path(a, b) if planner == "lp" else _route(graph, a, b))
                        for (a, b), amount in sorted(sends.items())])
    plan.notes["schedule"] = schedule.to_json()
    plan.notes["normalized_time"] = normalized_time(plan, graph, nbytes)
    plan.notes["lower_bound"] = graph.lower_bound()
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
    algorithm Gloo and NCCL use for large tensors."""
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

def _ring(graph: CostGraph) -> AllReduceSchedule:
    order = tuple(graph.workers[i] for i in _ring_order(graph))
    return AllReduceSchedule("ring", tuple(graph.workers), ring=order)


def _double_binary_trees(graph: CostGraph) -> AllReduceSchedule:
    """Two binary trees in heap order over the workers, the second over the order shifted by n/2,
    half the data each (NCCL's double binary tree, without its leaf/inner-node swap)."""
    n, trees = graph.n, []
    for shift in (0, 1):
        order = [graph.workers[(i + shift * (n // 2)) % n] for i in range(n)]
        edges = tuple((order[i], order[(i - 1) // 2]) for i in range(1, n))
        trees.append(Tree(0.5, order[0], edges))
    return AllReduceSchedule("tree", tuple(graph.workers), trees=tuple(trees))


def _sharded_servers(graph: CostGraph) -> AllReduceSchedule:
    """The parameter server as trees: worker b serves 1/n of the data, a star rooted at b that
    every other worker sends its share to and receives the sum from."""
    workers = graph.workers
    trees = tuple(Tree(1.0 / len(workers), b, tuple((a, b) for a in workers if a != b)) for b in workers)
    return AllReduceSchedule("ps", tuple(workers), trees=trees)


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


def _sends(graph: CostGraph, schedule: AllReduceSchedule, nbytes: float) -> dict[tuple[int, int], float]:
    """Bytes per ordered worker pair (indices) when the schedule all-reduces ``nbytes``."""
    index = {w: i for i, w in enumerate(graph.workers)}
    sends: dict[tuple[int, int], float] = {}

    def add(a: str, b: str, amount: float) -> None:
        key = (index[a], index[b])
        sends[key] = sends.get(key, 0.0) + amount

    ring, n = schedule.ring, len(schedule.ring)
    for i in range(n):  # reduce-scatter then all-gather: 2(n-1) segments of nbytes/n per ring edge
        add(ring[i], ring[(i + 1) % n], 2 * (n - 1) * nbytes / n)
    for tree in schedule.trees:
        for child, parent in tree.edges:
            add(child, parent, tree.weight * nbytes)  # reduce up
            add(parent, child, tree.weight * nbytes)  # broadcast down, over the same links
    return sends


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


def _route(graph: CostGraph, a: int, b: int) -> tuple[str, ...]:
    """Direct-link graphs: the tree edge itself; otherwise the topology's route (left empty)."""
    wa, wb = graph.workers[a], graph.workers[b]
    return (wa, wb) if graph.direct and graph.topology.links_between(wa, wb) else ()


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
