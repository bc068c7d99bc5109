"""The engine's compiled loops (numba): transposing a worker's CSR, and one iteration's scatter and
reduce, pulled over in-edges or pushed over out-edges. A program's ``scatter`` and ``reduce`` hooks
are numba functions themselves, passed in and inlined by the compiler, so a message costs a few
nanoseconds and no per-edge array is ever built.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def minimum(a, b):
    return a if a <= b else b


@njit(cache=True)
def add(a, b):
    return a + b


@njit(cache=True)
def transpose(indptr, indices, weights, num_rows):
    """Out-edges of every table row: (outptr [num_rows + 1], outdst [E] int32, outweights [E] or
    empty), ``outdst`` the owned row each out-edge ends at, rows in order."""
    outptr = np.zeros(num_rows + 1, dtype=np.int64)
    for e in range(indices.shape[0]):
        outptr[indices[e] + 1] += 1
    for u in range(num_rows):
        outptr[u + 1] += outptr[u]
    fill = outptr[:-1].copy()
    outdst = np.empty(indices.shape[0], dtype=np.int32)
    weighted = weights.shape[0] > 0
    outweights = np.empty(indices.shape[0] if weighted else 0, dtype=np.float64)
    for v in range(indptr.shape[0] - 1):
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            outdst[fill[u]] = v
            if weighted:
                outweights[fill[u]] = weights[e]
            fill[u] += 1
    return outptr, outdst, outweights


@njit
def pull(indptr, indices, weights, values, ids, active, rows, every_row, scatter, reduce, identity, out):
    """Fold the messages of active in-neighbours into ``out`` for ``rows`` (every row when
    ``every_row``); returns the edges scanned. ``weights`` empty: weight 1 per edge."""
    weighted = weights.shape[0] > 0
    count = out.shape[0] if every_row else rows.shape[0]
    scanned = 0
    for i in range(count):
        v = i if every_row else rows[i]
        acc = identity
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if active[u]:
                acc = reduce(acc, scatter(values[u], weights[e] if weighted else 1.0, ids[u]))
        out[v] = acc
        scanned += indptr[v + 1] - indptr[v]
    return scanned


@njit
def push(outptr, outdst, outweights, values, ids, sources, scatter, reduce, out):
    """Fold the messages along the out-edges of ``sources`` into ``out``; returns the edges scanned."""
    weighted = outweights.shape[0] > 0
    scanned = 0
    for i in range(sources.shape[0]):
        u = sources[i]
        for k in range(outptr[u], outptr[u + 1]):
            v = outdst[k]
            out[v] = reduce(out[v], scatter(values[u], outweights[k] if weighted else 1.0, ids[u]))
        scanned += outptr[u + 1] - outptr[u]
    return scanned


@njit
def frontier_edges(outptr, sources):
    total = 0
    for i in range(sources.shape[0]):
        total += outptr[sources[i] + 1] - outptr[sources[i]]
    return total


@njit(cache=True)
def value(value, weight, source):
    """The default scatter: the source's shared value."""
    return value


@njit(cache=True)
def source_id(value, weight, source):
    """BFS's scatter: the source's global id (the smallest becomes the parent)."""
    return float(source)


@njit(cache=True)
def path_length(value, weight, source):
    """SSSP's scatter: the distance through the source."""
    return value + weight
