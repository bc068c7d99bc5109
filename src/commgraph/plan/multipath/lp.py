"""The k-step lookahead of LEO's path selection (equations 6.3, 6.4) as a MILP solved with HiGHS;
``docs/multipath.md`` gives the formulation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import LinearConstraint, milp
from scipy.sparse import coo_matrix

from commgraph.errors import PlanError
from commgraph.plan.multipath.model import PathTable, Selector, SolveStats
from commgraph.workload.requests import RequestStream

LP_SECONDS = 2.0  # the most one MILP solve may take; then its best solution so far is kept


@dataclass(frozen=True)
class HorizonSolve:
    """One k-step MILP: the path of its first request, and whether the solve hit the time limit."""

    path: int
    time_limited: bool


class LookaheadLP(Selector):
    """Equations 6.3-6.4 over the next ``k`` requests, solved with HiGHS (``docs/multipath.md``);
    only the first decision is kept. ``stats`` counts the solves of the current run.

    Args:
        k: the horizon, in requests (>= 1).
    """

    name = "lp"

    def __init__(self, k: int = 8):
        if k < 1:
            raise PlanError(f"the LP's horizon k must be >= 1, got {k}")
        self.k = k

    def start(self, table, stream):
        """Forget earlier choices; count this run's solves from zero."""
        super().start(table, stream)
        self.chosen = np.full(len(stream), -1, dtype=np.int64)
        self.stats = SolveStats()

    def choose(self, t, backlog):
        """Solve the MILP over requests ``t .. t + k - 1`` and keep its first decision."""
        solved = solve_horizon(self.table, self.stream, t, min(self.k, len(self.stream) - t), backlog, self.chosen)
        self.stats.solves += 1
        self.stats.time_limited += int(solved.time_limited)
        return solved.path

    def decided(self, t, path):
        """Remember ``path`` for the requests that must follow request ``t``."""
        self.chosen[t] = path


