"""A graph drawn a chunk of nodes at a time and never held: what the chunked generators
(``papers-shaped:``, ``sbm:...,chunked=1``) hand to a writer, so that the same draws make either
their graph file or a partition set straight (:mod:`commgraph.partition.streamed`).

A :class:`ChunkedGraph` gives its per-node arrays by chunks of consecutive nodes
(``ChunkedGraph.node_rows``) and its in-edge CSR by consecutive row ranges, each row's
sources sorted, each edge once (``ChunkedGraph.edges``): the arrays the generator's graph
file holds, in the dtypes a :class:`~commgraph.graph.Graph` holds them (float32 features, int64
ids and labels, bool masks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class NodeRows:
    """A chunk of nodes' data.

    Shapes:
        - **features:** ``[n, F]`` float32; **labels:** ``[n]`` int64
        - **train_mask, val_mask, test_mask:** ``[n]`` bool
    """

    features: np.ndarray
    labels: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray


@dataclass(frozen=True)
class EdgeRows:
    """The in-edges of rows ``first .. first + counts.shape[0] - 1``: each row's count and, row
    after row, their sources (ascending within a row, each edge once)."""

    first: int
    counts: np.ndarray
    sources: np.ndarray


@dataclass(frozen=True)
class Chunks:
    """A sequence made again at each pass: ``make(key)`` for each of ``keys``, in order."""

    keys: Sequence
    make: Callable

    def __iter__(self) -> Iterator:
        return map(self.make, self.keys)


@dataclass(frozen=True)
class ChunkedGraph:
    """A graph given a chunk at a time (the module's description).

    Args:
        name: the graph's name (its graph file's).
        num_nodes: nodes ``N``.
        num_features: feature width ``F``.
        chunk_nodes: nodes of each :meth:`node_rows` chunk (the last one may be short).
        node_rows: the data of the chunk of nodes starting at a multiple of ``chunk_nodes``.
        edges: given a scratch folder (for what an external sort writes meanwhile), every row's
            in-edges as :class:`EdgeRows` covering rows ``0..N-1`` in order, re-iterable.
    """

    name: str
    num_nodes: int
    num_features: int
    chunk_nodes: int
    node_rows: Callable[[int], NodeRows]
    edges: Callable[[Path], Chunks]

    def node_chunks(self) -> Chunks:
        """Every node's data, chunk after chunk."""
        return Chunks(range(0, self.num_nodes, self.chunk_nodes), self.node_rows)
