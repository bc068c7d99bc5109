"""Sending a demand matrix as a sequence of matchings (thesis-dgs-g3-hermod-leo, §5.3.2): in each
sub-phase every rank sends to at most one rank and receives from at most one, so every flow runs at
line rate and no receiver sees incast.

``alg3`` is the thesis's Algorithm 3 as written: repeatedly take the maximum-weight matching of the
residual matrix (Hungarian algorithm, ``linear_sum_assignment``), give it the weight of the smallest
positive entry among the matching's values (line 9 computes them for line 10), and subtract; each
phase empties at least one entry, so there are at most ``n^2``. Its matchings need not be perfect
on the positive entries, so it can exceed the lower bound. ``bvn`` is an exact Birkhoff-von Neumann decomposition
(Birkhoff 1946; as in Sunflow and Varys' analysis): pad the matrix with idle time until every row and
column sums to :math:`D = \\max(\\max_i \\sum_j T_{ij}, \\max_j \\sum_i T_{ij})`, then peel perfect
matchings of its support; the weights sum to exactly ``D``, so on ports of bandwidth ``B`` the
matrix is sent in ``D / B``, the lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from commgraph.errors import PlanError

_TOL = 1e-12


@dataclass(frozen=True)
class Matchings:
    """Sub-phases in order: in phase k rank ``rows[k][i]`` sends ``sent[k][i]`` real bytes to rank
    ``cols[k][i]``; the phase lasts ``weights[k]`` bytes at line rate."""

    rows: list[np.ndarray]
    cols: list[np.ndarray]
    sent: list[np.ndarray]
    weights: np.ndarray

    @property
    def length(self) -> float:
        """Bytes at line rate the sequence takes: the sum of its weights."""
        return float(self.weights.sum())


def lower_bound(demand: np.ndarray) -> float:
    """max(row sum, column sum): no schedule on unit-rate ports is shorter."""
    return float(max(demand.sum(axis=1).max(), demand.sum(axis=0).max())) if demand.size else 0.0


def _check(demand: np.ndarray) -> np.ndarray:
    demand = np.asarray(demand, dtype=np.float64)
    if demand.ndim != 2 or demand.shape[0] != demand.shape[1]:
        raise PlanError(f"a demand matrix must be square, got shape {demand.shape}")
    if not np.isfinite(demand).all() or (demand < 0).any():
        raise PlanError("a demand matrix must be finite and non-negative")
    return demand


def alg3(demand: np.ndarray) -> Matchings:
    """Algorithm 3 of the thesis (module docstring); residues below ``1e-12`` of the largest entry
    count as sent, so floating point leaves no slivers."""
    T = _check(demand).copy()
    tol = T.max(initial=0.0) * _TOL
    T[T <= tol] = 0.0
    rows, cols, sent, weights = [], [], [], []
    entries = int(np.count_nonzero(T))  # positive entries left
    while entries:
        r, c = linear_sum_assignment(-T)
        values = T[r, c]
        keep = values > 0
        weight = values[keep].min()
        rows.append(r[keep])
        cols.append(c[keep])
        sent.append(np.minimum(values[keep], weight))
        weights.append(weight)
        left = values - weight
        T[r, c] = after = np.where(left > tol, left, 0.0)
        entries -= int(np.count_nonzero(keep & (after == 0.0)))
    return Matchings(rows, cols, sent, np.array(weights))


def bvn(demand: np.ndarray) -> Matchings:
    """Birkhoff-von Neumann decomposition of the padded matrix; at most ``n^2 - 2n + 2`` phases."""
    real = _check(demand).copy()
    n = real.shape[0]
    bound = lower_bound(real)
    if bound == 0:
        return Matchings([], [], [], np.empty(0))
    padded = real + _padding(real, bound)
    tol = bound * _TOL * n
    rows, cols, sent, weights = [], [], [], []
    while padded.max() > tol:
        support = padded > tol
        r, c = linear_sum_assignment(-support.astype(np.float64))
        if not support[r, c].all():  # Birkhoff: a matrix with equal line sums has a perfect matching
            raise PlanError("Birkhoff-von Neumann: no perfect matching on the support (rounding)")
        weight = padded[r, c].min()
        moved = np.minimum(real[r, c], weight)
        keep = moved > tol
        rows.append(r[keep]), cols.append(c[keep]), sent.append(moved[keep]), weights.append(weight)
        real[r, c] -= moved
        padded[r, c] -= weight
    return Matchings(rows, cols, sent, np.array(weights))


def _padding(demand: np.ndarray, bound: float) -> np.ndarray:
    """Idle entries that raise every row and column sum to ``bound`` (north-west corner rule)."""
    need_row = bound - demand.sum(axis=1)
    need_col = bound - demand.sum(axis=0)
    pad = np.zeros_like(demand)
    i = j = 0
    n = demand.shape[0]
    while i < n and j < n:
        amount = min(need_row[i], need_col[j])
        pad[i, j] += amount
        need_row[i] -= amount
        need_col[j] -= amount
        if need_row[i] <= need_col[j]:
            i += 1
        else:
            j += 1
    return pad


MATCHERS = {"alg3": alg3, "bvn": bvn}
