"""Maximum-weight perfect matchings of small dense matrices, compiled: the shortest augmenting path
method for the linear sum assignment problem (Crouse, "On implementing 2D rectangular assignment
algorithms", IEEE Trans. Aerospace and Electronic Systems 52(4), 2016, pp. 1685-1686), with the
same scan order and tie-breaking as ``scipy.optimize.linear_sum_assignment`` on square matrices,
so it returns the same assignment whenever several are optimal (checked against scipy in the
tests), without scipy's per-call overhead (Algorithm 3 solves hundreds of thousands of 8 x 8
problems on a large MoE DAG).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def max_assignment(weight):  # pragma: no cover
    """Per row of the square ``weight``, the column it is assigned in a perfect matching of the
    largest total weight (the minimum-cost assignment of ``-weight``)."""
    n = weight.shape[0]
    cost = -weight
    u = np.zeros(n)
    v = np.zeros(n)
    col_of = np.full(n, -1, np.int64)
    row_of = np.full(n, -1, np.int64)
    path = np.full(n, -1, np.int64)
    reach = np.empty(n)
    row_seen = np.zeros(n, np.bool_)
    col_seen = np.zeros(n, np.bool_)
    open_cols = np.empty(n, np.int64)
    for row in range(n):
        base, sink = _augmenting_path(cost, u, v, path, row_of, reach, row, row_seen, col_seen, open_cols)
        u[row] += base
        for i in range(n):
            if row_seen[i] and i != row:
                u[i] += base - reach[col_of[i]]
        for j in range(n):
            if col_seen[j]:
                v[j] -= base - reach[j]
        j = sink
        while True:
            i = path[j]
            row_of[j] = i
            col_of[i], j = j, col_of[i]
            if i == row:
                break
    return col_of


@njit(cache=True, inline="always")
def _augmenting_path(cost, u, v, path, row_of, reach, i, row_seen, col_seen, open_cols):  # pragma: no cover
    """Dijkstra over reduced costs from row ``i`` to the first free column; returns the path's
    reduced length and that column (``path`` holds each reached column's predecessor row)."""
    n = cost.shape[0]
    for k in range(n):
        open_cols[k] = n - 1 - k  # scanned from the last column: a constant matrix gives the identity
        row_seen[k] = False
        col_seen[k] = False
        reach[k] = np.inf
    n_open = n
    base = 0.0
    sink = -1
    while sink == -1:
        row_seen[i] = True
        best, at = np.inf, -1
        for k in range(n_open):
            j = open_cols[k]
            r = base + cost[i, j] - u[i] - v[j]
            if r < reach[j]:
                path[j] = i
                reach[j] = r
            if reach[j] < best or (reach[j] == best and row_of[j] == -1):  # ties: prefer a free column
                best, at = reach[j], k
        base = best
        j = open_cols[at]
        if row_of[j] == -1:
            sink = j
        else:
            i = row_of[j]
        col_seen[j] = True
        n_open -= 1
        open_cols[at] = open_cols[n_open]
    return base, sink
