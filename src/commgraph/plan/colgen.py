"""Column generation for packing problems under a bottleneck, on a warm-started HiGHS master.

``pack`` solves the LP of Wang, Li, Liberty and Smola (SysML'18) for any family of columns with a
pricing oracle: minimise max_r sum_c alpha_c load_c[r] over alpha >= 0 with the weights of every
group of columns summing to 1 (one group for an all-reduce's spanning trees, one per root for an
all-gather's arborescences). The restricted master lives in one HiGHS model (``highspy``) for the
whole run: each round adds the new columns to it and re-solves from the previous basis, so a round
costs a few simplex pivots instead of a solve from scratch. Its duals y (resource prices, sum y = 1)
go to ``cheapest(y)``, which returns the least-priced column of every group; a column whose
reduced cost is negative joins the master. Several columns join per round: every group's, and the
columns priced at the stabilised point between the current prices and the prices of the best
bound so far (Wentges' smoothing), which damps the prices' oscillation. The sum over groups of the
least prices is a lower bound on the optimum for any y (weak duality: sum_r y_r load[r] <= max_r
load[r]), so the bound at the last prices is an optimality certificate: it meets the value when no
column can improve.

Symmetry (``classes``): when a group of automorphisms of the machine maps the problem onto itself
(identical servers, identical switch planes), resources in one orbit are one class. An optimal mix
averaged over the group is still optimal and loads every resource of a class equally, at the
class's mean load, so the master needs one row per class (the column's mean load over the class),
and its prices spread evenly over each class's resources. The caller expands the mix over the group
(:mod:`commgraph.plan.symmetry`). With every resource its own class this is the plain LP.

A second pass, as the first but every class at most the optimum, picks among the optimal mixes one
of least total load, so resources off the bottleneck carry no more than needed.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from commgraph.errors import PlanError

_TOL = 1e-9  # relative: a column improves when its reduced cost is below -_TOL x the value
_MIN_WEIGHT = 1e-10  # columns of the mix lighter than this are dropped
_SMOOTHING = 0.5  # weight of the best-bound prices in the stabilised pricing point


@dataclass(frozen=True)
class Column:
    """One member of the packed family: ``key`` says what it is (for the caller), ``load`` its load
    on every resource, ``group`` the convexity group it belongs to."""

    key: Hashable
    load: np.ndarray
    group: int = 0


@dataclass(frozen=True)
class Packing:
    """The optimum ``value`` (the busiest class's mean load; the busiest resource's once the mix is
    expanded over the symmetry), the columns of the mix with their weights (summing to 1 in every
    group), ``lower_bound``, the certificate: the least priced columns at the final prices (equal to
    ``value`` within 1e-9 relative when ``converged``), and the column-generation ``rounds``."""

    value: float
    columns: list[tuple[float, Column]]
    lower_bound: float
    converged: bool
    rounds: int


Pricing = Callable[[np.ndarray], list[Column]]


def pack(
    cheapest: Callable[[np.ndarray], Column | list[Column]],
    resources: int,
    max_columns: int = 3000,
    classes: np.ndarray | None = None,
    groups: int = 1,
) -> Packing:
    """Column generation (module docstring) over ``resources`` resources in ``classes`` (default:
    each its own) with ``groups`` convexity groups; ``cheapest(prices)`` returns the column of least
    ``prices . load`` of every group (a bare Column when there is one group).

    Raises:
        PlanError: HiGHS fails on the master, or a group gets no column.
    """
    classes = np.arange(resources) if classes is None else np.asarray(classes)

    def price(prices: np.ndarray) -> list[Column]:
        found = cheapest(prices)
        return found if isinstance(found, list) else [found]

    first = price(np.ones(resources))
    if sorted(c.group for c in first) != list(range(groups)):
        raise PlanError(
            f"the pricing oracle returned columns of groups {sorted(c.group for c in first)}, "
            f"expected one of each of {groups}"
        )
    master = _Master(classes, groups)
    for column in first:
        master.add(column)
    value, _, lower, converged, rounds = _generate(price, master, None, max_columns)
    master.cap(value)
    _, mix, _, _, more = _generate(price, master, value, max_columns)
    return Packing(value, mix, lower, converged, rounds + more)


def _generate(price: Pricing, master: _Master, cap: float | None, max_columns: int):
    """Minimise the bottleneck (``cap`` None) or, every class at most ``cap``, the total load.
    Returns (bottleneck, weighted columns, lower bound, converged, rounds)."""
    best_bound, best_prices, rounds = -np.inf, None, 0
    base = 0.0 if cap is None else 1.0
    while True:
        rounds += 1
        solution = master.solve()
        weights = base + solution.prices
        columns = price(weights)
        least = np.array([float(weights @ c.load) for c in columns])
        reduced = least - solution.convexity[[c.group for c in columns]]
        scale = max(float(np.abs(solution.convexity).max()), solution.bottleneck)
        improving = [c for c, r in zip(columns, reduced) if r < -_TOL * scale and c.key not in master.seen]
        bound = float(least.sum())
        if cap is None and bound > best_bound:
            best_bound, best_prices = bound, solution.prices
        if not improving or len(master.columns) >= max_columns:
            return (
                solution.bottleneck,
                master.mix(solution),
                min(best_bound, solution.bottleneck),
                not improving,
                rounds,
            )
        if cap is None and best_prices is not solution.prices:  # the stabilised point's columns too
            smoothed = _SMOOTHING * best_prices + (1 - _SMOOTHING) * solution.prices
            keys = {c.key for c in improving}
            for column in price(smoothed):
                if (
                    column.key not in master.seen
                    and column.key not in keys
                    and float(weights @ column.load) - solution.convexity[column.group] < -_TOL * scale
                ):
                    improving.append(column)
        for column in improving:
            master.add(column)


@dataclass(frozen=True)
class _Solution:
    weights: np.ndarray  # of the master's columns, in order
    prices: np.ndarray  # per resource: the class's dual spread evenly over its resources
    convexity: np.ndarray  # per group: the dual of its weights summing to 1
    bottleneck: float  # the busiest class's mean load


class _Master:
    """The restricted master in one HiGHS model: variable 0 is the bottleneck z, then one per
    column; one row per class (the columns' mean load on the class minus z, at most 0), then one
    per group (its columns' weights sum to 1)."""

    def __init__(self, classes: np.ndarray, groups: int):
        import highspy  # here, not at the top: importing commgraph.plan stays quick

        self.classes = classes
        self.rows = int(classes.max()) + 1
        self.size = np.bincount(classes, minlength=self.rows).astype(float)
        self.groups = groups
        self.columns: list[Column] = []
        self.totals: list[float] = []  # every column's total load: the second pass's cost
        self.seen: set = set()
        self.capped = False
        self.highs = _quiet_highs(highspy)
        inf = highspy.kHighsInf
        empty = np.zeros(0, dtype=np.int32)
        self.highs.addRows(
            self.rows,
            np.full(self.rows, -inf),
            np.zeros(self.rows),
            0,
            np.zeros(self.rows, dtype=np.int32),
            empty,
            np.zeros(0),
        )
        self.highs.addRows(
            groups, np.ones(groups), np.ones(groups), 0, np.zeros(groups, dtype=np.int32), empty, np.zeros(0)
        )
        self.highs.addCol(1.0, 0.0, inf, self.rows, np.arange(self.rows, dtype=np.int32), -np.ones(self.rows))
        self._inf = inf

    def add(self, column: Column) -> None:
        mean = np.bincount(self.classes, weights=column.load, minlength=self.rows) / self.size
        rows = np.flatnonzero(mean)
        indices = np.concatenate([rows, [self.rows + column.group]]).astype(np.int32)
        values = np.concatenate([mean[rows], [1.0]])
        total = float(column.load.sum())
        self.highs.addCol(total if self.capped else 0.0, 0.0, self._inf, indices.size, indices, values)
        self.columns.append(column)
        self.totals.append(total)
        self.seen.add(column.key)

    def cap(self, value: float) -> None:
        """The second pass: z at most ``value``, every column costing its total load."""
        count = len(self.columns) + 1
        self.highs.changeColsCost(count, np.arange(count, dtype=np.int32), np.array([0.0, *self.totals]))
        self.highs.changeColBounds(0, 0.0, value)
        self.capped = True

    def solve(self) -> _Solution:
        import highspy

        self.highs.run()
        status = self.highs.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise PlanError(f"the packing LP failed: HiGHS says {self.highs.modelStatusToString(status)}")
        solution = self.highs.getSolution()
        duals = np.asarray(solution.row_dual)
        values = np.asarray(solution.col_value)
        row_values = np.asarray(solution.row_value)[: self.rows]
        shares = np.maximum(-duals[: self.rows], 0.0) / self.size  # what one more unit on a resource costs
        return _Solution(values[1:], shares[self.classes], duals[self.rows :], float((row_values + values[0]).max()))

    def mix(self, solution: _Solution) -> list[tuple[float, Column]]:
        """The columns of positive weight, their weights scaled to sum to 1 in every group."""
        chosen = [(float(w), c) for w, c in zip(solution.weights, self.columns) if w > _MIN_WEIGHT]
        totals = np.zeros(self.groups)
        for w, c in chosen:
            totals[c.group] += w
        return [(w / totals[c.group], c) for w, c in chosen]


_BANNER = [True]  # HiGHS prints its banner to stdout once per process, when the first model is made


def _quiet_highs(highspy):
    """A silent HiGHS model. Its first construction in a process writes a banner to the C stdout,
    which would corrupt ``--json`` output: that one is made with file descriptor 1 on /dev/null."""
    if not _BANNER[0]:
        return _configured(highspy.Highs())
    sys.stdout.flush()
    saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    try:
        highs = _configured(highspy.Highs())
        ctypes.CDLL(None).fflush(None)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
        _BANNER[0] = False
    return highs


def _configured(highs):
    """Silent, without presolve (it would discard the basis) and on the primal simplex: new columns
    leave the last basis primal feasible, so each round resumes from it."""
    highs.setOptionValue("output_flag", False)
    highs.setOptionValue("presolve", "off")
    highs.setOptionValue("simplex_strategy", 4)
    return highs
