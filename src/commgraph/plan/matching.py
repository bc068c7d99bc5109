"""Sending a demand matrix as a sequence of matchings (thesis-dgs-g3-hermod-leo, §5.3.2): in each
sub-phase every rank sends to at most one rank and receives from at most one, so every flow runs at
line rate and no receiver sees incast.

``alg3`` is the thesis's Algorithm 3 as written: repeatedly take the maximum-weight matching of the
residual matrix (a shortest augmenting path assignment, compiled: :mod:`commgraph.plan.assignment`,
scipy's ``linear_sum_assignment`` choice among optimal matchings), give it the weight of the smallest
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
from typing import NamedTuple

import numpy as np
from numba import njit
from scipy.optimize import linear_sum_assignment

from commgraph.errors import PlanError
from commgraph.plan.assignment import max_assignment

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
    phases = alg3_phases(_check(demand))
    spans = [slice(a, b) for a, b in zip(phases.ptr[:-1], phases.ptr[1:])]
    rows, cols, sent = ([x[k] for k in spans] for x in (phases.rows, phases.cols, phases.sent))
    return Matchings(rows, cols, sent, phases.weights)


class Phases(NamedTuple):
    """Matching sub-phases as flat arrays: phase ``k`` is entries ``ptr[k]:ptr[k + 1]`` of ``rows``,
    ``cols`` and ``sent`` (as in :class:`Matchings`) and lasts ``weights[k]``."""

    ptr: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    sent: np.ndarray
    weights: np.ndarray


def alg3_phases(demand: np.ndarray) -> Phases:
    """:func:`alg3`'s phases as flat arrays, compiled (``demand`` checked by the caller)."""
    return Phases(*_alg3(np.array(demand, dtype=np.float64)))


@njit(cache=True)
def _alg3(T):  # pragma: no cover
    """Algorithm 3 on the residual ``T`` (consumed): each phase the maximum-weight matching
    (:func:`commgraph.plan.assignment.max_assignment`, scipy's choice among optimal ones), weighted
    by its smallest positive entry."""
    n = T.shape[0]
    tol = max(T.max(), 0.0) * _TOL if T.size else 0.0
    entries = 0
    for i in range(n):
        for j in range(n):
            if T[i, j] <= tol:
                T[i, j] = 0.0
            else:
                entries += 1
    ptr = [0]
    rows, cols, sent, weights = [0], [0], [0.0], [0.0]
    rows.pop(), cols.pop(), sent.pop(), weights.pop()
    while entries:
        match = max_assignment(T)
        weight = np.inf
        for i in range(n):
            if 0.0 < T[i, match[i]] < weight:
                weight = T[i, match[i]]
        for i in range(n):
            value = T[i, match[i]]
            if value > 0.0:
                rows.append(i)
                cols.append(match[i])
                sent.append(min(value, weight))
                left = value - weight
                T[i, match[i]] = left if left > tol else 0.0
                if T[i, match[i]] == 0.0:
                    entries -= 1
        ptr.append(len(rows))
        weights.append(weight)
    return (
        np.array(ptr, dtype=np.int64),
        np.array(rows, dtype=np.int64),
        np.array(cols, dtype=np.int64),
        np.array(sent, dtype=np.float64),
        np.array(weights, dtype=np.float64),
    )


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


def matching_phases(method: str, demand: np.ndarray) -> Phases:
    """The sub-phases of ``method`` (a key of :data:`MATCHERS`) for ``demand``, as flat arrays."""
    if method == "alg3":
        return alg3_phases(_check(demand))
    plan = MATCHERS[method](demand)
    ptr = np.zeros(len(plan.rows) + 1, dtype=np.int64)
    np.cumsum([r.shape[0] for r in plan.rows], out=ptr[1:])
    rows, cols, sent = (
        np.concatenate(x).astype(t) if x else np.empty(0, dtype=t)
        for x, t in ((plan.rows, np.int64), (plan.cols, np.int64), (plan.sent, np.float64))
    )
    return Phases(ptr, rows, cols, sent, plan.weights)
