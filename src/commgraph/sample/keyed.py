"""Counter-based neighbour draws: the same neighbours for a node wherever it is sampled.

A hop's draws for node ``v`` come from a hash of ``(key, v)`` (splitmix64), not from a generator's
running state, so the owner of ``v``'s in-edges draws, for a requester's key, exactly what the
requester would have drawn from the whole graph's structure. Sampling on a partitioned structure
(:mod:`commgraph.sample.partitioned`) and on a replicated one give the same blocks.
"""

from __future__ import annotations

import numpy as np
from numba import njit


def sample_rows(
    indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray, fanout: int, key: int
) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``rows``: ``min(fanout, degree)`` in-neighbours drawn uniformly without
    replacement (all of them with ``fanout`` -1), by :func:`keyed_slots`. Returns per-row counts
    and the sources, row after row."""
    rows = np.asarray(rows, dtype=np.int64)
    counts, sources = _keyed_slots(indptr, rows, rows, int(fanout), int(key))
    _gather_in_place(indices, sources)
    return counts, sources


def keyed_slots(
    indptr: np.ndarray, positions: np.ndarray, ids: np.ndarray, fanout: int, key: int
) -> tuple[np.ndarray, np.ndarray]:
    """The draws of :func:`sample_rows` as positions in the CSR's ``indices``: row ``i`` of the
    result is CSR row ``positions[i]``, the in-edges of node ``ids[i]``.

    The draws are counter-based: row ``i``'s come from a hash of ``(key, ids[i])`` only, not from
    a generator's state, so whoever holds a node's in-edges (in the same order) draws the same
    neighbours for it whatever else it samples. A machine that samples a remote node's hop at its
    owner therefore gets exactly the block it would have drawn from the whole structure.

    Returns:
        per-row counts ``[len(positions)]`` and the drawn positions, row after row.
    """
    return _keyed_slots(
        indptr, np.asarray(positions, dtype=np.int64), np.asarray(ids, dtype=np.int64), int(fanout), int(key)
    )


@njit(cache=True)
def row_counts(indptr, rows, fanout):
    """How many in-neighbours each of ``rows`` keeps (``min(fanout, degree)``, all with -1), and
    the largest degree among them (at least 1)."""
    counts = np.empty(rows.shape[0], np.int64)
    widest = 1
    for i in range(rows.shape[0]):
        degree = indptr[rows[i] + 1] - indptr[rows[i]]
        counts[i] = degree if (fanout < 0 or degree <= fanout) else fanout
        widest = max(widest, degree)
    return counts, widest


@njit(cache=True)
def _gather_in_place(indices, slots):
    """``slots[e] = indices[slots[e]]``: the drawn positions become the sources, without a second
    edge-sized array."""
    for e in range(slots.shape[0]):
        slots[e] = indices[slots[e]]


GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's increment


@njit(cache=True)
def mix64(z):
    """splitmix64's finaliser (Steele, Lea and Flood, 2014): a bijective 64-bit hash."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def _keyed_slots(indptr, positions, ids, fanout, key):
    n = positions.shape[0]
    counts, widest = row_counts(indptr, positions, fanout)
    out = np.empty(counts.sum(), np.int64)
    # a partial Fisher-Yates shuffle of positions 0..degree-1, undone after each row: O(fanout)
    perm = np.arange(widest)
    swaps = np.empty(max(fanout, 0), np.int64)
    base = mix64(np.uint64(key) + GOLDEN)
    at = 0
    for i in range(n):
        start = indptr[positions[i]]
        degree = indptr[positions[i] + 1] - start
        take = counts[i]
        if take == degree:
            for j in range(degree):
                out[at + j] = start + j
        else:
            state = mix64(base ^ mix64(np.uint64(ids[i])))
            for j in range(take):
                draw = mix64(state + np.uint64(j + 1) * GOLDEN) >> np.uint64(32)
                t = j + np.int64((draw * np.uint64(degree - j)) >> np.uint64(32))  # uniform in [j, degree)
                swaps[j] = t
                perm[j], perm[t] = perm[t], perm[j]
                out[at + j] = start + perm[j]
            for j in range(take - 1, -1, -1):
                t = swaps[j]
                perm[j], perm[t] = perm[t], perm[j]
        at += take
    return counts, out
