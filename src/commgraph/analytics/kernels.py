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


@njit(cache=True, inline="always")
def _root(parent, x):
    while parent[x] != x:  # path halving
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@njit(cache=True, inline="always")
def _link(parent, u, v):
    """Join the trees of ``u`` and ``v``, the larger root under the smaller."""
    a, b = _root(parent, u), _root(parent, v)
    if a < b:
        parent[b] = a
    elif b < a:
        parent[a] = b


@njit(cache=True)
def _flatten(parent):
    """Point every row at its root in one pass: a row's parent is never larger than the row (the
    smaller root wins every link, path halving only shortens), so parents are flattened first."""
    for x in range(parent.shape[0]):
        parent[x] = parent[parent[x]]


@njit(cache=True)
def _largest_sampled(parent, n):
    """The most frequent root among 1,024 evenly spaced rows of the first ``n``."""
    sample = np.empty(min(n, 1024), dtype=np.int64)
    for k in range(sample.shape[0]):
        sample[k] = parent[(k * n) // sample.shape[0]]
    sample.sort()
    best, best_run, run = sample[0], 0, 0
    for k in range(sample.shape[0]):
        run = run + 1 if k > 0 and sample[k] == sample[k - 1] else 1
        if run > best_run:
            best, best_run = sample[k], run
    return best


@njit(cache=True)
def components(indptr, indices, num_rows, symmetric):
    """The root of every table row's component over the edges ``indptr``/``indices`` (rows: the
    first ``n`` table rows, a worker's owned vertices; columns: any table row), by union-find.

    With ``symmetric`` (every edge between two of the first ``n`` rows is listed at both ends, as
    in any part of a symmetric graph) it runs Afforest (Sutton, Ben-Nun and Barak, IPDPS 2018): two
    rounds linking each vertex to one more neighbour, then the rest of the edges, except, for the
    vertices already in the largest component a sample finds, their edges to other listed rows
    (those are linked from the other end). Edges to the rows beyond ``n`` (halo rows, which list
    nothing) are always linked. Returns (roots [num_rows], each the smallest row of its component;
    edges linked)."""
    parent = np.arange(num_rows)
    n = indptr.shape[0] - 1
    rounds = 2 if symmetric else 0
    linked = 0
    for r in range(rounds):
        for v in range(n):
            e = indptr[v] + r
            if e < indptr[v + 1]:
                _link(parent, v, indices[e])
                linked += 1
        _flatten(parent)
    skip = _largest_sampled(parent, n) if symmetric and n > 0 else -1
    for v in range(n):
        skipped = _root(parent, v) == skip
        for e in range(indptr[v] + rounds, indptr[v + 1]):
            u = indices[e]
            if not (skipped and u < n):
                _link(parent, v, u)
                linked += 1
    _flatten(parent)
    return parent, linked


@njit(cache=True)
def lowest_per_component(roots, ids):
    """The smallest of ``ids`` in each row's component (``roots`` from :func:`components`)."""
    low = np.full(roots.shape[0], np.iinfo(np.int64).max, dtype=np.int64)
    for x in range(roots.shape[0]):
        if ids[x] < low[roots[x]]:
            low[roots[x]] = ids[x]
    out = np.empty(roots.shape[0], dtype=np.int64)
    for x in range(roots.shape[0]):
        out[x] = low[roots[x]]
    return out
