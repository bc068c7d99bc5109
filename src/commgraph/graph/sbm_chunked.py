"""``sbm:...,chunked=1``: the stochastic block model written to a graph file a chunk of nodes at a
time, never held in memory, for graphs larger than memory (``docs/out-of-core.md``).

The model is :func:`~commgraph.graph.sbm`'s (Holland, Laskey and Leinhardt, 1983): ``C`` equal
blocks, about ``N * degree / 2`` edges drawn from uniform sources, a share ``homophily`` of them
inside the source's block, symmetrised; features the class centroid plus ``noise`` times Gaussian
noise. What is drawn differs so that no array is node- or edge-sized in memory:

- **labels** follow a fixed bijection, ``label(v) = ((v P + offset) mod N) mod C`` (``P`` a prime
  that does not divide ``N``), so the ``k``-th node of block ``c`` is computed, never looked up
  (``v = ((k C + c - offset) P^-1) mod N``);
- **edges** are drawn a chunk of :data:`CHUNK_NODES` sources at a time, ``round(n degree / 2)``
  from each chunk of ``n`` nodes, from a generator of their own (``[seed, stream, chunk]``, as
  ``papers-shaped`` draws); each is written in both directions into bucket files by destination
  (:data:`BUCKET_NODES` rows a bucket), and each bucket is then sorted, its repeats and self loops
  dropped, and appended to the in-edge CSR: an external bucket sort whose memory is one bucket;
- **splits**: each node is in training with probability ``train``, validation ``val``, else test.

The graph is therefore not the in-memory ``sbm``'s for the same seed (that one draws every array
from one generator in one pass, and permutes its labels); it is the same for a seed whatever the
machine, and has the same law: block sizes within one, uniform sources, the homophily share of
edges inside blocks. Members are written as commgraph's ``.npz`` (:mod:`commgraph.graph.npz`) and
then memory-mapped, never read; :func:`sbm_chunks` hands the same chunks to another writer (a
partition set written straight, :mod:`commgraph.partition.streamed`).
"""

from __future__ import annotations

import os
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from commgraph.errors import GraphSpecError
from commgraph.graph.chunked import ChunkedGraph, Chunks, EdgeRows, NodeRows
from commgraph.graph.npz import FORMAT_VERSION
from commgraph.graph.papers import _coprime_prime, _member, _stream
from commgraph.sizes import check_count

CHUNK_NODES = 1 << 15  # sources drawn, and feature rows written, at a time
BUCKET_NODES = 1 << 16  # destination rows sorted at a time
STREAMS = {"edge": 0, "feature": 1, "split": 2, "centroid": 3}


def write_sbm_chunked(
    path: str | Path,
    nodes: int,
    classes: int,
    features: int,
    seed: int = 0,
    degree: float = 10.0,
    homophily: float = 0.8,
    noise: float = 3.0,
    train: float = 0.1,
    val: float = 0.1,
    name: str | None = None,
) -> None:
    """Write the chunked SBM (the module's description) to ``path``, a stored ``.npz``, through a
    temporary file renamed into place when complete; the buckets lie beside it meanwhile (about
    32 bytes per edge drawn) and are removed.

    Raises:
        GraphSpecError: a node count whose labels' bijection would overflow int64.
    """
    check_count("sbm chunked: nodes x nodes (its label bijection)", nodes * nodes, GraphSpecError)
    draw = _Draws(nodes, classes, features, seed, degree, homophily, noise, (train, val))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    buckets = path.with_name(f".{path.name}.buckets-{os.getpid()}")
    buckets.mkdir()
    try:
        sorted_rows = _sort_buckets(draw, buckets)
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
            _member(archive, "commgraph_format", np.array(FORMAT_VERSION))
            _member(archive, "name", np.array(name or f"sbm-chunked-{nodes}"))
            edges = _stream(archive, "indptr", np.int64, (nodes + 1,), _indptr(sorted_rows))
            _stream(archive, "indices", np.int64, (edges,), (np.load(f) for f, _ in sorted_rows))
            _stream(archive, "features", np.float32, (nodes, features), map(draw.features, draw.chunks()))
            _stream(archive, "labels", np.int64, (nodes,), map(draw.chunk_labels, draw.chunks()))
            for k, member in enumerate(("train_mask", "val_mask", "test_mask")):
                _stream(archive, member, np.bool_, (nodes,), (draw.split(c) == k for c in draw.chunks()))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(buckets, ignore_errors=True)


def sbm_chunks(
    nodes: int,
    classes: int,
    features: int,
    seed: int = 0,
    degree: float = 10.0,
    homophily: float = 0.8,
    noise: float = 3.0,
    train: float = 0.1,
    val: float = 0.1,
    name: str | None = None,
) -> ChunkedGraph:
    """The chunked SBM as a :class:`~commgraph.graph.chunked.ChunkedGraph`: the arrays
    :func:`write_sbm_chunked` writes, a chunk at a time, for a writer of another layout (its edges
    sorted through bucket files in the scratch folder it is given).

    Raises:
        GraphSpecError: a node count whose labels' bijection would overflow int64.
    """
    check_count("sbm chunked: nodes x nodes (its label bijection)", nodes * nodes, GraphSpecError)
    draw = _Draws(nodes, classes, features, seed, degree, homophily, noise, (train, val))

    def edges(scratch: Path) -> Chunks:
        buckets = list(enumerate(_sort_buckets(draw, scratch)))
        return Chunks(buckets, lambda bucket: EdgeRows(bucket[0] * BUCKET_NODES, *map(np.load, bucket[1][::-1])))

    return ChunkedGraph(name or f"sbm-chunked-{nodes}", nodes, features, CHUNK_NODES, draw.node_rows, edges)


