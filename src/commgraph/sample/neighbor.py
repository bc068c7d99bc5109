"""Node-wise uniform sampling (GraphSAGE)."""

from __future__ import annotations

import numpy as np

from commgraph.sample.base import SampledBatch, SamplingGraph, Scratch, check_seeds, draw_seed, relabel
from commgraph.sample.options import check_fanouts, parse_fanouts


class NeighborSampler:
    r"""GraphSAGE's uniform neighbour sampling, from `"Inductive Representation Learning on Large
    Graphs" <https://arxiv.org/abs/1706.02216>`_ (Hamilton et al., 2017).

    Hop by hop from the seeds, every destination :math:`v` keeps a uniformly random subset of
    :math:`\min(k, d_v)` of its :math:`d_v` in-neighbours, without replacement, so each in-edge is
    kept with probability

    .. math::
        \Pr[u \in \mathcal{S}(v)] = \frac{\min(k, d_v)}{d_v},

    and the aggregation ``mean`` over :math:`\mathcal{S}(v)` is an unbiased estimate of the mean
    over :math:`\mathcal{N}(v)`. The next hop's destinations are this hop's table. A hop's draws
    for a node depend only on the hop's key and the node (:mod:`commgraph.sample.keyed`), so the
    graph may sample remote nodes at their owners (:class:`~commgraph.sample.partitioned.PartitionedGraph`)
    and return the same blocks.

    Args:
        graph: the structure sampled on (:class:`SamplingGraph`, or a
            :class:`~commgraph.sample.partitioned.PartitionedGraph`).
        fanouts: neighbours per destination at hop 1 (the seeds', read by the last GNN layer), hop
            2, ...; ``-1`` keeps every neighbour. A list or a string such as ``"10,5"``.

    Shapes:
        seeds ``[B]`` distinct node ids -> one block per entry of ``fanouts``.
    """

    name = "neighbor"

    def __init__(self, graph: SamplingGraph, fanouts):
        self.graph = graph
        self.fanouts = list(parse_fanouts(fanouts) if isinstance(fanouts, str) else check_fanouts(fanouts))
        self._scratch = Scratch()

    def sample(self, seeds: np.ndarray, rng: np.random.Generator) -> SampledBatch:
        seeds = check_seeds(self.graph, seeds)
        layers, dst = [], seeds
        for fanout in self.fanouts:
            counts, sources = self.graph.sample_rows(dst, fanout, draw_seed(rng))
            layer = relabel(dst, sources, counts, self._scratch, self.graph.num_nodes)
            layers.append(layer)
            dst = layer.src
        layers.reverse()
        return SampledBatch(seeds, layers, self.graph.is_remote(layers[0].src))
