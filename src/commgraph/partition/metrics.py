"""Partition quality, as G3 counts it (thesis ch. 4, Table 4.1): per part |V_i| (nodes), |E(V_i)|
(edges whose destination it owns), |V_i^remote| (out-of-part nodes with an edge into the part:
what it must receive every layer), and totals: edge cut, total remote (communication volume) and
the max/mean imbalance of each."""

from __future__ import annotations

import numpy as np

from commgraph.errors import PartitionError
from commgraph.graph import Graph
from commgraph.graph.build import unique_sorted


def check_assignment(graph: Graph, assignment: np.ndarray, parts: int) -> np.ndarray:
    assignment = np.asarray(assignment)
    if assignment.shape != (graph.num_nodes,):
        raise PartitionError(f"assignment has shape {assignment.shape}, expected ({graph.num_nodes},)")
    if assignment.size and (assignment.min() < 0 or assignment.max() >= parts):
        raise PartitionError(f"assignment holds part ids outside 0..{parts - 1}")
    return assignment.astype(np.int64, copy=False)


def remote_pairs(graph: Graph, assignment: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct (part, node) pairs where ``node`` lies outside ``part`` and has an edge into
    it: the halo of every part at once."""
    src, dst = graph.edge_list()
    part_of_dst = assignment[dst]
    crossing = assignment[src] != part_of_dst
    keys = unique_sorted(part_of_dst[crossing] * np.int64(graph.num_nodes) + src[crossing])
    return np.divmod(keys, np.int64(graph.num_nodes))


def partition_metrics(graph: Graph, assignment: np.ndarray, parts: int) -> dict:
    """The figures ``commgraph partition make`` reports, as JSON-ready values.

    Args:
        graph: the graph.
        assignment: every node's part, ``[N]``.
        parts: number of parts.

    Returns:
        dict: ``parts`` (per part: ``num_nodes``, ``num_edges`` (in-edges of its nodes) and
        ``num_remote`` (its halo: nodes of other parts its nodes have in-edges from)),
        ``total_remote``, ``edge_cut`` (edges between parts), ``node_imbalance``,
        ``edge_imbalance`` and ``remote_imbalance`` (largest over mean) and ``remote_min_max``.
    """
    assignment = check_assignment(graph, assignment, parts)
    nodes = np.bincount(assignment, minlength=parts)
    edges = np.bincount(assignment, weights=graph.in_degrees(), minlength=parts).astype(np.int64)
    halo_part, _ = remote_pairs(graph, assignment)
    remote = np.bincount(halo_part, minlength=parts)
    src, dst = graph.edge_list()
    edge_cut = int(np.count_nonzero(assignment[src] != assignment[dst]))
    return {
        "parts": [{"num_nodes": int(n), "num_edges": int(e), "num_remote": int(r)}
                  for n, e, r in zip(nodes, edges, remote)],
        "total_remote": int(remote.sum()),
        "edge_cut": edge_cut,
        "node_imbalance": _imbalance(nodes),
        "edge_imbalance": _imbalance(edges),
        "remote_imbalance": _imbalance(remote),
        "remote_min_max": float(remote.min() / remote.max()) if remote.max() > 0 else 1.0,
    }


def _imbalance(values: np.ndarray) -> float:
    """max / mean: 1.0 is perfect balance, 1.05 means the largest part is 5% above average."""
    mean = values.mean()
    return float(values.max() / mean) if mean > 0 else 1.0
