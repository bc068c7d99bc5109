"""Edge lists parsed in chunks straight into CSR, in memory bounded by the result.

A text edge list (SNAP's ``src dst`` lines, OGB's ``src,dst`` CSV, plain or gzip) is read in blocks
of :data:`CHUNK_BYTES`, each cut at its last newline and parsed by a compiled scanner into a small
integer array (int32 while ids fit). The whole text is never held, and neither are the symmetrised
edges: the CSR is built by a counting sort over the chunks (degrees first, then each edge written
into its row), and every row is then sorted and stripped of repeats in place. At peak the process
holds the parsed pairs (8 bytes a line with int32 ids) plus the CSR being filled, which is at most
twice the final CSR for a symmetrised graph (``benchmarks/load_edgelist.py`` measures it).
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from commgraph.errors import GraphFormatError
from commgraph.graph.build import unique_sorted

CHUNK_BYTES = 1 << 24
_INT32_MAX = np.iinfo(np.int32).max

# scanner results: (pairs parsed, offset of the bad line, what was wrong)
_OK, _BAD_NUMBER, _FEW_COLUMNS, _NEGATIVE, _EXTRA_COLUMNS = range(5)


@dataclass
class EdgeChunks:
    """An edge list as parsed: pairs ``[k, 2]`` per chunk (source, destination), in file order."""

    chunks: list[np.ndarray]
    rows: int  # edge lines read
    max_id: int  # -1 when there are no edges

    def ids(self):
        return (chunk.ravel() for chunk in self.chunks)


@numba.njit(cache=True, inline="always")
def _blank(c):
    return c == 32 or c == 9 or c == 13


@numba.njit(cache=True, inline="always")
def _line_end(c):
    return c == 10 or c == 35  # newline or the start of a comment


@numba.njit(cache=True, nogil=True)
def _scan(buf, comma, exact, out):
    """Parse ``a<sep>b`` lines of ``buf`` into ``out``; '#' starts a comment. Returns (pairs parsed,
    offset of the first bad line or -1, error code)."""
    n = buf.shape[0]
    i = 0
    k = 0
    while i < n:
        start = i
        while i < n and _blank(buf[i]):
            i += 1
        if i >= n or _line_end(buf[i]):  # blank line or comment
            while i < n and buf[i] != 10:
                i += 1
            i += 1
            continue
        for col in range(2):
            if col == 1:
                while i < n and _blank(buf[i]):
                    i += 1
                if comma and i < n and buf[i] == 44:
                    i += 1
                    while i < n and _blank(buf[i]):
                        i += 1
                elif comma and i < n and not _line_end(buf[i]):
                    return k, start, _BAD_NUMBER
                if i >= n or _line_end(buf[i]):
                    return k, start, _FEW_COLUMNS
            if buf[i] == 45:
                return k, start, _NEGATIVE
            value = 0
            digits = 0
            while i < n and 48 <= buf[i] <= 57:
                value = value * 10 + (buf[i] - 48)
                digits += 1
                i += 1
            if (
                digits == 0
                or digits > 18
                or (i < n and not (_blank(buf[i]) or _line_end(buf[i]) or (comma and buf[i] == 44)))
            ):
                return k, start, _BAD_NUMBER
            out[k, col] = value
        while i < n and _blank(buf[i]):
            i += 1
        if exact and i < n and not _line_end(buf[i]):
            return k, start, _EXTRA_COLUMNS
        while i < n and buf[i] != 10:
            i += 1
        i += 1
        k += 1
    return k, -1, _OK


def read_edge_chunks(path: Path, *, comma: bool = False, exact_columns: bool = False) -> EdgeChunks:
    """Parse the first two columns of every non-comment line of ``path`` (gzip if it ends in .gz).
    Columns are split by spaces/tabs, or by one comma with ``comma``; extra columns are ignored
    unless ``exact_columns``. Errors name the file and line."""
    if not path.is_file():
        raise GraphFormatError(path, "no such file")
    chunks: list[np.ndarray] = []
    rows = lines_before = 0
    max_id = -1
    tail = b""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            while True:
                block = handle.read(CHUNK_BYTES)
                data = tail + block
                if not data:
                    break
                cut = data.rfind(b"\n") + 1 if block else len(data)
                tail = data[cut:]
                if not cut:
                    continue
                buf = np.frombuffer(data, dtype=np.uint8, count=cut)  # no copy of the block
                newlines = data.count(b"\n", 0, cut)
                pairs = np.empty((newlines + 1, 2), dtype=np.int64)
                count, bad, code = _scan(buf, comma, exact_columns, pairs)
                if code != _OK:
                    _raise_bad_line(path, buf, bad, code, lines_before, exact_columns)
                pairs = pairs[:count]
                if count:
                    max_id = max(max_id, int(pairs.max()))
                    chunks.append(pairs.astype(np.int32) if max_id <= _INT32_MAX else pairs.copy())
                rows += count
                lines_before += newlines
                if not block:
                    break
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise GraphFormatError(path, f"damaged or truncated gzip data ({exc})") from None
    if max_id > _INT32_MAX:
        chunks = [chunk.astype(np.int64, copy=False) for chunk in chunks]
    return EdgeChunks(chunks, rows, max_id)


def _raise_bad_line(path: Path, buf: np.ndarray, start: int, code: int, lines_before: int, exact: bool):
    line = lines_before + int(np.count_nonzero(buf[:start] == 10)) + 1
    end = start + int(np.argmax(np.append(buf[start:], np.uint8(10)) == 10))
    text = bytes(buf[start:end]).decode("utf-8", "replace").split("#", 1)[0].strip()
    tokens = text.replace(",", " ").split()
    if code == _NEGATIVE:
        bad = next(t for t in tokens if t.startswith("-"))
        raise GraphFormatError(path, f"negative node id {bad}", line=line)
    if code == _FEW_COLUMNS:
        want = "exactly" if exact else "at least"
        raise GraphFormatError(path, f"expected {want} 2 columns, found {len(tokens)}: {text[:60]!r}", line=line)
    if code == _EXTRA_COLUMNS:
        raise GraphFormatError(path, f"expected exactly 2 columns, found {len(tokens)}: {text[:60]!r}", line=line)
    bad = next((t for t in tokens[:2] if not t.isdigit()), text[:40])
    raise GraphFormatError(path, f"expected an integer, found {bad[:40]!r}", line=line)


def compact_ids(edges: EdgeChunks, declared: int | None) -> np.ndarray | None:
    """Renumber the ids of ``edges`` to 0..N-1 in place (sorted order kept) and return the original
    id of every new id; None, and nothing changed, when the ids are already dense from 0 (every id
    up to the largest is used)."""
    largest = edges.max_id
    limit = max(largest + 1, declared or 0)
    if limit <= 4 * edges.rows + 1024:  # a presence bitmap and an int32 map: 5 bytes an id, no sort
        present = np.zeros(limit, dtype=bool)
        for ids in edges.ids():
            present[ids] = True
        if present[: largest + 1].all():
            return None
        new_id = np.cumsum(present, dtype=np.int64 if limit > _INT32_MAX else np.int32)
        new_id -= 1
        for chunk in edges.chunks:
            chunk[...] = new_id[chunk]
        return np.flatnonzero(present)
    node_ids = unique_sorted(np.concatenate([unique_sorted(ids) for ids in edges.ids()]))
    for chunk in edges.chunks:
        chunk[...] = np.searchsorted(node_ids, chunk)
    return node_ids


@numba.njit(cache=True, nogil=True)
def _count_rows(pairs, degree, symmetrize, self_loops):
    for e in range(pairs.shape[0]):
        u, v = pairs[e, 0], pairs[e, 1]
        if u == v and not self_loops:
            continue
        degree[v] += 1
        if symmetrize and u != v:
            degree[u] += 1


@numba.njit(cache=True, nogil=True)
def _fill_rows(pairs, cursor, indices, symmetrize, self_loops):
    for e in range(pairs.shape[0]):
        u, v = pairs[e, 0], pairs[e, 1]
        if u == v and not self_loops:
            continue
        indices[cursor[v]] = u
        cursor[v] += 1
        if symmetrize and u != v:
            indices[cursor[u]] = v
            cursor[u] += 1


@numba.njit(cache=True, nogil=True)
def _sort_dedup_rows(indptr, indices):
    """Sort every row and drop repeated entries, compacting ``indices`` in place; ``indptr`` is
    rewritten. Returns the new entry count."""
    write = 0
    start = indptr[0]
    for row in range(indptr.shape[0] - 1):
        end = indptr[row + 1]
        indices[start:end].sort()
        indptr[row] = write
        for j in range(start, end):
            if j == start or indices[j] != indices[j - 1]:
                indices[write] = indices[j]
                write += 1
        start = end
    indptr[indptr.shape[0] - 1] = write
    return write


def csr_from_chunks(
    edges: EdgeChunks, num_nodes: int, *, symmetrize: bool, self_loops: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) with rows = destinations, rows sorted and without repeats, built from the
    chunks by a counting sort (each chunk is released as soon as it is written)."""
    degree = np.zeros(num_nodes, dtype=np.int64)
    for pairs in edges.chunks:
        _count_rows(pairs, degree, symmetrize, self_loops)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    del degree
    indices = np.empty(int(indptr[-1]), dtype=np.int64)
    cursor = indptr[:-1].copy()
    while edges.chunks:
        _fill_rows(edges.chunks.pop(0), cursor, indices, symmetrize, self_loops)
    del cursor
    kept = _sort_dedup_rows(indptr, indices)
    if kept < indices.shape[0]:
        indices.resize(kept, refcheck=False)  # shrinks the buffer in place, no second copy
    return indptr, indices