def solve_horizon(
    table: PathTable, stream: RequestStream, t: int, k: int, backlog: np.ndarray, chosen: np.ndarray
) -> HorizonSolve:
    """The first decision of the k-step MILP from request ``t`` with the model's ``backlog`` now.
    Its columns are (path, variant): a request for a device with several servers picks one (at
    step 0 the least backlogged one, where the model puts it).

    Args:
        table: the paths.
        stream: the requests; ``t .. t + k - 1`` are the horizon.
        t: the request to decide.
        k: the horizon's length (requests).
        backlog: the model's backlog per element now (seconds).
        chosen: the path already taken by each earlier request (-1 where none), for dependencies.

    Returns:
        The path of request ``t`` and whether the solve stopped at :data:`LP_SECONDS`.

    Raises:
        PlanError: HiGHS found no solution.
    """
    steps = range(t, t + k)
    cands = [table.candidates[stream.kind[s]] for s in steps]
    # in units of this request's traverse time on its first path: HiGHS misjudges microsecond-sized
    # coefficients given in seconds
    unit = max(table.traverse(int(cands[0][0]), stream.nbytes[t]), 1e-12)
    backlog = backlog / unit
    options = [
        [(int(p), v) for p in c for v in table.variants(int(p), backlog if i == 0 else None)]
        for i, c in enumerate(cands)
    ]
    elements = np.unique(np.concatenate([v_e for opts in options for _, v in opts for v_e, *_ in v]))
    col = {e: i for i, e in enumerate(elements.tolist())}
    n_x = sum(len(o) for o in options)
    x = np.cumsum([0] + [len(o) for o in options])  # x of step i, option j: x[i] + j
    b0 = n_x  # B of step i >= 1, element e: b0 + (i - 1) * len(elements) + col[e]
    n_b = (k - 1) * len(elements)
    objective = [0.0] * (n_x + n_b)
    rows, cols, vals, upper, lower = [], [], [], [], []

    def add_row(entries: list[tuple[int, float]], lo: float, hi: float) -> None:
        r = len(upper)
        for c, v in entries:
            rows.append(r), cols.append(c), vals.append(v)
        lower.append(lo), upper.append(hi)

    def new_var(cost: float) -> int:
        objective.append(cost)
        return len(objective) - 1

    def service(variant, size: float) -> list[tuple[int, float]]:
        return [
            (int(e), float(v) / unit)
            for elems, compute, per_byte, seconds in variant
            for e, v in zip(elems.tolist(), (np.full(elems.shape[0], seconds) if compute else size * per_byte))
        ]

    # ceiling[i, e]: the most backlog element e can hold at step i (everything before it on e)
    ceiling = np.zeros((k, len(elements)))
    ceiling[0] = backlog[elements]
    for i, s in enumerate(steps[:-1]):
        most = np.zeros(table.n_elements)
        for _, v in options[i]:
            total = np.zeros(table.n_elements)  # a path may cross a link direction twice (two round trips)
            for e, amount in service(v, stream.nbytes[s]):
                total[e] += amount
            np.maximum(most, total, out=most)
        ceiling[i + 1] = ceiling[i] + most[elements]
    for i, s in enumerate(steps):
        add_row([(x[i] + j, 1.0) for j in range(len(options[i]))], 1.0, 1.0)  # (6.4)
        size = stream.nbytes[s]
        for j, (p, v) in enumerate(options[i]):
            base = table.traverse(p, size) / unit
            if i == 0:
                objective[x[i] + j] = sum(float(backlog[el].max()) for el, *_ in v) + base
                continue
            objective[x[i] + j] = base
            marks = [new_var(0.0) for _ in v]
            for (el, *_), mark in zip(v, marks):
                for e in el.tolist():  # m >= B_e
                    add_row([(b0 + (i - 1) * len(elements) + col[e], 1.0), (mark, -1.0)], -np.inf, 0.0)
            big_m = sum(float(ceiling[i, [col[e] for e in el.tolist()]].max()) for el, *_ in v)
            w = new_var(1.0)  # w >= sum m - M (1 - x)
            add_row([(m, 1.0) for m in marks] + [(w, -1.0), (x[i] + j, big_m)], -np.inf, big_m)
        predecessor = stream.after[s]
        if predecessor >= 0 and stream.kind[predecessor] == stream.kind[s]:
            paths_of = np.array([p for p, _ in options[i]])
            if predecessor >= t:  # in the horizon: the same path
                i0 = predecessor - t
                before = np.array([p for p, _ in options[i0]])
                for p in np.unique(paths_of):
                    add_row(
                        [(x[i] + j, 1.0) for j in np.flatnonzero(paths_of == p)]
                        + [(x[i0] + j, -1.0) for j in np.flatnonzero(before == p)],
                        0.0,
                        0.0,
                    )
            elif i > 0:
                add_row([(x[i] + j, 1.0) for j in np.flatnonzero(paths_of == chosen[predecessor])], 1.0, 1.0)
        if i + 1 < k:  # (6.1, 6.2): B_{i+1} >= B_i + service - dt, as a lower bound
            dt = float(stream.arrival[s + 1] - stream.arrival[s]) / unit
            adds: dict[int, list[tuple[int, float]]] = {}
            for j, (_, v) in enumerate(options[i]):
                for e, amount in service(v, size):
                    adds.setdefault(e, []).append((x[i] + j, amount))
            for e, ce in col.items():
                entries = [(b0 + i * len(elements) + ce, -1.0)] + adds.get(e, [])
                if i == 0:
                    add_row(entries, -np.inf, dt - float(backlog[e]))
                else:
                    add_row(entries + [(b0 + (i - 1) * len(elements) + ce, 1.0)], -np.inf, dt)
    n = len(objective)
    matrix = coo_matrix((vals, (rows, cols)), shape=(len(upper), n)).tocsr()
    integrality = np.zeros(n)
    integrality[:n_x] = 1
    upper_bounds = np.full(n, np.inf)
    upper_bounds[:n_x] = 1.0
    upper_bounds[b0 : b0 + n_b] = ceiling[1:].ravel()
    for presolve in (True, False):  # HiGHS's presolve now and then ends in a solve error; without it, not
        result = milp(
            np.array(objective),
            constraints=LinearConstraint(matrix, lower, upper),
            integrality=integrality,
            bounds=(np.zeros(n), upper_bounds),
            options={"mip_rel_gap": 1e-6, "presolve": presolve, "time_limit": LP_SECONDS},
        )
        if result.status in (0, 1) and result.x is not None:  # 1: the time limit, with its best solution
            break
    if result.status not in (0, 1) or result.x is None:
        raise PlanError(f"the path-selection MILP failed at request {t}: {result.message}")
    return HorizonSolve(options[0][int(np.argmax(result.x[: len(options[0])]))][0], result.status == 1)
