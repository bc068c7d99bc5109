"""``papers-shaped:nodes=N,seed=S``: a graph with ogbn-papers100M's shape at any node count, written
straight to a graph file a chunk of nodes at a time, never held in memory.

ogbn-papers100M (Hu et al., "Open Graph Benchmark", 2020) has 111M papers, 1.6B citations (about 14
in-edges a node, a power law: a few papers are cited by tens of thousands), 128 features a node and
172 classes, about 1% of the nodes labelled for training. This generator keeps that shape:

- **in-degree**: a discrete Pareto law, ``d = floor(x_min * U^(-1 / (alpha - 1)))`` with
  :data:`ALPHA` and ``x_min`` set for a mean of about :data:`MEAN_DEGREE` (a node's in-edges are
  its row of the in-edge CSR);
- **sources**: popular papers are cited most: a source's popularity rank is drawn from a power law
  (``rank = floor(N * U^SOURCE_SKEW)``) and scattered over the ids by a fixed bijection
  (``rank * P + offset mod N``, ``P`` a prime that does not divide ``N``); no self loops, no
  repeated edge (a row's draws are sorted and de-duplicated);
- **features**: 128 values a node, its class's centroid plus Gaussian noise, so a GNN can learn
  the labels; rounded to float16 (papers100M's precision) and stored as float32, the dtype a
  :class:`~commgraph.graph.Graph` maps without a copy (``partition make --feature-dtype float16``
  stores them at half the bytes in a partition set, exactly);
- **labels**: :data:`CLASSES` classes, uniform; **masks**: each node is in training, validation or
  test with probabilities ``train``, ``val`` and ``test``.

Every array is written as a stored member of commgraph's ``.npz`` (:mod:`commgraph.graph.npz`), a
chunk of :data:`CHUNK_NODES` nodes at a time, each chunk drawn from its own generators
(``[seed, stream, chunk]``), so a member is written without the others and what a writer holds
is one chunk's arrays, whatever the node count. :func:`load_npz` then maps the members in place
(every member in the dtype a ``Graph`` holds: int64 ids, float32 features). :func:`papers_chunks`
hands the same chunks to another writer (a partition set written straight,
:mod:`commgraph.partition.streamed`).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from commgraph.errors import GraphSpecError
from commgraph.graph.chunked import ChunkedGraph, Chunks, EdgeRows, NodeRows
from commgraph.graph.core import Graph
from commgraph.graph.npz import FORMAT_VERSION, load_npz

ALPHA = 2.5  # the in-degree law's exponent
MEAN_DEGREE = 14.0  # papers100M: 1.6B edges over 111M nodes
MAX_DEGREE = 1 << 16  # the largest in-degree drawn (papers100M's largest is about 26 thousand)
SOURCE_SKEW = 2.0  # rank = N U^2: the lowest ranks (the most cited papers) drawn most
WIDTH, CLASSES = 128, 172
CHUNK_NODES = 1 << 15  # nodes drawn and written at a time
NOISE = 2.0  # the features' noise around their class centroid (centroids have unit variance)
STREAMS = {"degree": 0, "source": 1, "label": 2, "feature": 3, "split": 4, "centroid": 5}


def papers_shaped(nodes: int, seed: int = 0, train: float = 0.011, val: float = 0.0011, test: float = 0.0019) -> Graph:
    """The ``papers-shaped`` graph of ``nodes`` nodes, written once to the dataset cache
    (``$COMMGRAPH_HOME/datasets/papers-shaped/``) by :func:`write_papers_shaped` and memory-mapped
    from there (the module's description; the default splits are papers100M's shares).

    Raises:
        GraphSpecError: fewer than 2 nodes, or splits that are not shares summing to at most 1.
    """
    from commgraph.graph.datasets import dataset_dir

    path = dataset_dir("papers-shaped") / f"nodes={nodes},seed={seed},train={train},val={val},test={test}.npz"
    if not path.is_file():
        write_papers_shaped(path, nodes, seed, train, val, test)
    return load_npz(path)


def write_papers_shaped(
    path: str | Path, nodes: int, seed: int = 0, train: float = 0.011, val: float = 0.0011, test: float = 0.0019
) -> None:
    """Write the ``papers-shaped`` graph to ``path`` (a stored ``.npz``), a chunk of nodes at a
    time, through a temporary file renamed into place when complete.

    Raises:
        GraphSpecError: fewer than 2 nodes, or splits that are not shares summing to at most 1.
    """
    draw = _Draws(nodes, seed, (train, val, test))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
            _member(archive, "commgraph_format", np.array(FORMAT_VERSION))
            _member(archive, "name", np.array(f"papers-shaped-{nodes}"))
            edges = _stream(archive, "indptr", np.int64, (nodes + 1,), draw.indptr())
            _stream(archive, "indices", np.int64, (edges,), (draw.sources(c) for c in draw.chunks()))
            _stream(archive, "features", np.float32, (nodes, WIDTH), (draw.features(c) for c in draw.chunks()))
            _stream(archive, "labels", np.int64, (nodes,), (draw.labels(c) for c in draw.chunks()))
            for k, name in enumerate(("train_mask", "val_mask", "test_mask")):
                _stream(archive, name, np.bool_, (nodes,), (draw.split(c) == k for c in draw.chunks()))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def papers_chunks(
    nodes: int, seed: int = 0, train: float = 0.011, val: float = 0.0011, test: float = 0.0019
) -> ChunkedGraph:
    """The ``papers-shaped`` graph as a :class:`~commgraph.graph.chunked.ChunkedGraph`: the arrays
    :func:`write_papers_shaped` writes, a chunk at a time, for a writer of another layout.

    Raises:
        GraphSpecError: fewer than 2 nodes, or splits that are not shares summing to at most 1.
    """
    draw = _Draws(nodes, seed, (train, val, test))
    return ChunkedGraph(
        f"papers-shaped-{nodes}", nodes, WIDTH, CHUNK_NODES, draw.node_rows, lambda _: Chunks(draw.chunks(), draw.rows)
    )


class _Draws:
    """Each chunk's arrays, drawn from generators of their own (``[seed, stream, chunk]``).

    Raises:
        GraphSpecError: fewer than 2 nodes, or splits that are not shares summing to at most 1.
    """

    def __init__(self, nodes: int, seed: int, splits: tuple[float, float, float]):
        if nodes < 2:
            raise GraphSpecError(f"papers-shaped needs at least 2 nodes, got {nodes}")
        if min(splits) < 0 or sum(splits) > 1:
            raise GraphSpecError(
                f"papers-shaped splits must be shares summing to at most 1, got {', '.join(map(str, splits))}"
            )
        self.nodes, self.seed, self.splits = nodes, seed, splits
        self.x_min = MEAN_DEGREE * (ALPHA - 2) / (ALPHA - 1) + 0.5  # floor() takes about half a unit
        self.prime = _coprime_prime(nodes)
        self.offset = int(self._rng("centroid", 0).integers(nodes))
        self.centroids = self._rng("centroid", 1).standard_normal((CLASSES, WIDTH)).astype(np.float32)

    def chunks(self) -> range:
        return range(0, self.nodes, CHUNK_NODES)

    def _rng(self, stream: str, chunk: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, STREAMS[stream], chunk])

    def _span(self, start: int) -> int:
        return min(CHUNK_NODES, self.nodes - start)

    def _draws(self, start: int) -> tuple[np.ndarray, np.ndarray]:
        """The chunk's rows and drawn sources (before de-duplication), row by row."""
        n = self._span(start)
        u = self._rng("degree", start // CHUNK_NODES).random(n)
        degree = np.minimum(np.floor(self.x_min * (1 - u) ** (-1 / (ALPHA - 1))), min(MAX_DEGREE, self.nodes - 1))
        rows = np.repeat(np.arange(start, start + n), degree.astype(np.int64))
        rank = np.floor(self.nodes * self._rng("source", start // CHUNK_NODES).random(rows.shape[0]) ** SOURCE_SKEW)
        sources = (rank.astype(np.int64) * self.prime + self.offset) % self.nodes
        sources[sources == rows] = (sources[sources == rows] + 1) % self.nodes  # no self loop
        return rows, sources

    def _edges(self, start: int) -> tuple[np.ndarray, np.ndarray]:
        """The chunk's in-edges, sorted by row then source, each once."""
        rows, sources = self._draws(start)
        key = np.sort((rows - start) * self.nodes + sources)  # one int64 key: row, then source
        key = key[np.concatenate([[True], key[1:] != key[:-1]])] if key.shape[0] else key
        return key // self.nodes + start, key % self.nodes

    def rows(self, start: int) -> EdgeRows:
        """The chunk's in-edges: each row's count and the sources, row after row."""
        rows, sources = self._edges(start)
        return EdgeRows(start, np.bincount(rows - start, minlength=self._span(start)), sources)

    def indptr(self) -> Iterator[np.ndarray]:
        yield np.zeros(1, np.int64)
        total = 0
        for start in self.chunks():
            counts = self.rows(start).counts
            yield total + np.cumsum(counts)
            total += int(counts.sum())

    def sources(self, start: int) -> np.ndarray:
        return self._edges(start)[1]

    def labels(self, start: int) -> np.ndarray:
        return self._rng("label", start // CHUNK_NODES).integers(CLASSES, size=self._span(start))

    def features(self, start: int) -> np.ndarray:
        noise = self._rng("feature", start // CHUNK_NODES).standard_normal((self._span(start), WIDTH), np.float32)
        return (self.centroids[self.labels(start)] + NOISE * noise).astype(np.float16).astype(np.float32)

    def split(self, start: int) -> np.ndarray:
        """Per node: 0 train, 1 validation, 2 test, 3 none."""
        u = self._rng("split", start // CHUNK_NODES).random(self._span(start))
        return np.searchsorted(np.cumsum(self.splits), u, side="right")

    def node_rows(self, start: int) -> NodeRows:
        split = self.split(start)
        return NodeRows(self.features(start), self.labels(start), split == 0, split == 1, split == 2)


def _member(archive: zipfile.ZipFile, name: str, array: np.ndarray) -> None:
    with archive.open(f"{name}.npy", "w", force_zip64=True) as handle:
        np.lib.format.write_array(handle, array, allow_pickle=False)


def _stream(archive: zipfile.ZipFile, name: str, dtype, shape: tuple[int, ...], chunks) -> int:
    """Write member ``name`` of ``shape`` from ``chunks`` (its rows in order); returns the last
    value of a 1-D member (the edge count, for ``indptr``) or 0."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
    written, last = 0, 0
    with archive.open(f"{name}.npy", "w", force_zip64=True) as handle:
        np.lib.format.write_array_header_2_0(handle, header)
        for chunk in chunks:
            chunk = np.ascontiguousarray(chunk, dtype=dtype)
            handle.write(memoryview(chunk).cast("B"))
            written += chunk.shape[0]
            if chunk.ndim == 1 and chunk.shape[0]:
                last = int(chunk[-1])
    if written != shape[0]:
        raise RuntimeError(f"papers-shaped wrote {written} rows of {name}, expected {shape[0]}")
    return last


def _coprime_prime(nodes: int) -> int:
    """A large prime that does not divide ``nodes``: ``rank * P mod N`` is then a bijection."""
    for prime in (2_147_483_647, 1_000_000_007, 998_244_353):
        if nodes % prime:
            return prime
    return 1  # unreachable: N is divisible by all three only above 2e27
