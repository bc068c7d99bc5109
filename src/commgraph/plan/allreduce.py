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
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from scipy.optimize import linprog

from commgraph.errors import PlanError
from commgraph.plan.model import CommPlan, Send
from commgraph.topology import Topology

PLANNERS = ("ring", "tree", "ps", "lp")
_TOL = 1e-10


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


def plan_broadcast(topology: Topology, root: str, nbytes: float) -> CommPlan:
    """Broadcast from ``root`` by packing arborescences rooted there (pipelined, one stage). On a
    GPU graph with direct links the optimum's reciprocal is the number of edge-disjoint
    arborescences Edmonds' theorem promises (6 per root on a DGX-1: each GPU has 6 NVLinks)."""
    import networkx as nx

    if not nbytes > 0:
        raise PlanError(f"--bytes must be > 0, got {nbytes}")
    graph = CostGraph(topology)
    if root not in graph.workers:
        raise PlanError(f"root {root!r} is not a worker device of {topology.name!r}: {', '.join(graph.workers)}")
    # arcs: both directions of every candidate pair; each direction of a link is its own resource
    arcs = [(a, b, graph.paths[p]) for p, (a, b) in enumerate(graph.pairs)]
    arcs += [(b, a, graph.paths[p][::-1]) for p, (a, b) in enumerate(graph.pairs)]
    resources = sorted({2 * k + d for k in graph.links for d in (0, 1)})
    column = {r: i for i, r in enumerate(resources)}
    cost = dict(zip(graph.links, graph.cost))
    load_per_arc = np.zeros((len(arcs), len(resources)))
    for i, (_, _, path) in enumerate(arcs):
        for x, y in zip(path, path[1:]):
            k = max(topology.links_between(x, y), key=lambda j: topology.links[j].bandwidth_gbps)
            load_per_arc[i, column[2 * k + (0 if topology.links[k].a == x else 1)]] += cost[k]
    r = graph.workers.index(root)

    def cheapest(weights: np.ndarray) -> list[int]:
        digraph = nx.DiGraph()
        digraph.add_nodes_from(range(graph.n))
        for i, (a, b, _) in enumerate(arcs):
            if b != r and (not digraph.has_edge(a, b) or digraph[a][b]["weight"] > weights[i]):
                digraph.add_edge(a, b, weight=float(weights[i]), arc=i)
        tree = nx.minimum_spanning_arborescence(digraph, preserve_attrs=True)
        return sorted(data["arc"] for _, _, data in tree.edges(data=True))

    value, arborescences = pack(load_per_arc, cheapest)
    sends: dict[int, float] = {}
    for weight, chosen in arborescences:
        for i in chosen:
            sends[i] = sends.get(i, 0.0) + weight * nbytes
    plan = CommPlan("broadcast", "arborescence", topology.name)
    plan.stages.append([Send(graph.workers[arcs[i][0]], graph.workers[arcs[i][1]], amount, route=arcs[i][2])
                        for i, amount in sorted(sends.items())])
    plan.notes = {"root": root, "optimum": value, "optimum_fraction": str(Fraction(value).limit_denominator(1000)),
                  "arborescences_rate": 1.0 / value, "normalized_time": value,
                  "arborescences": [{"weight": w, "arcs": [[graph.workers[arcs[i][0]], graph.workers[arcs[i][1]]]
                                                           for i in c]} for w, c in arborescences]}
    return plan


def plan_allreduce(planner: str, topology: Topology, nbytes: float) -> CommPlan:
    if planner not in PLANNERS:
        raise PlanError(f"unknown all-reduce planner {planner!r}; choose one of {', '.join(PLANNERS)}")
    if not nbytes > 0:
        raise PlanError(f"--bytes must be > 0, got {nbytes}")
    graph = CostGraph(topology)
    plan = CommPlan("allreduce", planner, topology.name)
    sends: dict[tuple[int, int], float] = {}

    def add(a: int, b: int, amount: float) -> None:
        sends[(a, b)] = sends.get((a, b), 0.0) + amount

    n = graph.n
    if planner == "ring":
        order = _ring_order(graph)
        for i in range(n):  # reduce-scatter then all-gather: 2(n-1) chunks of nbytes/n per ring edge
            add(order[i], order[(i + 1) % n], 2 * (n - 1) * nbytes / n)
        plan.notes["ring"] = [graph.workers[i] for i in order]
    elif planner == "tree":
        for shift in (0, 1):  # two binary trees over shifted orders, half the data each
            order = [(i + shift * (n // 2)) % n for i in range(n)]
            for i in range(1, n):
                child, parent = order[i], order[(i - 1) // 2]
                add(child, parent, nbytes / 2)  # reduce up
                add(parent, child, nbytes / 2)  # broadcast down
    elif planner == "ps":
        for a in range(n):  # every worker serves 1/n of the parameters
            for b in range(n):
                if a != b:
                    add(a, b, nbytes / n)  # a's gradient shard to its server b
                    add(b, a, nbytes / n)  # b's updated shard back to a
    else:
        value, trees = solve_tree_packing(graph)
        paths: dict[tuple[int, int], tuple[str, ...]] = {}
        for weight, tree in trees:
            for p in tree:
                a, b = graph.pairs[p]
                add(a, b, weight * nbytes)  # each tree edge: reduce one way, broadcast the other
                add(b, a, weight * nbytes)  # over the same links, as the LP counted them
                paths[(a, b)], paths[(b, a)] = graph.paths[p], graph.paths[p][::-1]
        share = (np.array([w for w, _ in trees]) @ np.array(
            [graph.usage[t].sum(axis=0) for _, t in trees])) * graph.cost
        utilisation = {f"{graph.topology.links[k].a}-{graph.topology.links[k].b}": float(u / value)
                       for k, u in zip(graph.links, share)}
        plan.notes.update({"optimum": value, "optimum_fraction": str(Fraction(value).limit_denominator(1000)),
                           "trees": [{"weight": w, "edges": [[graph.workers[a], graph.workers[b]]
                                                             for a, b in (graph.pairs[p] for p in t)]}
                                     for w, t in trees],
                           "link_utilisation": utilisation})
    routes = paths if planner == "lp" else {}
    plan.stages.append([Send(graph.workers[a], graph.workers[b], amount,
                             route=routes.get((a, b)) or _route(graph, a, b))
                        for (a, b), amount in sorted(sends.items())])
    plan.notes["normalized_time"] = normalized_time(plan, graph, nbytes)
    plan.notes["lower_bound"] = graph.lower_bound()
    return plan


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
