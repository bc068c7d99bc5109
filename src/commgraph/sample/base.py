"""What every sampler reads and writes: the graph it samples from, and the blocks it returns.

A sampler turns a batch of seed nodes into one bipartite *block* (message-flow graph) per GNN
layer, DGL's layout: layer ``l`` reads a table of ``src`` nodes and computes its ``dst`` nodes,
which are the table's first rows, so a layer's output is the next layer's table as is. The last
layer's destinations are the seeds; the first layer's table is the batch's input nodes, whose
features are the only rows a worker fetches (from other workers for remote ones).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numba import njit

from commgraph.errors import SamplingError
from commgraph.graph import Graph
from commgraph.graph.core import loop_free_in_degrees
from commgraph.nn import GNN, Block
from commgraph.partition.mapped import advise_random
from commgraph.partition.store import PartitionSet
from commgraph.sample.keyed import sample_rows


@dataclass(frozen=True)
class SamplingGraph:
    """The structure a worker samples on, and which nodes are its own.

    A node's in-edges are rows of a CSR whose rows are destinations (``indices[indptr[v]:
    indptr[v + 1]]`` are the sources of edges into ``v``). Sampling a second hop needs the
    in-edges of remote nodes, so a worker samples on the whole graph's structure; from a partition
    set it is the set's ``structure/`` files, memory-mapped read-only, so the workers of a machine
    share one copy (int32 sources: ``8 (N + 1) + 4 E`` bytes per machine, no features): what a
    worker fetches per batch is feature rows, never structure. ``owner[v]`` is the part owning
    ``v`` and ``part`` the worker's own; with ``part`` None every node is local (single-process
    training).
    """

    indptr: np.ndarray
    indices: np.ndarray
    degree: np.ndarray  # in-degree without self loops, of every node (GCN's normalisation)
    owner: np.ndarray
    part: int | None = None

    @classmethod
    def from_graph(cls, graph: Graph) -> SamplingGraph:
        """The whole graph on one worker: every node is local."""
        return cls(
            graph.indptr,
            graph.indices,
            loop_free_in_degrees(graph.indptr, graph.indices),
            np.zeros(graph.num_nodes, dtype=np.int8),
            None,
        )

    @classmethod
    def from_partition(cls, pset: PartitionSet, part: int) -> SamplingGraph:
        """Worker ``part`` of a partition set: the set's whole in-edge CSR, degrees and owners, as
        read-only views of its memory-mapped files."""
        indptr, indices = pset.in_edges()
        return cls(
            np.asarray(indptr),
            np.asarray(indices),
            np.asarray(pset.structure("degree")),
            np.asarray(pset.assignment()),
            part,
        )

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    def read_at_random(self) -> None:
        """Advise the kernel that its mapped CSR is read a neighbour list at a time
        (:func:`~commgraph.partition.mapped.advise_random`): for a job whose structure does not stay
        resident (a memory budget)."""
        advise_random(self.indptr, self.indices)

    def is_remote(self, nodes: np.ndarray) -> np.ndarray:
        if self.part is None:
            return np.zeros(nodes.shape[0], dtype=bool)
        return self.owner[nodes] != self.part

    def local_nodes(self) -> np.ndarray:
        """The nodes this worker owns (every node when ``part`` is None)."""
        if self.part is None:
            return np.arange(self.num_nodes, dtype=np.int64)
        return np.flatnonzero(self.owner == self.part)

    def sample_rows(self, dst: np.ndarray, fanout: int, key: int) -> tuple[np.ndarray, np.ndarray]:
        """A hop's draws for destinations ``dst`` (:func:`commgraph.sample.keyed.sample_rows`):
        per-destination counts and the sources, destination after destination."""
        return sample_rows(self.indptr, self.indices, dst, fanout, key)


@dataclass
class LayerSample:
    """One layer's block in global ids.

    ``src`` is the table (its first ``len(dst)`` entries are ``dst``); edge ``e`` runs from table
    row ``edge_src[e]`` into destination ``edge_dst[e]``. Layer-wise samplers also give the
    probability ``prob`` with which each table row was drawn (0 for rows present only as a
    destination) and the estimator's per-edge ``weight`` of their paper.
    """

    dst: np.ndarray
    src: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    prob: np.ndarray | None = None
    weight: np.ndarray | None = None

    @property
    def num_edges(self) -> int:
        return int(self.edge_src.shape[0])


@dataclass
class SampledBatch:
    """A batch's blocks, first GNN layer first (``layers[-1].dst`` are the seeds).

    ``remote_input[i]`` tells whether input node ``i`` is owned by another worker (its features are
    fetched); ``feature_columns`` are the columns fetched for remote inputs (None: all, the rest
    are zero-filled); ``sync_bytes`` are bytes the sampler itself had to exchange (LADIES's
    probability synchronisation).
    """

    seeds: np.ndarray
    layers: list[LayerSample]
    remote_input: np.ndarray
    feature_columns: np.ndarray | None = None
    sync_bytes: int = 0

    @property
    def input_nodes(self) -> np.ndarray:
        return self.layers[0].src

    @property
    def num_sampled_edges(self) -> int:
        return sum(layer.num_edges for layer in self.layers)

    def fetched_values(self, num_features: int) -> int:
        """Feature values moved from other workers for this batch."""
        width = num_features if self.feature_columns is None else self.feature_columns.shape[0]
        return int(self.remote_input.sum()) * width

    def input_features(self, features: np.ndarray) -> torch.Tensor:
        """The first layer's table: the input nodes' rows, remote rows cut to ``feature_columns``
        (the other columns zero), as a worker receives them."""
        x = torch.from_numpy(np.asarray(features[self.input_nodes], dtype=np.float32))
        if self.feature_columns is not None and self.remote_input.any():
            dropped = np.ones(x.shape[1], dtype=bool)
            dropped[self.feature_columns] = False
            rows = torch.from_numpy(np.flatnonzero(self.remote_input))
            x[rows.unsqueeze(1), torch.from_numpy(np.flatnonzero(dropped)).unsqueeze(0)] = 0.0
        return x

    def blocks(self, graph: SamplingGraph, device=None) -> list[Block]:
        """The layers as :class:`commgraph.nn.Block` s, ready for :meth:`GNN.layer` (global
        degrees, so GCN normalises as on the whole graph). A layer whose edges come destination
        after destination (neighbour sampling, DGS) is held as its adjacency alone
        (:meth:`~commgraph.nn.Block.from_csr`: int32, about 8 bytes an edge), the others as an
        edge list."""
        result = []
        for layer in self.layers:
            num_src, num_dst = int(layer.src.shape[0]), int(layer.dst.shape[0])
            degree = torch.from_numpy(graph.degree[layer.src].astype(np.float32))
            if np.all(layer.edge_dst[1:] >= layer.edge_dst[:-1]):
                indptr = np.zeros(num_dst + 1, dtype=np.int64)
                np.cumsum(np.bincount(layer.edge_dst, minlength=num_dst), out=indptr[1:])
                block = Block.from_csr(num_src, indptr, layer.edge_src, degree)
            else:
                edges = torch.from_numpy(np.stack([layer.edge_src, layer.edge_dst]))
                block = Block(num_src, num_dst, edges, degree, 0)
            result.append(block if device is None else block.to(device))
        return result


def forward_blocks(model: GNN, x: torch.Tensor, blocks: list[Block]) -> torch.Tensor:
    """``model`` on a sampled batch: ``x`` is the input nodes' table, the result has one row per
    seed."""
    h = model.encode(x)
    for index, block in enumerate(blocks):
        h = model.layer(index, h, block)
    return model.decode(h)


def in_edges(graph: SamplingGraph, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every in-edge of ``dst``, destination after destination: (position in ``dst``, source)."""
    counts = graph.indptr[dst + 1] - graph.indptr[dst]
    rows = np.repeat(np.arange(dst.shape[0], dtype=np.int64), counts)
    starts = np.repeat(graph.indptr[dst] - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return rows, graph.indices[starts + np.arange(rows.shape[0])]


def check_seeds(graph: SamplingGraph, seeds: np.ndarray) -> np.ndarray:
    seeds = np.asarray(seeds, dtype=np.int64)
    if seeds.ndim != 1 or seeds.size == 0:
        raise SamplingError("a batch needs at least one seed node (a 1-D array of node ids)")
    if seeds.min() < 0 or seeds.max() >= graph.num_nodes:
        raise SamplingError(f"seed ids must lie in 0..{graph.num_nodes - 1}")
    if np.unique(seeds).shape[0] != seeds.shape[0]:
        raise SamplingError("seed nodes of a batch must be distinct")
    return seeds


def draw_seed(rng: np.random.Generator) -> int:
    """A seed for a compiled kernel's own generator, drawn from ``rng`` so a run is reproducible."""
    return int(rng.integers(0, 2**31 - 1))


class Scratch:
    """A node-indexed position table a sampler reuses across batches (all -1 between calls)."""

    def __init__(self) -> None:
        self.position = np.empty(0, dtype=np.int64)

    def get(self, num_nodes: int) -> np.ndarray:
        if self.position.shape[0] != num_nodes:
            self.position = np.full(num_nodes, -1, dtype=np.int64)
        return self.position


def relabel(dst: np.ndarray, sources: np.ndarray, counts: np.ndarray, scratch: Scratch, num_nodes: int) -> LayerSample:
    """The block of destinations ``dst`` whose ``counts[i]`` sampled sources lie, destination after
    destination, in ``sources``: table = ``dst`` then new sources in order of first appearance."""
    src, edge_src = extend_table(dst, sources, scratch, num_nodes)
    edge_dst = np.repeat(np.arange(dst.shape[0], dtype=np.int64), counts)
    return LayerSample(dst, src, edge_src, edge_dst)


def extend_table(
    table: np.ndarray, sources: np.ndarray, scratch: Scratch, num_nodes: int
) -> tuple[np.ndarray, np.ndarray]:
    """``table`` (distinct ids of a ``num_nodes`` id space) followed by the ids of ``sources`` it
    lacks, in order of first appearance, and each source's position in that table.

    Shapes:
        table ``[n]``, sources ``[E]`` -> ``[n + new]``, ``[E]``
    """
    return _relabel(table, sources, scratch.get(num_nodes))


@njit(cache=True)
def _relabel(dst, sources, position):
    table = np.empty(dst.shape[0] + sources.shape[0], np.int64)
    for i in range(dst.shape[0]):
        position[dst[i]] = i
        table[i] = dst[i]
    size = dst.shape[0]
    edge_src = np.empty(sources.shape[0], np.int64)
    for e in range(sources.shape[0]):
        u = sources[e]
        at = position[u]
        if at < 0:
            at = size
            position[u] = at
            table[size] = u
            size += 1
        edge_src[e] = at
    for i in range(size):
        position[table[i]] = -1
    return table[:size].copy(), edge_src
