"""Broadcast planner: ``arborescence``, packing spanning arborescences rooted at the source.

The all-reduce LP of Wang, Li, Liberty and Smola (SysML'18; :mod:`commgraph.plan.allreduce`) with
directed trees: a convex combination of arborescences out of the root, minimising the busiest link
direction, solved exactly by the same column generation (the pricing problem is a minimum spanning
arborescence, Edmonds' algorithm via networkx). Data flows one way only, so each direction of a link
is its own resource.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from commgraph.errors import PlanError
from commgraph.plan.allreduce import CostGraph
from commgraph.plan.model import CommPlan, Send
from commgraph.plan.packing import Column, pack
from commgraph.topology import Topology

PLANNERS = ("arborescence",)


def plan_broadcast(topology: Topology, root: str, nbytes: float) -> CommPlan:
    r"""Broadcast from ``root`` by packing arborescences rooted there (pipelined, one stage): the
    LP of the module's description,

    .. math::
        \min_{\lambda \geq 0,\ \sum_T \lambda_T = 1} \; \max_{\ell}
        \sum_{T \ni \ell} \lambda_T \, c_\ell,

    over arborescences :math:`T` out of the root (an arc is a direct link, or a route where the
    workers have too few direct links), :math:`c_\ell` the time per byte of link direction
    :math:`\ell` relative to the other links' (inverse bandwidth; ``1 / count`` on NVLink); a
    fraction :math:`\lambda_T` of the bytes follows tree :math:`T`. On
    a GPU graph with direct links the optimum's reciprocal is the number of edge-disjoint
    arborescences Edmonds' theorem promises (6 per root on a DGX-1: each GPU has 6 NVLinks).

    Args:
        topology: the hardware; its worker devices receive.
        root: the worker device that holds the data.
        nbytes: the bytes broadcast.

    Returns:
        CommPlan: ``kind="broadcast"``, one stage of sends of opaque bytes.

    Raises:
        PlanError: ``nbytes`` not positive, or a ``root`` that is not a worker device.
    """
    import networkx as nx  # here, not at the top: importing commgraph.plan stays quick

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

    def cheapest(prices: np.ndarray) -> Column:
        weights = load_per_arc @ prices
        digraph = nx.DiGraph()
        digraph.add_nodes_from(range(graph.n))
        for i, (a, b, _) in enumerate(arcs):
            if b != r and (not digraph.has_edge(a, b) or digraph[a][b]["weight"] > weights[i]):
                digraph.add_edge(a, b, weight=float(weights[i]), arc=i)
        tree = nx.minimum_spanning_arborescence(digraph, preserve_attrs=True)
        chosen = tuple(sorted(data["arc"] for _, _, data in tree.edges(data=True)))
        return Column(chosen, load_per_arc[list(chosen)].sum(axis=0))

    packing = pack(cheapest, len(resources))
    value, arborescences = packing.value, [(w, c.key) for w, c in packing.columns]
    sends: dict[int, float] = {}
    for weight, chosen in arborescences:
        for i in chosen:
            sends[i] = sends.get(i, 0.0) + weight * nbytes
    plan = CommPlan("broadcast", "arborescence", topology.name)
    plan.stages.append(
        [
            Send(graph.workers[arcs[i][0]], graph.workers[arcs[i][1]], amount, route=arcs[i][2])
            for i, amount in sorted(sends.items())
        ]
    )
    plan.notes = {
        "root": root,
        "optimum": value,
        "optimum_fraction": str(Fraction(value).limit_denominator(1000)),
        "arborescences_rate": 1.0 / value,
        "normalized_time": value,
        "arborescences": [
            {"weight": w, "arcs": [[graph.workers[arcs[i][0]], graph.workers[arcs[i][1]]] for i in c]}
            for w, c in arborescences
        ],
    }
    return plan
