r"""PyG's neighbour sampling for :class:`~commgraph.pyg.NeighborLoader`: :func:`sample_hops`.

Hop :math:`h` draws, for each node the previous hop added (the seeds at hop 1),
:math:`\min(k_h, d_v)` of its :math:`d_v` in-neighbours uniformly without replacement, keyed by
node (:mod:`commgraph.sample.keyed`), from the whole graph's CSR or, on a
:class:`~commgraph.sample.partitioned.PartitionedGraph`, from the machine's parts and at other
machines' owners: the same draws either way. :func:`data_positions` maps a set's CSR edges back to
a ``Data``'s ``edge_index``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from commgraph.sample.base import SamplingGraph, Scratch, draw_seed, relabel
from commgraph.sample.keyed import keyed_slots
from commgraph.sample.partitioned import PartitionedGraph

KEY_SORT_NODES = 3_037_000_499  # the most nodes n with n * n < 2**63


@dataclass
class Hops:
    """A batch's draws (:func:`sample_hops`).

    Shapes:
        - **nodes:** ``[n]`` global ids: the seeds, then each hop's new nodes in order of first draw
        - **edges:** ``[2, E]`` positions in ``nodes``, sources then targets, hop after hop
        - **slots:** ``[E]`` each edge's position in the whole graph's CSR (None: drawn from parts)
        - **num_nodes:** the seeds, then the nodes each hop added (PyG's ``num_sampled_nodes``);
          **num_edges:** the edges of each hop (PyG's ``num_sampled_edges``)
    """

    nodes: np.ndarray
    edges: np.ndarray
    slots: np.ndarray | None
    num_nodes: list[int]
    num_edges: list[int]


def with_sources(graph: SamplingGraph, draw_slots):
    """``draw(rows, fanout, rng)`` for :func:`sample_hops` from ``draw_slots(rows, fanout, rng)``,
    which gives per-row counts and the drawn in-edges' positions in ``graph``'s CSR."""

    def draw(rows, fanout, rng):
        counts, slots = draw_slots(rows, fanout, rng)
        return counts, graph.indices[slots].astype(np.int64), slots

    return draw


def uniform_draw(graph: SamplingGraph | PartitionedGraph):
    """``draw(rows, fanout, rng)`` for :func:`sample_hops`: uniform draws without replacement,
    keyed by node (:mod:`commgraph.sample.keyed`), so both structures draw the same edges: from
    the whole CSR, or on a :class:`~commgraph.sample.partitioned.PartitionedGraph` from this
    machine's parts and, for other machines' rows, at their owners (a collective; no CSR slots)."""
    if isinstance(graph, PartitionedGraph):
        return lambda rows, fanout, rng: (*graph.sample_rows(rows, fanout, draw_seed(rng)), None)
    return with_sources(graph, lambda rows, fanout, rng: keyed_slots(graph.indptr, rows, rows, fanout, draw_seed(rng)))


def sample_hops(
    graph: SamplingGraph | PartitionedGraph,
    seeds: np.ndarray,
    num_neighbors: list[int],
    rng: np.random.Generator,
    scratch: Scratch,
    draw=None,
) -> Hops:
    """PyG's neighbour sampling from ``seeds`` (distinct ids): hop ``h`` draws ``num_neighbors[h]``
    in-neighbours (all with -1) of each node the previous hop added, by ``draw(rows, fanout, rng)``
    (per-row counts, the sources row after row, and their CSR positions or None; None:
    :func:`uniform_draw`). Every hop draws, even with no rows, so a draw that is a collective
    keeps the ranks in step."""
    draw = draw or uniform_draw(graph)
    nodes, sources, targets, slots, added = seeds, [], [], [], [int(seeds.shape[0])]
    for fanout in num_neighbors:
        start = nodes.shape[0] - added[-1]  # the previous hop's nodes: the last ones added
        frontier = nodes[start:]
        counts, drawn, positions = draw(frontier, fanout, rng)
        per_node = np.zeros(nodes.shape[0], dtype=np.int64)
        per_node[start:] = counts
        hop = relabel(nodes, drawn, per_node, scratch, graph.num_nodes)
        sources.append(hop.edge_src)
        targets.append(hop.edge_dst)
        slots.append(positions)
        added.append(int(hop.src.shape[0] - nodes.shape[0]))
        nodes = hop.src
    edges = np.stack([np.concatenate(sources), np.concatenate(targets)])
    whole = None if any(at is None for at in slots) else np.concatenate(slots)
    return Hops(nodes, edges, whole, added, [int(e.shape[0]) for e in sources])


def data_positions(edge_index: torch.Tensor) -> np.ndarray:
    """For each edge of the CSR a set made from a ``Data`` holds (its distinct edges sorted by
    target, then source), the edge's position in the ``Data``'s ``edge_index`` (the first of
    repeated edges).

    Shapes:
        edge_index ``[2, E]`` -> ``[E']`` (its distinct edges)
    """
    edges = edge_index.detach().cpu().numpy().astype(np.int64, copy=False)
    n = int(edges.max(initial=-1)) + 1
    # stable sorts, so a repeated edge's first position comes first; one key where n * n fits int64
    # (20 times faster than lexsort for 4M edges)
    if n <= KEY_SORT_NODES:
        order = np.argsort(edges[1] * n + edges[0], kind="stable")
    else:
        order = np.lexsort((edges[0], edges[1]))
    src, dst = edges[0][order], edges[1][order]
    fresh = np.ones(order.shape[0], dtype=bool)
    fresh[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    return order[fresh]
