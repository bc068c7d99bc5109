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
They are planned and priced only: :mod:`commgraph.runtime.allreduce` executes all-reduce schedules.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from commgraph.errors import PlanError
from commgraph.plan.allreduce import CostGraph
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
        sends = _ring_sends(graph, nbytes)
    else:
        arcs, notes = _arborescences(graph)
        sends = {(a, b, path): share * nbytes for (a, b, path), share in arcs.items()}
        plan.notes.update(notes)
    if collective == "reducescatter":  # the same trees backwards: shards reduced towards their owners
        sends = {(b, a, path[::-1]): amount for (a, b, path), amount in sends.items()}
    plan.stages.append([Send(a, b, amount, route=path) for (a, b, path), amount in sorted(sends.items())])
    algbw = nbytes / steady_seconds(plan.stages[0], topology) / 1e9
    bound = gather_bound(topology, graph.workers)
    plan.notes["bandwidth"] = {"algbw_gbps": algbw, "busbw_gbps": algbw * (graph.n - 1) / graph.n,
                               "bound": bound.to_json(), "of_bound": algbw / bound.algbw_gbps}
    return plan


def _ring_sends(graph: CostGraph, nbytes: float) -> dict[tuple[str, str, tuple[str, ...]], float]:
    """NCCL's rings, routed as the all-reduce's: every hop (n-1)/n of its ring's share."""
    schedule = routed(graph, nccl_rings(graph, channels=True))
    n, sends = graph.n, {}
    for ring in schedule.rings:
        for i, (a, b) in enumerate(zip(ring.order, ring.order[1:] + ring.order[:1])):
            for route in ring.routes[i]:
                key = (a, b, route.path)
                sends[key] = sends.get(key, 0.0) + (n - 1) / n * ring.weight * nbytes * route.share
    return sends


def _arborescences(graph: CostGraph) -> tuple[dict[tuple[str, str, tuple[str, ...]], float], dict]:
    """``lp``: the share of the tensor on every (sender, receiver, route) of the optimal mix of
    routed arborescences (module docstring), and the notes: optimum, certificate, synthesis."""
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
    shares = _expanded_arcs(routes, symmetry, workers, packing.columns, n)
    arcs = {(graph.workers[a], graph.workers[b], routes.devices(path)): share for (a, b, path), share in shares.items()}
    notes = {"optimum": packing.value, "optimum_fraction": str(Fraction(packing.value).limit_denominator(1000)),
             "normalized_time": packing.value,
             "certificate": {"lower_bound": packing.lower_bound, "converged": packing.converged,
                             "algbw_gbps_at_most": routes.unit_gbps / packing.lower_bound},
             "synthesis": {"rounds": packing.rounds, "columns": len(packing.columns), "orbits": symmetry.orbits,
                           "server_shifts": len(symmetry.shifts), "roots_priced": len(roots)},
             "arborescences": len(packing.columns) * len(symmetry.shifts)}
    return arcs, notes


def _expanded_arcs(routes: RouteGraph, symmetry: Symmetry, workers: list[list[int]], columns, n: int) -> dict:
    """Every arc's share of the tensor over the mix expanded by the symmetry: a root's
    arborescence of weight w carries w / n of the tensor; its images under the shifts that keep the
    root in place are as many copies of it, each carrying its share over as many."""
    shares: dict[tuple[int, int, tuple[int, ...]], float] = {}
    for weight, column in columns:
        root = column.key[0]
        copies = sum(1 for w in workers if w[root] == root)
        for a, b, path in column.key[1]:
            for k, share, image in symmetry.expand(path):
                key = (workers[k][a], workers[k][b], image)
                shares[key] = shares.get(key, 0.0) + weight / n / copies * share
    return shares


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
            return walk[walk.index(node):]
        state[walk] = 2
    return []
