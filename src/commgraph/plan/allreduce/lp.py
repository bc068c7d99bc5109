"""``lp``: the optimal all-reduce of Wang, Li, Liberty and Smola (SysML'18) by column generation
(the package's description): over direct links (``solve_tree_packing``) or through switches
(``routed_trees``)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from commgraph.plan.allreduce.graph import CostGraph, tree_centre, min_spanning_tree, tree_search
from commgraph.plan.allreduce.schedule import AllReduceSchedule, Route, Tree
from commgraph.plan.packing import Column, RouteGraph, pack


def solve_tree_packing(graph: CostGraph, max_columns: int = 3000) -> tuple[float, list[tuple[float, list[int]]]]:
    """Optimal value of min max_e P_e c_e over the candidate pairs (their one path each) and the
    trees (pair indices) with their weights."""
    load_per_pair = graph.usage * graph.cost  # [pairs, links]: normalised time one tree edge adds

    def cheapest(weights: np.ndarray) -> Column:
        tree = min_spanning_tree(graph.n, graph.pairs, load_per_pair @ weights)
        return Column(tuple(sorted(tree)), load_per_pair[tree].sum(axis=0))

    packing = pack(cheapest, len(graph.links), max_columns)
    return packing.value, [(w, list(c.key)) for w, c in packing.columns]

def routed_trees(graph: CostGraph) -> tuple[AllReduceSchedule, dict]:
    """``lp`` through switches: spanning trees whose edges take any route, packed by column
    generation (a column: a minimum spanning tree of the workers under the cheapest routed path
    between every two), the trees of the mix merged with their edges split over the routes."""
    routes = RouteGraph(graph.topology, graph.workers)
    n = graph.n
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]

    def cheapest(prices: np.ndarray) -> Column:
        paths = routes.shortest(prices, symmetric=True)
        tree = [pairs[p] for p in min_spanning_tree(n, pairs, np.array([paths.cost[a, b] for a, b in pairs]))]
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
        root = tree_centre(n, list(shape))
        parent = tree_search(n, list(shape), root).parent
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


def packed_trees(graph: CostGraph, trees: list[tuple[float, list[int]]]) -> AllReduceSchedule:
    """The LP's weighted spanning trees, each rooted at a centre (the fewest hops to its deepest
    node, so the fewest pipeline rounds) and its edges pointed towards that root."""
    rooted = []
    for weight, chosen in trees:
        edges = [graph.pairs[p] for p in chosen]
        root = tree_centre(graph.n, edges)
        parent = tree_search(graph.n, edges, root).parent
        children = [b if parent[b] == a else a for a, b in edges]
        rooted.append(Tree(weight, graph.workers[root],
                           tuple((graph.workers[c], graph.workers[parent[c]]) for c in children)))
    return AllReduceSchedule("lp", tuple(graph.workers), trees=tuple(rooted))


def packing_notes(graph: CostGraph, value: float, trees: list[tuple[float, list[int]]]) -> dict:
    """The LP's optimum, its trees as the LP found them and each link's load relative to the busiest."""
    share = (np.array([w for w, _ in trees]) @ np.array([graph.usage[t].sum(axis=0) for _, t in trees])) * graph.cost
    utilisation = {f"{graph.topology.links[k].a}-{graph.topology.links[k].b}": float(u / value)
                   for k, u in zip(graph.links, share)}
    return {"optimum": value, "optimum_fraction": str(Fraction(value).limit_denominator(1000)),
            "trees": [{"weight": w, "edges": [[graph.workers[a], graph.workers[b]]
                                              for a, b in (graph.pairs[p] for p in t)]} for w, t in trees],
            "link_utilisation": utilisation}
