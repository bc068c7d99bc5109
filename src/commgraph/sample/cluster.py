"""ClusterGCN's subgraph batches."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from commgraph.errors import SamplingError
from commgraph.graph import Graph
from commgraph.partition.metis import metis_edge_cut, undirected_adjacency
from commgraph.sample.base import LayerSample, SampledBatch, SamplingGraph, in_edges


class ClusterSampler:
    r"""ClusterGCN, from `"Cluster-GCN: An Efficient Algorithm for Training Deep and Large Graph
    Convolutional Networks" <https://arxiv.org/abs/1905.07953>`_ (Chiang et al., 2019).

    The worker's local nodes are split once into ``num_clusters`` METIS clusters (minimum edge
    cut). An epoch visits the clusters in a random order, ``clusters_per_batch`` at a time (the
    paper's stochastic multiple partitions); a batch is the subgraph induced by the union
    :math:`\mathcal{V}_b` of its clusters, so every layer computes

    .. math::
        H^{(l+1)}_{\mathcal{V}_b} =
        \sigma\big(\hat A_{\mathcal{V}_b, \mathcal{V}_b} H^{(l)}_{\mathcal{V}_b} W^{(l)}\big)

    and the loss covers the batch's training nodes, which are its seeds. Every node is the
    worker's own: no feature crosses workers. A batch holding no training node is skipped.

    Args:
        graph: the structure sampled on; only ``graph.local_nodes()`` are clustered.
        layers: the number of GNN layers (blocks per batch).
        train_nodes: the training nodes (global ids); the local ones become seeds.
        num_clusters: METIS clusters of the local nodes.
        clusters_per_batch: clusters joined into one batch.
        seed: METIS's seed.

    Shapes:
        every block's table is the batch's nodes, training nodes first; the last block's
        destinations are those training nodes.
    """

    name = "cluster"

    def __init__(
        self,
        graph: SamplingGraph,
        layers: int,
        train_nodes: np.ndarray,
        *,
        num_clusters: int,
        clusters_per_batch: int = 1,
        seed: int = 0,
    ):
        nodes = graph.local_nodes()
        if layers < 1:
            raise SamplingError(f"ClusterGCN needs --layers >= 1; got {layers}")
        if not 1 <= clusters_per_batch <= num_clusters <= nodes.shape[0]:
            raise SamplingError(
                f"need 1 <= --clusters-per-batch ({clusters_per_batch}) <= --clusters ({num_clusters}) "
                f"<= the worker's {nodes.shape[0]} nodes"
            )
        self.graph, self.layers, self.clusters_per_batch = graph, layers, clusters_per_batch
        self.nodes = nodes
        self.is_train = np.zeros(graph.num_nodes, dtype=bool)
        self.is_train[np.asarray(train_nodes, dtype=np.int64)] = True
        local = self._local_graph()
        self.cluster = (
            metis_edge_cut(undirected_adjacency(local), num_clusters, seed)
            if num_clusters > 1
            else np.zeros(nodes.shape[0], dtype=np.int64)
        )
        self.num_clusters = num_clusters

    def _local_graph(self) -> Graph:
        """The subgraph induced by the local nodes, in local ids."""
        rows, sources = self._induced(self.nodes)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=self.nodes.shape[0]))])
        return Graph(indptr, sources)

    def _induced(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Edges among ``nodes``, as (destination position, source position), destination-major."""
        position = np.full(self.graph.num_nodes, -1, dtype=np.int64)
        position[nodes] = np.arange(nodes.shape[0])
        rows, sources = in_edges(self.graph, nodes)
        sources = position[sources]
        keep = sources >= 0
        return rows[keep], sources[keep]

    def batch(self, clusters: np.ndarray) -> SampledBatch | None:
        """The batch of the union of ``clusters`` (None when it holds no training node)."""
        members = self.nodes[np.isin(self.cluster, clusters)]
        train = self.is_train[members]
        if not train.any():
            return None
        nodes = np.concatenate([members[train], members[~train]])
        seeds = members[train]
        rows, sources = self._induced(nodes)
        every = LayerSample(nodes, nodes, sources, rows)
        last = rows < seeds.shape[0]
        top = LayerSample(seeds, nodes, sources[last], rows[last])
        layers = [every] * (self.layers - 1) + [top]
        return SampledBatch(seeds, layers, self.graph.is_remote(nodes))

    def epoch(self, rng: np.random.Generator) -> Iterator[SampledBatch]:
        """One epoch's batches: every cluster once, in a random order."""
        order = rng.permutation(self.num_clusters)
        for start in range(0, self.num_clusters, self.clusters_per_batch):
            batch = self.batch(order[start : start + self.clusters_per_batch])
            if batch is not None:
                yield batch
