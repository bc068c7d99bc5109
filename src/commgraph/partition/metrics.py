"""Partition quality, as G3 counts it (thesis ch. 4, Table 4.1): per part |V_i| (nodes), |E(V_i)|
(edges whose destination it owns), |V_i^remote| (out-of-part nodes with an edge into the part:
what it must receive every layer), and totals: edge cut, total remote (communication volume) and
the max/mean imbalance of each."""

from __future__ import annotations

import numpy as np
from numba import njit

from commgraph.errors import PartitionError
from commgraph.graph import Graph


def check_assignment(graph: Graph, assignment: np.ndarray, parts: int) -> np.ndarray:
    assignment = np.asarray(assignment)
    if assignment.shape != (graph.num_nodes,):
        raise PartitionError(f"assignment has shape {assignment.shape}, expected ({graph.num_nodes},)")
    if assignment.size and (assignment.min() < 0 or assignment.max() >= parts):
        raise PartitionError(f"assignment holds part ids outside 0..{parts - 1}")
    return assignment.astype(np.int64, copy=False)


def remote_pairs(graph: Graph, assignment: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct (part, node) pairs where ``node`` lies outside ``part`` and has an edge into
    it: the halo of every part at once. Compiled over the CSR, so nothing edge-sized is built: one
    node-indexed mark array and the pairs themselves."""
    assignment = np.asarray(assignment, dtype=np.int64)
    parts = int(assignment.max()) + 1 if assignment.size else 0
    rows = np.argsort(assignment, kind="stable")
    starts = np.searchsorted(assignment[rows], np.arange(parts + 1))
    return _remote_pairs(graph.indptr, graph.indices, assignment, rows, starts)


@njit(cache=True)
def _remote_pairs(indptr, indices, assignment, rows, starts):  # pragma: no cover - compiled
    n = assignment.shape[0]
    seen = np.zeros(n, np.bool_)
    parts_out, nodes_out = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for k in range(starts.shape[0] - 1):
        found = []
        for i in range(starts[k], starts[k + 1]):
            v = rows[i]
            for e in range(indptr[v], indptr[v + 1]):
                u = indices[e]
                if assignment[u] != k and not seen[u]:
                    seen[u] = True
                    found.append(u)
        halo = np.sort(np.array(found, np.int64)) if len(found) else np.empty(0, np.int64)
        for u in halo:
            seen[u] = False
        parts_out.append(np.full(halo.shape[0], k, np.int64))
        nodes_out.append(halo)
    total = 0
    for a in nodes_out:
        total += a.shape[0]
    part, node = np.empty(total, np.int64), np.empty(total, np.int64)
    at = 0
    for j in range(len(nodes_out)):
        m = nodes_out[j].shape[0]
        part[at : at + m] = parts_out[j]
        node[at : at + m] = nodes_out[j]
        at += m
    return part, node


@njit(cache=True)
def _edge_cut(indptr, indices, assignment):  # pragma: no cover - compiled
    cut = 0
    for v in range(indptr.shape[0] - 1):
        p = assignment[v]
        for e in range(indptr[v], indptr[v + 1]):
            if assignment[indices[e]] != p:
                cut += 1
    return cut


def partition_metrics(graph: Graph, assignment: np.ndarray, parts: int, node_type: np.ndarray | None = None) -> dict:
    """The figures ``commgraph partition make`` reports, as JSON-ready values.

    Args:
        graph: the graph.
        assignment: every node's part, ``[N]``.
        parts: number of parts.
        node_type: every node's type (``[N]``, ``0..T-1``) of a heterogeneous graph's homogeneous
            view: each part then also reports ``type_nodes`` and ``type_remote``, its nodes and its
            halo nodes of each type.

    Returns:
        dict: ``parts`` (per part: ``num_nodes``, ``num_edges`` (in-edges of its nodes) and
        ``num_remote`` (its halo: nodes of other parts its nodes have in-edges from)),
        ``total_remote``, ``edge_cut`` (edges between parts), ``node_imbalance``,
        ``edge_imbalance`` and ``remote_imbalance`` (largest over mean) and ``remote_min_max``.
    """
    assignment = check_assignment(graph, assignment, parts)
    nodes = np.bincount(assignment, minlength=parts)
    edges = np.bincount(assignment, weights=graph.in_degrees(), minlength=parts).astype(np.int64)
    halo_part, halo_node = remote_pairs(graph, assignment)
    remote = np.bincount(halo_part, minlength=parts)
    edge_cut = int(_edge_cut(graph.indptr, graph.indices, assignment))
    per_part = [
        {"num_nodes": int(n), "num_edges": int(e), "num_remote": int(r)} for n, e, r in zip(nodes, edges, remote)
    ]
    if node_type is not None:
        types = int(node_type.max()) + 1 if node_type.size else 0
        owned = np.bincount(assignment * types + node_type, minlength=parts * types).reshape(parts, types)
        halo = np.bincount(halo_part * types + node_type[halo_node], minlength=parts * types).reshape(parts, types)
        for k, entry in enumerate(per_part):
            entry["type_nodes"], entry["type_remote"] = owned[k].tolist(), halo[k].tolist()
    return {
        "parts": per_part,
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
