"""``partition make GRAPH --method chunk`` of a graph drawn a chunk at a time
(:class:`~commgraph.graph.chunked.ChunkedGraph`: ``papers-shaped:``, ``sbm:...,chunked=1``): the
partition set written straight from the generator, with no graph file first and no node- or
edge-sized array in memory.

Part ``k`` of ``P`` owns the ids ``v`` with ``v P // N = k`` (``--method chunk``'s consecutive
ranges), so the set holds the same files, byte for byte, as writing the graph file and then
``partition make --method chunk`` (:func:`~commgraph.partition.store.write_partition_set`). The
writer:

1. writes ``structure/`` from two passes over the generator's sorted in-edges (the first gives
   ``indptr``, the loop-free ``degree`` and ``owner``, the second ``indices``, whose length the
   first found);
2. per part, reads its rows' in-edges back from ``structure/`` a window at a time and marks their
   sources outside the part in a bit set (a bit a node): the halo is the marked nodes, ascending,
   which groups them by owner since owners are id ranges; a halo node's local id is the part's
   node count plus its rank among the marks (a running count per 64-node word and a popcount),
   so the part's CSR is renumbered a window at a time;
3. writes each part's send lists from its peers' halos written before (the segment of part
   ``q``'s halo that part ``k`` owns, in ``q``'s order);
4. draws the node data once, in id order, into the parts' ``features`` (``feature_dtype``),
   ``labels`` and masks, hashing the float32 features as they pass; the other arrays then join
   that digest as they are read back from the set, in the order
   :meth:`~commgraph.graph.Graph.checksum` takes them, so the manifest records the graph file's
   checksum.

Memory: a window's arrays (:data:`WINDOW` rows or edges), one generator chunk, and three eighths
of a byte a node (the halo's bit set, its words' running counts, and a bit per node with an
out-edge, for the manifest's ``isolated_nodes``). The connected components, which the two-step
path records in the manifest's metrics, need a node-sized union-find and are not recorded.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from commgraph.graph.chunked import ChunkedGraph
from commgraph.graph.core import MASK_NAMES
from commgraph.graph.nodefile import NpyWriter
from commgraph.partition.make import MadeSet
from commgraph.partition.methods import check_parts
from commgraph.partition.metrics import _imbalance
from commgraph.partition.store import (
    building_set,
    check_set_output,
    finish_set,
    id_dtype,
    owner_dtype,
)
from commgraph.partition.validate import read_header

WINDOW = 1 << 18  # rows or edges read back from the set at a time
_ONE = np.uint64(1)


@dataclass(frozen=True)
class _Halo:
    """Part ``k``'s halo as a bit set over the node ids: ``bits`` (a word per 64 nodes, one spare)
    and ``before`` (the marks before each word, then their total)."""

    bits: np.ndarray
    before: np.ndarray

    @property
    def size(self) -> int:
        return int(self.before[-1])

    def rank(self, ids: np.ndarray) -> np.ndarray:
        """The marks below each of ``ids`` (``0..N``): a marked node's position in the halo."""
        word = ids >> 6
        below = self.bits[word] & ((_ONE << (ids & 63).astype(np.uint64)) - _ONE)
        return self.before[word] + np.bitwise_count(below).astype(np.int64)

    def ids(self, start: int, stop: int) -> np.ndarray:
        """The marked ids in ``start..stop-1`` (``start`` a multiple of 64), ascending."""
        words = self.bits[start >> 6 : (stop + 63) >> 6].view(np.uint8)
        found = start + np.flatnonzero(np.unpackbits(words, bitorder="little"))
        return found[found < stop]


class _Array:
    """A ``.npy`` file of the set read a window at a time through ``pread`` (no map: the pages
    read stay the page cache's, reclaimable, not the process's)."""

    def __init__(self, path: Path):
        header = read_header(path)
        self.dtype, self.offset = header.dtype, header.offset
        self.row = int(np.prod(header.shape[1:], dtype=np.int64))
        self.fd = os.open(path, os.O_RDONLY)

    def read(self, start: int, stop: int) -> np.ndarray:
        size = (stop - start) * self.row * self.dtype.itemsize
        data = os.pread(self.fd, size, self.offset + start * self.row * self.dtype.itemsize)
        return np.frombuffer(data, self.dtype)

    def windows(self, start: int, stop: int):
        for at in range(start, stop, WINDOW):
            yield self.read(at, min(at + WINDOW, stop))

    def __enter__(self) -> _Array:
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.fd)


