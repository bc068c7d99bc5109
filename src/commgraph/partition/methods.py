"""Partitioning methods: ``random``, ``chunk`` and ``metis`` (the baselines G3 compares against) and
``g3``. Each maps every node to a part id, deterministically for a seed."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from commgraph.errors import PartitionError
from commgraph.graph import Graph
from commgraph.partition.g3 import g3_partition
from commgraph.partition.mapped import release_pages
from commgraph.partition.metis import metis_edge_cut, metis_multi_constraint, undirected_adjacency

TYPE_IMBALANCE = 1.03  # each node type's balance, METIS's default for one constraint

METHODS = ("g3", "metis", "chunk", "random")


def check_parts(parts: int, num_nodes: int | None = None) -> None:
    """Refuse a part count no partition can have, before any work is spent on it (the count alone
    while the graph is not loaded yet: ``num_nodes`` None)."""
    if not isinstance(parts, (int, np.integer)) or parts < 1:
        raise PartitionError(f"the number of parts must be an integer >= 1, got {parts!r}")
    if num_nodes is not None and parts > num_nodes:
        raise PartitionError(f"cannot split {num_nodes} nodes into {parts} non-empty parts")


def partition_graph(
    graph: Graph,
    parts: int,
    method: str = "g3",
    seed: int = 0,
    *,
    log: Callable[[str], None] | None = None,
    node_type: np.ndarray | None = None,
) -> tuple[np.ndarray, dict]:
    """Assign every node of ``graph`` to one of ``parts`` parts, deterministically for a seed.

    Methods: ``random`` (a random permutation dealt round-robin: exactly balanced sizes), ``chunk``
    (consecutive id ranges), ``metis`` (METIS k-way edge cut, Karypis and Kumar, `"A Fast and High
    Quality Multilevel Scheme for Partitioning Irregular Graphs"
    <https://doi.org/10.1137/S1064827595287997>`_, SIAM J. Sci. Comput. 1998) and ``g3`` (G3's
    two stages: METIS balancing nodes and degrees, then swaps that balance the parts' remote nodes;
    :func:`~commgraph.partition.g3_partition`).

    Args:
        graph: the graph.
        parts: number of parts, ``1..N``.
        method: one of :data:`METHODS`.
        seed: the random seed.
        log: hears g3's progress through its stages, a line each.
        node_type: every node's type (``[N]``, ``0..T-1``) for a heterogeneous graph's homogeneous
            view: ``metis`` then balances each type across the parts (one METIS balance constraint
            per type, each within :data:`TYPE_IMBALANCE`), the other methods refuse it.

    Returns:
        tuple[np.ndarray, dict]: every node's part (int64, ``[N]``) and what the method reports
        (g3: each stage's seconds, swaps and remote balance; the others: nothing).

    Raises:
        PartitionError: an unknown method, a part count no partition can have, or node types
            given to a method other than ``metis``.
    """
    if method not in METHODS:
        raise PartitionError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    check_parts(parts, graph.num_nodes)
    if node_type is not None and method != "metis":
        raise PartitionError(f"balancing each node type is built for method 'metis', not {method!r}: use metis")
    if method == "random":
        # a random permutation dealt round-robin: random membership, exactly balanced sizes
        order = np.random.default_rng(seed).permutation(graph.num_nodes)
        assignment = np.empty(graph.num_nodes, dtype=np.int64)
        assignment[order] = np.arange(graph.num_nodes) % parts
        return assignment, {}
    if method == "chunk":
        return (np.arange(graph.num_nodes, dtype=np.int64) * parts) // graph.num_nodes, {}
    if method == "metis":
        if parts == 1:
            return np.zeros(graph.num_nodes, dtype=np.int64), {}
        adjacency = undirected_adjacency(graph)
        release_pages(graph)  # a graph held as file maps leaves METIS its memory
        if node_type is None:
            return metis_edge_cut(adjacency, parts, seed), {}
        weights = np.zeros((graph.num_nodes, int(node_type.max()) + 1), dtype=np.int32)
        weights[np.arange(graph.num_nodes), node_type] = 1
        return metis_multi_constraint(adjacency, weights, parts, seed, TYPE_IMBALANCE, volume=False), {}
    return g3_partition(graph, parts, seed, log=log)
