"""``lp``: the optimal all-reduce of Wang, Li, Liberty and Smola (SysML'18) by column generation
(the package's description): over direct links (``solve_tree_packing``) or through switches
(``routed_trees``)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from scipy.sparse.csgraph import minimum_spanning_tree

from commgraph.plan.allreduce.graph import CostGraph, min_spanning_tree, tree_centre, tree_search
from commgraph.plan.allreduce.schedule import AllReduceSchedule, Route, Tree
from commgraph.plan.packing import Column, RouteGraph, pack
from commgraph.plan.symmetry import Symmetry, find_symmetry, no_symmetry


def solve_tree_packing(graph: CostGraph, max_columns: int = 3000) -> tuple[float, list[tuple[float, list[int]]]]:
    """Optimal value of min max_e P_e c_e over the candidate pairs (their one path each) and the
    trees (pair indices) with their weights."""
    load_per_pair = graph.usage * graph.cost  # [pairs, links]: normalised time one tree edge adds

    def cheapest(weights: np.ndarray) -> Column:
        tree = min_spanning_tree(graph.n, graph.pairs, load_per_pair @ weights)
        return Column(tuple(sorted(tree)), load_per_pair[tree].sum(axis=0))

    packing = pack(cheapest, len(graph.links), max_columns)
    return packing.value, [(w, list(c.key)) for w, c in packing.columns]


def routed_trees(graph: CostGraph, symmetric: bool = True) -> tuple[AllReduceSchedule, dict]:
    """``lp`` through switches: spanning trees whose edges take any route, packed by column
    generation (a column: a minimum spanning tree of the workers under the cheapest routed path
    between every two) with one master row per orbit of the machine's symmetry (``symmetric``; else
    one per link direction), the mix expanded over the symmetry (:mod:`commgraph.plan.symmetry`),
    the trees merged with their edges split over the routes."""
    routes = RouteGraph(graph.topology, graph.workers)
    symmetry = find_symmetry(graph.topology, graph.workers) if symmetric else no_symmetry(graph.topology)
    n = graph.n
    upper = np.triu_indices(n, 1)

    def cheapest(prices: np.ndarray) -> Column:
        paths = routes.shortest(prices, symmetric=True)
        costs = np.zeros((n, n))
        costs[upper] = paths.cost[upper]  # positive: every price carries a tie-breaking epsilon
        tree = minimum_spanning_tree(costs).tocoo()
        edges = tuple(
            sorted(
                (int(min(a, b)), int(max(a, b)), paths.path(int(min(a, b)), int(max(a, b))))
                for a, b in zip(tree.row, tree.col)
            )
        )
        return Column(edges, sum(routes.load(path, True) for _, _, path in edges))

    packing = pack(cheapest, routes.resources, classes=symmetry.classes)
    trees = _expanded_trees(graph, routes, symmetry, packing.columns)
    unit, links = routes.unit_gbps, graph.topology.links
    mix = sum(w * c.load for w, c in packing.columns)
    size = np.bincount(symmetry.classes).astype(float)
    load = (np.bincount(symmetry.classes, weights=mix) / size)[symmetry.classes].reshape(-1, 2).max(axis=1)
    utilisation = {f"{links[k].a}-{links[k].b}": float(load[k] / packing.value) for k in np.flatnonzero(load > 1e-12)}
    notes = {
        "optimum": packing.value,
        "optimum_fraction": str(Fraction(packing.value).limit_denominator(1000)),
        "certificate": {
            "lower_bound": packing.lower_bound,
            "converged": packing.converged,
            "algbw_gbps_at_most": unit / packing.lower_bound,
        },
        "synthesis": {
            "rounds": packing.rounds,
            "columns": len(packing.columns),
            "orbits": symmetry.orbits,
            "server_shifts": len(symmetry.shifts),
            "twin_classes": len(symmetry.members),
        },
        "trees": [{"weight": t.weight, "edges": [list(e) for e in t.edges]} for t in trees],
        "link_utilisation": utilisation,
    }
    return AllReduceSchedule("lp", tuple(graph.workers), trees=tuple(trees)), notes


def _expanded_trees(graph: CostGraph, routes: RouteGraph, symmetry: Symmetry, columns) -> list[Tree]:
    """The mix's trees over every server shift, each edge split over the twins on its path, trees
    of one shape merged (their edges' routes weighted by the trees' weights), rooted at a centre."""
    n = graph.n
    position = {d: i for i, d in enumerate(routes.worker_index)}
    workers = [[position[int(d)] for d in shift[routes.worker_index]] for shift in symmetry.shifts]
    count = len(symmetry.shifts)
    merged: dict[tuple[tuple[int, int], ...], tuple[float, dict]] = {}
    for weight, column in columns:
        images: list[list[tuple[int, int, dict]]] = [[] for _ in range(count)]
        for a, b, path in column.key:
            by_shift: list[dict] = [{} for _ in range(count)]
            for k, share, image in symmetry.expand(path):
                by_shift[k][image] = by_shift[k].get(image, 0.0) + share
            for k in range(count):
                x, y = workers[k][a], workers[k][b]
                split = by_shift[k] if x < y else {p[::-1]: v for p, v in by_shift[k].items()}
                images[k].append((min(x, y), max(x, y), split))
        for edges in images:
            shape = tuple(sorted((a, b) for a, b, _ in edges))
            total, split = merged.get(shape, (0.0, {}))
            for a, b, shares in edges:
                hop = split.setdefault((a, b), {})
                for path, share in shares.items():
                    hop[path] = hop.get(path, 0.0) + weight / count * share
            merged[shape] = (total + weight / count, split)
    trees = []
    for shape, (weight, split) in merged.items():
        root = tree_centre(n, list(shape))
        parent = tree_search(n, list(shape), root).parent
        edges, hops = [], []
        for a, b in shape:
            child = b if parent[b] == a else a
            edges.append((graph.workers[child], graph.workers[parent[child]]))
            hops.append(
                tuple(
                    Route(share / weight, routes.devices(path if child == a else path[::-1]))
                    for path, share in split[a, b].items()
                )
            )
        trees.append(Tree(weight, graph.workers[root], tuple(edges), tuple(hops)))
    return trees


def packed_trees(graph: CostGraph, trees: list[tuple[float, list[int]]]) -> AllReduceSchedule:
    """The LP's weighted spanning trees, each rooted at a centre (the fewest hops to its deepest
    node, so the fewest pipeline rounds) and its edges pointed towards that root."""
    rooted = []
    for weight, chosen in trees:
        edges = [graph.pairs[p] for p in chosen]
        root = tree_centre(graph.n, edges)
        parent = tree_search(graph.n, edges, root).parent
        children = [b if parent[b] == a else a for a, b in edges]
        rooted.append(
            Tree(weight, graph.workers[root], tuple((graph.workers[c], graph.workers[parent[c]]) for c in children))
        )
    return AllReduceSchedule("lp", tuple(graph.workers), trees=tuple(rooted))


def packing_notes(graph: CostGraph, value: float, trees: list[tuple[float, list[int]]]) -> dict:
    """The LP's optimum, its trees as the LP found them and each link's load relative to the busiest."""
    share = (np.array([w for w, _ in trees]) @ np.array([graph.usage[t].sum(axis=0) for _, t in trees])) * graph.cost
    utilisation = {
        f"{graph.topology.links[k].a}-{graph.topology.links[k].b}": float(u / value) for k, u in zip(graph.links, share)
    }
    return {
        "optimum": value,
        "optimum_fraction": str(Fraction(value).limit_denominator(1000)),
        "trees": [
            {"weight": w, "edges": [[graph.workers[a], graph.workers[b]] for a, b in (graph.pairs[p] for p in t)]}
            for w, t in trees
        ],
        "link_utilisation": utilisation,
    }
