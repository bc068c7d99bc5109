r"""Layer-wise importance sampling: FastGCN and LADIES.

Both sample a fixed number :math:`s` of nodes per layer (not per destination) from an importance
distribution over GCN's normalised adjacency
:math:`\hat A = \tilde D^{-1/2} (A + I) \tilde D^{-1/2}`, :math:`\tilde D = D + I` with
:math:`D` the in-degrees without self loops (a graph's own self loops are replaced by
:math:`I`, as GCN does). A layer's block keeps the edges from the sampled nodes into its
destinations; its table is the destinations (for their own rows) followed by the sampled nodes.
"""

from __future__ import annotations

import numpy as np

from commgraph.errors import SamplingError
from commgraph.sample.base import LayerSample, SampledBatch, SamplingGraph, Scratch, check_seeds, in_edges, relabel


class _LayerWise:
    def __init__(self, graph: SamplingGraph, sizes):
        sizes = [int(s) for s in (sizes.split(",") if isinstance(sizes, str) else sizes)]
        if not sizes or any(s < 1 for s in sizes):
            raise SamplingError(f"layer-wise samplers need one layer size >= 1 per layer; got {sizes}")
        self.graph, self.sizes = graph, sizes
        self._scratch = Scratch()
        self._inv_sqrt = 1.0 / np.sqrt(graph.degree.astype(np.float64) + 1.0)

    def _in_edges(self, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row in ``dst``, source) of the in-edges of ``dst``, self loops left out."""
        rows, sources = in_edges(self.graph, dst)
        keep = sources != dst[rows]
        return rows[keep], sources[keep]

    def _block(
        self,
        dst: np.ndarray,
        rows: np.ndarray,
        sources: np.ndarray,
        chosen: np.ndarray,
        prob: np.ndarray,
        scale: np.ndarray,
    ) -> LayerSample:
        """The block of the edges from ``chosen`` nodes into ``dst``; each edge weighted
        ``A_hat[v, u] * scale[u]``; ``prob[u]`` is the probability each table row was drawn with."""
        picked = np.zeros(self.graph.num_nodes, dtype=bool)
        picked[chosen] = True
        keep = picked[sources]
        rows, sources = rows[keep], sources[keep]
        layer = relabel(dst, sources, np.bincount(rows, minlength=dst.shape[0]), self._scratch, self.graph.num_nodes)
        layer.prob = np.where(picked[layer.src], prob[layer.src], 0.0)
        layer.weight = self._inv_sqrt[sources] * self._inv_sqrt[dst[rows]] * scale[sources]
        return layer

    def sample(self, seeds: np.ndarray, rng: np.random.Generator) -> SampledBatch:
        seeds = check_seeds(self.graph, seeds)
        layers, dst, sync = [], seeds, 0
        for size in self.sizes:
            layer, moved = self._layer(dst, size, rng)
            layers.append(layer)
            sync += moved
            dst = layer.src
        layers.reverse()
        return SampledBatch(seeds, layers, self.graph.is_remote(layers[0].src), sync_bytes=sync)


class FastGCNSampler(_LayerWise):
    r"""FastGCN's layer-wise sampling, from `"FastGCN: Fast Learning with Graph Convolutional
    Networks via Importance Sampling" <https://arxiv.org/abs/1801.10247>`_ (Chen et al., 2018).

    One distribution, computed once before training from the whole graph, is used at every layer:

    .. math::
        q(u) = \frac{\lVert \hat A(:, u) \rVert^2}{\sum_{u'} \lVert \hat A(:, u') \rVert^2},

    and each layer draws :math:`s` distinct nodes from it (as the LADIES authors' FastGCN
    baseline does), weighting edge :math:`u \to v` by :math:`\hat A(v, u) / (s\, q(u))`, the
    Monte-Carlo estimator of :math:`\hat A H`.

    Args:
        graph: the structure sampled on.
        sizes: :math:`s` per layer, hop 1 (the seeds' layer) first; a list or ``"512,512"``.
    """

    name = "fastgcn"

    def __init__(self, graph: SamplingGraph, sizes):
        super().__init__(graph, sizes)
        self.q = self.probabilities()

    def probabilities(self) -> np.ndarray:
        """:math:`q` over every node."""
        src, dst = self.graph.indices, np.repeat(np.arange(self.graph.num_nodes), np.diff(self.graph.indptr))
        off = src != dst
        inv = self._inv_sqrt
        norms = np.bincount(src[off], weights=(inv[src[off]] * inv[dst[off]]) ** 2, minlength=self.graph.num_nodes)
        norms += inv**4  # the self loop's entry 1 / (d + 1)
        return norms / norms.sum()

    def _layer(self, dst: np.ndarray, size: int, rng: np.random.Generator) -> tuple[LayerSample, int]:
        draw = min(size, int(np.count_nonzero(self.q)))
        chosen = rng.choice(self.graph.num_nodes, draw, replace=False, p=self.q)
        rows, sources = self._in_edges(dst)
        return self._block(dst, rows, sources, chosen, self.q, 1.0 / (draw * self.q.clip(min=1e-300))), 0


class LADIESSampler(_LayerWise):
    r"""LADIES, from `"Layer-Dependent Importance Sampling for Training Deep and Large Graph
    Convolutional Networks" <https://arxiv.org/abs/1911.07323>`_ (Zou et al., 2019).

    Each layer's distribution depends on the destinations :math:`\mathcal{D}` it must compute
    (the previous layer's table), so only their neighbours can be drawn:

    .. math::
        p(u) = \frac{\lVert Q \hat A(:, u) \rVert^2}{\lVert Q \hat A \rVert_F^2}
             = \frac{\sum_{v \in \mathcal{D}} \hat A(v, u)^2}
                    {\sum_{u'} \sum_{v \in \mathcal{D}} \hat A(v, u')^2},

    with :math:`Q` selecting the rows of :math:`\mathcal{D}`. A layer draws
    :math:`\min(s, |\{u : p(u) > 0\}|)` distinct nodes from :math:`p` and weights edge
    :math:`u \to v` by :math:`\hat A(v, u) / p(u)`, normalised to sum to 1 over each destination's
    kept edges (the authors' ``row_normalize``).

    In a distributed run :math:`p` needs the rows of destinations owned by other workers: each
    owner receives their ids (8 bytes each) and returns its partial sums for every candidate it
    contributes to (id and value, 12 bytes). ``SampledBatch.sync_bytes`` counts both.

    Args:
        graph: the structure sampled on.
        sizes: :math:`s` per layer, hop 1 (the seeds' layer) first.
    """

    name = "ladies"

    def probabilities(self, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:math:`p` for destinations ``dst``, as a dense vector over every node, with the in-edges
        (row in ``dst``, source) it was computed from."""
        rows, sources = self._in_edges(dst)
        inv = self._inv_sqrt
        p = np.bincount(sources, weights=(inv[sources] * inv[dst[rows]]) ** 2, minlength=self.graph.num_nodes)
        p[dst] += inv[dst] ** 4
        return p / p.sum(), rows, sources

    def _layer(self, dst: np.ndarray, size: int, rng: np.random.Generator) -> tuple[LayerSample, int]:
        p, rows, sources = self.probabilities(dst)
        draw = min(size, int(np.count_nonzero(p)))
        chosen = rng.choice(self.graph.num_nodes, draw, replace=False, p=p)
        layer = self._block(dst, rows, sources, chosen, p, 1.0 / p.clip(min=1e-300))
        totals = np.bincount(layer.edge_dst, weights=layer.weight, minlength=dst.shape[0])
        layer.weight = layer.weight / totals[layer.edge_dst]
        return layer, self._sync_bytes(dst, rows, sources)

    def _sync_bytes(self, dst: np.ndarray, rows: np.ndarray, sources: np.ndarray) -> int:
        graph = self.graph
        if graph.part is None:
            return 0
        asked = graph.owner[dst] != graph.part
        from_owner = graph.owner[dst[rows]].astype(np.int64)
        remote_rows = from_owner != graph.part
        # one (owner, candidate) pair per partial sum an owner returns; diagonal entries included
        pairs = np.concatenate(
            [
                from_owner[remote_rows] * graph.num_nodes + sources[remote_rows],
                graph.owner[dst[asked]].astype(np.int64) * graph.num_nodes + dst[asked],
            ]
        )
        return 8 * int(asked.sum()) + 12 * int(np.unique(pairs).shape[0])
