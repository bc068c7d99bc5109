"""All-gather and reduce-scatter across the workers (the collectives, not the graph halo exchange of
:mod:`commgraph.plan.allgather`): ``nbytes`` is the whole gathered tensor, every worker holding
(all-gather) or ending with (reduce-scatter) its 1/n shard.

- ``ring``: NCCL's rings (the channels of the all-reduce's ``ring``, :mod:`commgraph.plan.allreduce`),
  every hop carrying (n-1)/n of its ring's share, split over the routes as the all-reduce's.
- ``lp``: the optimal schedule over spanning arborescences (ForestColl's product, Zhao et al.,
  arXiv 2402.06787), by the all-reduce LP's machinery: every worker's shard is split over
  arborescences rooted at it, whose arcs take any route the hardware has, and the LP minimises the
  busiest link direction over all roots at once (one convexity group per root; the pricing problem
  of a root is a minimum spanning arborescence under the link prices, Chu-Liu/Edmonds'
  algorithm on the dense matrix of the cheapest routed path between every two workers). The machine's symmetry
  (:mod:`commgraph.plan.symmetry`) leaves one root per orbit to price and one master row per orbit
  of links. Reduce-scatter runs the same arborescences backwards (every shard reduced towards its
  owner): each link direction carries what the all-gather puts on the opposite one, so both
  collectives have the same optimum.

Both are one stage of aggregated sends, priced like the all-reduce (its sends paced together:
``notes["pipelined"]``): algorithm bandwidth (nbytes over
the busiest link direction's time in the simulator's steady state) against the cut bound
:func:`commgraph.plan.packing.gather_bound`, and for ``lp`` the column generation's certificate.
Both keep the arborescences as an ``AllReduceSchedule`` of trees rooted at the shards' owners
(``notes["schedule"]``, ``collective`` set; ``ring``'s: the chain from every worker around every
ring), which :mod:`commgraph.runtime.allreduce` executes: an all-gather as the trees' broadcast
down, a reduce-scatter as their reduction up.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from commgraph.errors import PlanError
from commgraph.plan.allreduce import AllReduceSchedule, CostGraph, Route, Tree
from commgraph.plan.allreduce.nccl import nccl_rings, routed
from commgraph.plan.model import CommPlan, Send
from commgraph.plan.packing import Column, RouteGraph, gather_bound, pack
from commgraph.plan.price import steady_seconds
from commgraph.plan.symmetry import Symmetry, find_symmetry
from commgraph.topology import Topology

COLLECTIVES = ("allgather", "reducescatter")
PLANNERS = ("ring", "lp")


def plan_collective(collective: str, planner: str, topology: Topology, nbytes: float) -> CommPlan:
    """The ``collective`` (all-gather or reduce-scatter) of a ``nbytes`` tensor across the workers
    of ``topology`` by ``planner`` (module docstring): one stage of sends; ``notes["bandwidth"]``
    the algorithm bandwidth against the cut bound, and for ``lp`` the optimum and its certificate.

    Raises:
        PlanError: an unknown collective or planner, ``nbytes`` not positive, fewer than 2 workers.
        TopologyError: two workers without a route between them.
    """
    if collective not in COLLECTIVES:
        raise PlanError(f"unknown collective {collective!r}; choose one of {', '.join(COLLECTIVES)}")
    if planner not in PLANNERS:
        raise PlanError(f"unknown {collective} planner {planner!r}; choose one of {', '.join(PLANNERS)}")
    if not nbytes > 0:
        raise PlanError(f"--bytes must be > 0, got {nbytes}")
    graph = CostGraph(topology)
    plan = CommPlan(collective, planner, topology.name, notes={"pipelined": True})
    if planner == "ring":
        trees = _ring_chains(graph)
    else:
        trees, notes = _arborescences(graph)
        plan.notes.update(notes)
    order = {d: i for i, d in enumerate(graph.workers)}
    schedule = AllReduceSchedule(
        planner, tuple(graph.workers), trees=tuple(sorted(trees, key=lambda t: order[t.root])), collective=collective
    )
    plan.stages.append(_sends(schedule, nbytes))
    plan.notes["schedule"] = schedule.to_json()
    algbw = nbytes / steady_seconds(plan.stages[0], topology) / 1e9
    bound = gather_bound(topology, graph.workers)
    plan.notes["bandwidth"] = {
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * (graph.n - 1) / graph.n,
        "bound": bound.to_json(),
        "of_bound": algbw / bound.algbw_gbps,
    }
    return plan


def _sends(schedule: AllReduceSchedule, nbytes: float) -> list[Send]:
    """Every tree edge carries its tree's share: down from parent to child (all-gather) or up
    (reduce-scatter), over its routes."""
    sends: dict[tuple[str, str, tuple[str, ...]], float] = {}
    down = schedule.collective == "allgather"
    for tree in schedule.trees:
        for (child, parent), routes in zip(tree.edges, tree.routes):
            for route in routes:
                key = (parent, child, route.path[::-1]) if down else (child, parent, route.path)
                sends[key] = sends.get(key, 0.0) + tree.weight * nbytes * route.share
    return [Send(a, b, amount, route=path) for (a, b, path), amount in sorted(sends.items())]


def _ring_chains(graph: CostGraph) -> list[Tree]:
    """NCCL's rings as arborescences: on every ring, the chain from each worker around it, carrying
    1/n of the ring's share (its shard); every hop then carries (n-1)/n of the ring's share."""
    schedule = routed(graph, nccl_rings(graph, channels=True))
    n, trees = graph.n, []
    for ring in schedule.rings:
        for j in range(n):
            hops = [(j + i) % n for i in range(n - 1)]  # hop h leads from order[h] to order[h + 1]
            edges = tuple((ring.order[(h + 1) % n], ring.order[h]) for h in hops)
            routes = tuple(tuple(Route(r.share, r.path[::-1]) for r in ring.routes[h]) for h in hops)
            trees.append(Tree(ring.weight / n, ring.order[j], edges, routes))
    return trees


def _arborescences(graph: CostGraph) -> tuple[list[Tree], dict]:
    """``lp``: the optimal mix of routed arborescences (module docstring), expanded over the
    symmetry, and the notes: optimum, certificate, synthesis."""
    topology, n = graph.topology, graph.n
    routes = RouteGraph(topology, graph.workers)
    symmetry = find_symmetry(topology, graph.workers)
    position = {d: i for i, d in enumerate(routes.worker_index)}
    workers = [[position[int(d)] for d in shift[routes.worker_index]] for shift in symmetry.shifts]
    roots = sorted({min(w[v] for w in workers) for v in range(n)})  # one per orbit of the shifts
    orbit = {v: len({w[v] for w in workers}) for v in roots}

    def cheapest(prices: np.ndarray) -> list[Column]:
        paths = routes.shortest(prices, symmetric=False)
        columns = []
        for group, root in enumerate(roots):
            parent = min_arborescence(paths.cost, root)
            arcs = tuple(sorted((int(parent[b]), b, paths.path(int(parent[b]), b)) for b in range(n) if b != root))
            load = sum(routes.load(path, False) for _, _, path in arcs) * orbit[root] / n
            columns.append(Column((root, arcs), load, group))
        return columns

    packing = pack(cheapest, routes.resources, classes=symmetry.classes, groups=len(roots))
    trees = _expanded_arborescences(graph, routes, symmetry, workers, packing.columns)
    notes = {
        "optimum": packing.value,
        "optimum_fraction": str(Fraction(packing.value).limit_denominator(1000)),
        "normalized_time": packing.value,
        "certificate": {
            "lower_bound": packing.lower_bound,
            "converged": packing.converged,
            "algbw_gbps_at_most": routes.unit_gbps / packing.lower_bound,
        },
        "synthesis": {
            "rounds": packing.rounds,
            "columns": len(packing.columns),
            "orbits": symmetry.orbits,
            "server_shifts": len(symmetry.shifts),
            "roots_priced": len(roots),
        },
        "arborescences": len(trees),
    }
    return trees, notes


def _expanded_arborescences(
    graph: CostGraph, routes: RouteGraph, symmetry: Symmetry, workers: list[list[int]], columns
) -> list[Tree]:
    """The mix over every server shift: a root's arborescence of weight w carries w / n of the
    tensor, its images under the shifts that keep the root in place as many copies, each with its
    share over as many; every arc split over the twins on its path. A Tree's edges point from child
    to parent, its routes too."""
    n, trees = graph.n, []
    for weight, column in columns:
        root, arcs = column.key
        copies = sum(1 for w in workers if w[root] == root)
        expanded = [symmetry.expand(path) for _, _, path in arcs]
        for k, shifted in enumerate(workers):
            edges = tuple((graph.workers[shifted[b]], graph.workers[shifted[a]]) for a, b, _ in arcs)
            hops = []
            for images in expanded:
                split: dict[tuple[int, ...], float] = {}
                for image_shift, share, image in images:
                    if image_shift == k:
                        split[image] = split.get(image, 0.0) + share
                hops.append(tuple(Route(share, routes.devices(path[::-1])) for path, share in split.items()))
            trees.append(Tree(weight / n / copies, graph.workers[shifted[root]], edges, tuple(hops)))
    return trees


def min_arborescence(cost: np.ndarray, root: int) -> np.ndarray:
    """Chu-Liu/Edmonds on the complete digraph with arc costs ``cost[a, b]`` (a -> b): every
    node's parent in a minimum spanning arborescence rooted at ``root`` (-1 there). Each node takes
    its cheapest incoming arc; a cycle among those is contracted into one node (an arc into it
    costs what it saves over the cycle's own arc into its head) and the smaller problem solved."""
    n = cost.shape[0]
    c = np.array(cost, dtype=float)
    np.fill_diagonal(c, np.inf)
    c[:, root] = np.inf
    parent = c.argmin(axis=0)
    parent[root] = -1
    cycle = _cycle(parent)
    if not cycle:
        return parent
    inside = np.zeros(n, dtype=bool)
    inside[cycle] = True
    others = np.flatnonzero(~inside)
    entering = c[np.ix_(others, cycle)] - c[parent[cycle], cycle]  # [others, cycle]
    leaving = c[np.ix_(cycle, others)]  # [cycle, others]
    m = len(others)
    smaller = np.full((m + 1, m + 1), np.inf)
    smaller[:m, :m] = c[np.ix_(others, others)]
    smaller[:m, m] = entering.min(axis=1)
    smaller[m, :m] = leaving.min(axis=0)
    inner = min_arborescence(smaller, int(np.flatnonzero(others == root)[0]))
    result = parent.copy()
    for i, node in enumerate(others):
        if inner[i] == m:
            result[node] = cycle[int(leaving[:, i].argmin())]
        elif inner[i] >= 0:
            result[node] = others[inner[i]]
    source = int(inner[m])
    result[cycle[int(entering[source].argmin())]] = others[source]
    return result


def _cycle(parent: np.ndarray) -> list[int]:
    """A cycle of the functional graph node -> parent[node] (the root's parent is -1), or []."""
    state = np.zeros(parent.size, dtype=np.int8)  # 0 unseen, 1 on the current walk, 2 done
    for start in range(parent.size):
        walk, node = [], start
        while node >= 0 and state[node] == 0:
            state[node] = 1
            walk.append(node)
            node = int(parent[node])
        if node >= 0 and state[node] == 1:
            return walk[walk.index(node) :]
        state[walk] = 2
    return []
