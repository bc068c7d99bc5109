"""Node-wise uniform sampling (GraphSAGE)."""

from __future__ import annotations

import numpy as np
from numba import njit

from commgraph.sample.base import SampledBatch, SamplingGraph, Scratch, check_seeds, draw_seed, relabel
from commgraph.sample.options import parse_fanouts


class NeighborSampler:
    r"""GraphSAGE's uniform neighbour sampling, from `"Inductive Representation Learning on Large
    Graphs" <https://arxiv.org/abs/1706.02216>`_ (Hamilton et al., 2017).

    Hop by hop from the seeds, every destination :math:`v` keeps a uniformly random subset of
    :math:`\min(k, d_v)` of its :math:`d_v` in-neighbours, without replacement, so each in-edge is
    kept with probability

    .. math::
        \Pr[u \in \mathcal{S}(v)] = \frac{\min(k, d_v)}{d_v},

    and the aggregation ``mean`` over :math:`\mathcal{S}(v)` is an unbiased estimate of the mean
    over :math:`\mathcal{N}(v)`. The next hop's destinations are this hop's table.

    Args:
        graph: the structure sampled on (:class:`SamplingGraph`).
        fanouts: neighbours per destination at hop 1 (the seeds', read by the last GNN layer), hop
            2, ...; ``-1`` keeps every neighbour. A list or a string such as ``"10,5"``.

    Shapes:
        seeds ``[B]`` distinct node ids -> one block per entry of ``fanouts``.
    """

    name = "neighbor"

    def __init__(self, graph: SamplingGraph, fanouts):
        self.graph = graph
        self.fanouts = parse_fanouts(fanouts)
        self._scratch = Scratch()

    def sample(self, seeds: np.ndarray, rng: np.random.Generator) -> SampledBatch:
        seeds = check_seeds(self.graph, seeds)
        layers, dst = [], seeds
        for fanout in self.fanouts:
            counts, sources = sample_rows(self.graph.indptr, self.graph.indices, dst, fanout, draw_seed(rng))
            layer = relabel(dst, sources, counts, self._scratch, self.graph.num_nodes)
            layers.append(layer)
            dst = layer.src
        layers.reverse()
        return SampledBatch(seeds, layers, self.graph.is_remote(layers[0].src))


def sample_rows(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray, fanout: int,
                seed: int) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``rows``: ``min(fanout, degree)`` in-neighbours drawn uniformly without
    replacement (all of them with ``fanout`` -1). Returns per-row counts and the sources, row after
    row."""
    return _sample_rows(indptr, indices, rows, fanout, seed)


@njit(cache=True)
def row_counts(indptr, rows, fanout):
    """How many in-neighbours each of ``rows`` keeps (``min(fanout, degree)``, all with -1), and
    the largest degree among them (at least 1)."""
    counts = np.empty(rows.shape[0], np.int64)
    widest = 1
    for i in range(rows.shape[0]):
        degree = indptr[rows[i] + 1] - indptr[rows[i]]
        counts[i] = degree if (fanout < 0 or degree <= fanout) else fanout
        widest = max(widest, degree)
    return counts, widest


@njit(cache=True)
def _sample_rows(indptr, indices, rows, fanout, seed):
    np.random.seed(seed)
    n = rows.shape[0]
    counts, widest = row_counts(indptr, rows, fanout)
    out = np.empty(counts.sum(), np.int64)
    # a partial Fisher-Yates shuffle of positions 0..degree-1, undone after each row: O(fanout)
    perm = np.arange(widest)
    swaps = np.empty(max(fanout, 0), np.int64)
    at = 0
    for i in range(n):
        start = indptr[rows[i]]
        degree = indptr[rows[i] + 1] - start
        take = counts[i]
        if take == degree:
            for j in range(degree):
                out[at + j] = indices[start + j]
        else:
            for j in range(take):
                t = np.random.randint(j, degree)
                swaps[j] = t
                perm[j], perm[t] = perm[t], perm[j]
                out[at + j] = indices[start + perm[j]]
            for j in range(take - 1, -1, -1):
                t = swaps[j]
                perm[j], perm[t] = perm[t], perm[j]
        at += take
    return counts, out