class _Draws:
    """The model's arrays, a chunk at a time, each from generators of its own."""

    def __init__(self, nodes, classes, features, seed, degree, homophily, noise, splits):
        self.nodes, self.classes, self.width, self.seed = nodes, classes, features, seed
        self.degree, self.homophily, self.noise, self.splits = degree, homophily, noise, splits
        self.prime = _coprime_prime(nodes) % nodes or 1
        self.inverse = pow(self.prime, -1, nodes) if nodes > 1 else 0
        self.offset = int(self._rng("centroid", 0).integers(nodes))
        self.centroids = self._rng("centroid", 1).standard_normal((classes, features), dtype=np.float32)
        self.sizes = nodes // classes + (np.arange(classes) < nodes % classes)

    def chunks(self) -> range:
        return range(0, self.nodes, CHUNK_NODES)

    def span(self, start: int) -> int:
        return min(CHUNK_NODES, self.nodes - start)

    def _rng(self, stream: str, chunk: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, STREAMS[stream], chunk])

    def labels(self, v: np.ndarray) -> np.ndarray:
        """Labels of nodes ``v``: their bijection's image mod ``C``."""
        return ((v * self.prime + self.offset) % self.nodes) % self.classes

    def chunk_labels(self, start: int) -> np.ndarray:
        return self.labels(np.arange(start, start + self.span(start), dtype=np.int64))

    def member(self, block: np.ndarray, k: np.ndarray) -> np.ndarray:
        """The ``k``-th node of ``block`` (the inverse bijection)."""
        image = k * self.classes + block
        return ((image - self.offset) % self.nodes) * self.inverse % self.nodes

    def edges(self, start: int) -> tuple[np.ndarray, np.ndarray]:
        """The edges drawn from the chunk's sources: ``(source, destination)`` each."""
        rng = self._rng("edge", start // CHUNK_NODES)
        count = int(round(self.span(start) * self.degree / 2))
        src = rng.integers(start, start + self.span(start), count)
        inside = rng.random(count) < self.homophily
        own = self.labels(src)
        other = (own + rng.integers(1, max(self.classes, 2), count)) % self.classes
        block = np.where(inside | (self.classes == 1), own, other)
        k = (rng.random(count) * self.sizes[block]).astype(np.int64)
        return src, self.member(block, k)

    def features(self, start: int) -> np.ndarray:
        noise = self._rng("feature", start // CHUNK_NODES).standard_normal((self.span(start), self.width), np.float32)
        return self.centroids[self.chunk_labels(start)] + np.float32(self.noise) * noise

    def split(self, start: int) -> np.ndarray:
        """Per node: 0 train, 1 validation, 2 test."""
        u = self._rng("split", start // CHUNK_NODES).random(self.span(start))
        return np.searchsorted(np.cumsum(self.splits), u, side="right").clip(max=2)

    def node_rows(self, start: int) -> NodeRows:
        split = self.split(start)
        return NodeRows(self.features(start), self.chunk_labels(start), split == 0, split == 1, split == 2)


def _sort_buckets(draw: _Draws, folder: Path) -> list[tuple[Path, Path]]:
    """Every drawn edge in both directions, bucketed by destination row, then each bucket sorted
    by row and source with repeats and self loops dropped: per bucket, the files of its sources
    (the CSR's indices) and of its rows' counts."""
    buckets = range(0, draw.nodes, BUCKET_NODES)
    for start in draw.chunks():
        src, dst = draw.edges(start)
        rows, cols = np.concatenate([dst, src]), np.concatenate([src, dst])
        which = rows // BUCKET_NODES
        order = np.argsort(which, kind="stable")
        bounds = np.searchsorted(which[order], np.arange(len(buckets) + 1))
        for b in np.flatnonzero(np.diff(bounds)):
            pick = order[bounds[b] : bounds[b + 1]]
            with open(folder / f"{b}.pairs", "ab") as handle:
                np.stack([rows[pick], cols[pick]], axis=1).tofile(handle)
    done = []
    for b, first in enumerate(buckets):
        pairs = folder / f"{b}.pairs"
        edges = np.fromfile(pairs, np.int64).reshape(-1, 2) if pairs.exists() else np.zeros((0, 2), np.int64)
        pairs.unlink(missing_ok=True)
        rows, cols = edges[:, 0], edges[:, 1]
        order = np.lexsort((cols, rows))
        rows, cols = rows[order], cols[order]
        keep = rows != cols
        keep[1:] &= (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
        span = min(BUCKET_NODES, draw.nodes - first)
        np.save(folder / f"{b}.indices.npy", cols[keep])
        np.save(folder / f"{b}.counts.npy", np.bincount(rows[keep] - first, minlength=span))
        done.append((folder / f"{b}.indices.npy", folder / f"{b}.counts.npy"))
    return done


def _indptr(sorted_rows: list[tuple[Path, Path]]) -> Iterator[np.ndarray]:
    yield np.zeros(1, np.int64)
    total = 0
    for _, counts in sorted_rows:
        counts = np.load(counts)
        yield total + np.cumsum(counts)
        total += int(counts.sum())