def write_streamed_set(
    graph: ChunkedGraph,
    parts: int,
    out: str | Path,
    *,
    seed: int = 0,
    force: bool = False,
    feature_dtype: str | None = None,
    log: Callable[[str], None] | None = None,
) -> MadeSet:
    """Write the ``--method chunk`` partition set of ``graph`` to ``out`` straight from its chunks
    (the module's description), built beside ``out`` and renamed into place when complete.

    Args:
        graph: the graph, drawn a chunk at a time.
        parts: number of parts, ``1..N``.
        out: the set's directory.
        seed: recorded in the manifest (``chunk`` draws nothing).
        force: replace an existing ``out``.
        feature_dtype: the dtype the features are stored in (None: float32, the graph's).
        log: hears each stage, a line each.

    Returns:
        MadeSet: the set, the seconds the whole write took (generation included) and the metrics
        recorded (:func:`~commgraph.partition.partition_metrics`'s, and ``isolated_nodes``).

    Raises:
        PartitionError: a part count no partition can have, an unknown ``feature_dtype``, or
            ``out`` exists without ``force``.
        OutputError: the disk filled up (nothing is left behind).
    """
    out, say = Path(out), log or (lambda _: None)
    check_parts(parts, graph.num_nodes)
    check_set_output(out, force, feature_dtype)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    scratch = out.parent / f".{out.name}.edges-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    try:
        with building_set(out) as tmp:
            writer = _Writer(graph, parts, tmp)
            say(f"writing the structure of {graph.name} ({graph.num_nodes:,} nodes)")
            isolated = writer.structure(scratch)
            for k in range(parts):
                say(f"writing part {k} of {parts}: its halo and in-edges")
                writer.part_structure(k)
            writer.send_lists()
            say("writing the features, labels and masks")
            writer.node_data(feature_dtype)
            metrics = {**writer.metrics(), "isolated_nodes": isolated}
            made_from = {
                "name": graph.name,
                "checksum": writer.checksum(),
                "num_nodes": graph.num_nodes,
                "num_edges": writer.num_edges,
            }
            seconds = time.perf_counter() - started
            pset = finish_set(
                tmp,
                out,
                made_from,
                writer.files,
                method="chunk",
                parts=parts,
                seed=seed,
                seconds=seconds,
                metrics=metrics,
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return MadeSet(pset, seconds, metrics)


class _Writer:
    """The set's files, written stage by stage into ``folder``; ``files`` their SHA-256s."""

    def __init__(self, graph: ChunkedGraph, parts: int, folder: Path):
        self.graph, self.parts, self.folder = graph, parts, folder
        n = graph.num_nodes
        self.bounds = [-(-k * n // parts) for k in range(parts + 1)]  # part k owns bounds[k]..bounds[k+1]-1
        self.files: dict[str, str] = {}
        self.num_edges = 0
        self.halo_sizes, self.edge_cut, self.recv_ptrs = [], [], []
        self.digest = hashlib.blake2b(digest_size=16)
        (folder / "structure").mkdir()
        for k in range(parts):
            (folder / f"part-{k}").mkdir()

    def _open(self, name: str, dtype, shape: tuple[int, ...]) -> NpyWriter:
        return NpyWriter(self.folder / name, dtype, shape)

    def _close(self, name: str, writer: NpyWriter) -> None:
        self.files[name] = writer.close()

    @contextmanager
    def _file(self, name: str, dtype, shape: tuple[int, ...]) -> Iterator[NpyWriter]:
        """A file of the set written in a ``with`` block, its SHA-256 recorded at its end."""
        with self._open(name, dtype, shape) as writer:
            yield writer
        self.files[name] = writer.sha256

    def _save(self, name: str, array: np.ndarray) -> None:
        with self._file(name, array.dtype, array.shape) as writer:
            writer.write(array)

    def _array(self, name: str) -> _Array:
        return _Array(self.folder / name)

    def structure(self, scratch: Path) -> int:
        """``structure/``'s files; returns the isolated nodes (no in- nor out-edge)."""
        n, edges = self.graph.num_nodes, self.graph.edges(scratch)
        has_out = np.zeros((n >> 6) + 1, np.uint64)
        kinds = {"indptr": (np.int64, n + 1), "degree": (np.int32, n), "owner": (owner_dtype(self.parts), n)}
        writers = {name: self._open(f"structure/{name}.npy", t, (size,)) for name, (t, size) in kinds.items()}
        writers["indptr"].write(np.zeros(1, np.int64))
        for chunk in edges:
            rows = np.arange(chunk.first, chunk.first + chunk.counts.shape[0])
            each = np.repeat(rows, chunk.counts)
            loops = np.bincount(each[each == chunk.sources] - chunk.first, minlength=rows.shape[0])
            writers["indptr"].write(self.num_edges + np.cumsum(chunk.counts))
            writers["degree"].write(chunk.counts - loops)
            writers["owner"].write(rows * self.parts // n)
            np.bitwise_or.at(has_out, chunk.sources >> 6, _ONE << (chunk.sources & 63).astype(np.uint64))
            self.num_edges += int(chunk.counts.sum())
        for name, writer in writers.items():
            self._close(f"structure/{name}.npy", writer)
        with self._file("structure/indices.npy", id_dtype(n), (self.num_edges,)) as writer:
            for chunk in edges:
                writer.write(chunk.sources)
        isolated = 0
        with self._array("structure/indptr.npy") as indptr:
            for start in range(0, n, WINDOW):
                stop = min(start + WINDOW, n)
                no_in = np.diff(indptr.read(start, stop + 1)) == 0
                no_out = np.unpackbits(has_out[start >> 6 : (stop + 63) >> 6].view(np.uint8), bitorder="little")
                isolated += int(np.count_nonzero(no_in & (no_out[: stop - start] == 0)))
        return isolated

    def part_structure(self, k: int) -> None:
        """Part ``k``'s owned ids, halo, local CSR, degrees and receive pointers."""
        lo, hi = self.bounds[k], self.bounds[k + 1]
        with ExitStack() as files:
            indptr, indices, degree = (
                files.enter_context(self._array(f"structure/{x}.npy")) for x in ("indptr", "indices", "degree")
            )
            first, last = int(indptr.read(lo, lo + 1)[0]), int(indptr.read(hi, hi + 1)[0])
            halo, owned = self._halo(lo, hi, indices.windows(first, last)), hi - lo
            self.recv_ptrs.append(halo.rank(np.array(self.bounds, np.int64)))
            self._save(f"part-{k}/recv_ptr.npy", self.recv_ptrs[k])
            with self._file(f"part-{k}/owned.npy", np.int64, (owned,)) as writer:
                for start in range(lo, hi, WINDOW):
                    writer.write(np.arange(start, min(start + WINDOW, hi)))
            with self._file(f"part-{k}/indptr.npy", np.int64, (owned + 1,)) as writer:
                for start in range(lo, hi + 1, WINDOW):
                    writer.write(indptr.read(start, min(start + WINDOW, hi + 1)) - first)
            with self._file(f"part-{k}/indices.npy", id_dtype(owned + halo.size), (last - first,)) as writer:
                for sources in indices.windows(first, last):
                    sources = sources.astype(np.int64)
                    inside = (sources >= lo) & (sources < hi)
                    writer.write(np.where(inside, sources - lo, owned + halo.rank(np.where(inside, 0, sources))))
            self._write_halo(k, halo, degree)

    def _halo(self, lo: int, hi: int, windows) -> _Halo:
        """The halo of the part owning ``lo..hi-1``, from its in-edges' sources (``windows``); its
        size and the edges it cuts are counted."""
        bits, cut = np.zeros((self.graph.num_nodes >> 6) + 1, np.uint64), 0
        for sources in windows:
            sources = sources[(sources < lo) | (sources >= hi)].astype(np.int64)
            np.bitwise_or.at(bits, sources >> 6, _ONE << (sources & 63).astype(np.uint64))
            cut += sources.shape[0]
        halo = _Halo(bits, np.concatenate([[0], np.cumsum(np.bitwise_count(bits), dtype=np.int64)]))
        self.halo_sizes.append(halo.size)
        self.edge_cut.append(cut)
        return halo

    def _write_halo(self, k: int, halo: _Halo, degree: _Array) -> None:
        """``halo``, ``halo_owner`` and ``degree`` (the owned rows' loop-free in-degrees, then the
        halo's) of part ``k``."""
        n, lo, hi = self.graph.num_nodes, self.bounds[k], self.bounds[k + 1]
        names = ("halo", "halo_owner", "degree")
        shapes = ((halo.size,), (halo.size,), (hi - lo + halo.size,))
        writers = [self._open(f"part-{k}/{x}.npy", np.int64, s) for x, s in zip(names, shapes)]
        for values in degree.windows(lo, hi):
            writers[2].write(values)
        for start in range(0, n, WINDOW):
            stop = min(start + WINDOW, n)
            ids = halo.ids(start, stop)
            writers[0].write(ids)
            writers[1].write(ids * self.parts // n)
            writers[2].write(degree.read(start, stop)[ids - start])
        for name, writer in zip(names, writers):
            self._close(f"part-{k}/{name}.npy", writer)

    def send_lists(self) -> None:
        """Every part's ``send_ptr`` and ``send_index``: for each peer ``q``, the part's nodes in
        ``q``'s halo, in ``q``'s order, as positions among its owned ids."""
        for k in range(self.parts):
            segments = [(q, int(self.recv_ptrs[q][k]), int(self.recv_ptrs[q][k + 1])) for q in range(self.parts)]
            sizes = [0 if q == k else b - a for q, a, b in segments]
            self._save(f"part-{k}/send_ptr.npy", np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
            with self._file(f"part-{k}/send_index.npy", np.int64, (sum(sizes),)) as writer:
                for q, a, b in segments:
                    if q != k:
                        with self._array(f"part-{q}/halo.npy") as halo:
                            for ids in halo.windows(a, b):
                                writer.write(ids - self.bounds[k])

    def node_data(self, feature_dtype: str | None) -> None:
        """Every part's ``features``, ``labels`` and masks, from one pass over the node chunks in id
        order; the features, as float32, start the graph's digest on the way."""
        n, width = self.graph.num_nodes, self.graph.num_features
        self.digest.update(f"features:{np.dtype(np.float32).str}:{(n, width)};".encode())
        names = ("features", "labels", *MASK_NAMES)
        dtypes = (feature_dtype or np.float32, np.int64, np.bool_, np.bool_, np.bool_)
        k, at, writers = 0, 0, []
        for chunk in self.graph.node_chunks():
            rows = chunk.features.shape[0]
            self.digest.update(memoryview(np.ascontiguousarray(chunk.features, np.float32)).cast("B"))
            done = 0
            while done < rows:
                lo, hi = self.bounds[k], self.bounds[k + 1]
                if not writers:
                    shapes = ((hi - lo, width), *[(hi - lo,)] * 4)
                    writers = [self._open(f"part-{k}/{x}.npy", t, s) for x, t, s in zip(names, dtypes, shapes)]
                take = min(rows - done, hi - at - done)
                for name, writer in zip(names, writers):
                    writer.write(getattr(chunk, name)[done : done + take])
                done += take
                if at + done == hi:
                    for name, writer in zip(names, writers):
                        self._close(f"part-{k}/{name}.npy", writer)
                    k, writers = k + 1, []
            at += rows

    def checksum(self) -> str:
        """The graph's checksum (:meth:`~commgraph.graph.Graph.checksum`): the features hashed as
        they were drawn, then its other arrays, by name, read back from the set."""
        n, e = self.graph.num_nodes, self.num_edges
        whole = {
            "indices": (np.int64, (e,), [("structure/indices.npy", 0, e)]),
            "indptr": (np.int64, (n + 1,), [("structure/indptr.npy", 0, n + 1)]),
        }
        for name in ("labels", *sorted(MASK_NAMES)):
            sizes = np.diff(self.bounds)
            dtype = np.int64 if name == "labels" else np.bool_
            whole[name] = (dtype, (n,), [(f"part-{k}/{name}.npy", 0, int(sizes[k])) for k in range(self.parts)])
        for name in sorted(whole):
            dtype, shape, pieces = whole[name]
            self.digest.update(f"{name}:{np.dtype(dtype).str}:{shape};".encode())
            for file, start, stop in pieces:
                with self._array(file) as array:
                    for values in array.windows(start, stop):
                        self.digest.update(memoryview(values.astype(dtype)).cast("B"))
        return self.digest.hexdigest()

    def metrics(self) -> dict:
        """:func:`~commgraph.partition.partition_metrics`'s figures, from what the parts counted."""
        nodes = np.diff(self.bounds)
        with self._array("structure/indptr.npy") as indptr:
            edges = np.diff(np.concatenate([indptr.read(b, b + 1) for b in self.bounds]))
        remote = np.array(self.halo_sizes, np.int64)
        per_part = [
            {"num_nodes": int(a), "num_edges": int(b), "num_remote": int(c)} for a, b, c in zip(nodes, edges, remote)
        ]
        return {
            "parts": per_part,
            "total_remote": int(remote.sum()),
            "edge_cut": int(sum(self.edge_cut)),
            "node_imbalance": _imbalance(nodes),
            "edge_imbalance": _imbalance(edges),
            "remote_imbalance": _imbalance(remote),
            "remote_min_max": float(remote.min() / remote.max()) if remote.max() > 0 else 1.0,
        }
