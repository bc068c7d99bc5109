"""Expert-parallel all-to-alls sent as matching sub-phases (:mod:`commgraph.plan.matching`): each
flow of an all-to-all coflow becomes one piece per sub-phase that matches its pair. A piece waits
for its sender's and its receiver's previous pieces (the first piece from a sender waits for what
the sender's flows waited for); the last piece of a pair keeps the pair's id, so what waited for
the pair waits for all of it. The phases and each piece's predecessors are computed on arrays
(compiled); only the pieces themselves are made one by one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np
from numba import njit

from commgraph.plan.matching import matching_phases
from commgraph.sim.coflow import Coflow
from commgraph.sim.dag import Task, Transfer


def copy_transfer(task: Transfer, **changes) -> Transfer:
    """``dataclasses.replace`` for transfers without its per-field reflection (millions of calls)."""
    fields = {
        "id": task.id,
        "src": task.src,
        "dst": task.dst,
        "bytes": task.bytes,
        "priority": task.priority,
        "route": task.route,
        "deps": task.deps,
        "overhead_s": task.overhead_s,
        "max_rate": task.max_rate,
    }
    fields.update(changes)
    return Transfer(**fields)


def split_all_to_alls(tasks: list[Task], coflows: list[Coflow], matching: str) -> tuple[list[Task], list[Coflow]]:
    """Every EP coflow's flows replaced by their pieces (module docstring), in place in the task
    list; the coflows point at the pieces."""
    replaced: dict[int, list[Transfer]] = {}
    for coflow in coflows:
        if coflow.kind == "ep":
            replaced.update(_pieces(tasks, coflow, matching))
    out: list[Task] = []
    position: list[range] = []
    for i, task in enumerate(tasks):
        pieces = replaced.get(i)
        if pieces is None:
            position.append(range(len(out), len(out) + 1))
            out.append(task)
        else:
            position.append(range(len(out), len(out) + len(pieces)))
            out += pieces
    new_coflows = [replace(c, flows=tuple(p for i in c.flows for p in position[i])) for c in coflows]
    return out, new_coflows


def _pieces(tasks: list[Task], coflow: Coflow, matching: str) -> dict[int, list[Transfer]]:
    """Per flow of the all-to-all ``coflow`` (by position in ``tasks``), its pieces in send order:
    one per sub-phase of ``matching``'s plan that matches its pair."""
    flows = [tasks[i] for i in coflow.flows]
    members = list(dict.fromkeys([f.src for f in flows] + [f.dst for f in flows]))
    index = {m: k for k, m in enumerate(members)}
    n = len(members)
    demand = np.zeros((n, n))
    flow_at = np.full((n, n), -1, dtype=np.int64)
    pair: dict[tuple[int, int], int] = {}
    for i, f in zip(coflow.flows, flows):
        a, b = index[f.src], index[f.dst]
        demand[a, b] += f.bytes
        flow_at[a, b] = i
        pair[(a, b)] = i
    entry = {index[f.src]: f.deps for f in flows}  # a sender's flows all wait for the same tasks
    phases = matching_phases(matching, demand)
    chain = _chain(n, phases.ptr, phases.rows, phases.cols)
    names: list[str] = []
    pieces: dict[int, list[Transfer]] = {}
    for a, i, k, size, out, into, last in zip(
        phases.rows.tolist(),
        flow_at[phases.rows, phases.cols].tolist(),
        chain.phase.tolist(),
        phases.sent.tolist(),
        chain.after_out.tolist(),
        chain.after_in.tolist(),
        chain.last.tolist(),
    ):
        base = tasks[i]
        name = base.id if last else f"{base.id}#{k}"
        if out >= 0:
            deps = (names[out], names[into]) if into >= 0 else (names[out],)
        elif into >= 0:
            deps = tuple(dict.fromkeys((*entry[a], names[into])))
        else:
            deps = tuple(dict.fromkeys(entry[a]))
        names.append(name)
        piece = Transfer(name, base.src, base.dst, size, base.priority, base.route, deps, base.overhead_s, None)
        mine = pieces.get(i)
        if mine is None:
            pieces[i] = [piece]
        else:
            mine.append(piece)
    for (a, _b), i in pair.items():
        if i not in pieces:  # nothing to send: an empty flow once the sender is ready
            pieces[i] = [copy_transfer(tasks[i], bytes=0.0, deps=entry[a])]
    return pieces


class _Chain(NamedTuple):
    """Per piece (phase order): its phase, the sender's and the receiver's previous pieces (-1:
    none), and whether it is its pair's last."""

    phase: np.ndarray
    after_out: np.ndarray
    after_in: np.ndarray
    last: np.ndarray


def _chain(n: int, ptr: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> _Chain:
    return _Chain(*_chain_arrays(n, ptr, rows, cols))


@njit(cache=True)
def _chain_arrays(n, ptr, rows, cols):  # pragma: no cover
    m = rows.shape[0]
    phase = np.empty(m, np.int64)
    after_out = np.empty(m, np.int64)
    after_in = np.empty(m, np.int64)
    last_out = np.full(n, -1, np.int64)
    last_in = np.full(n, -1, np.int64)
    for k in range(ptr.shape[0] - 1):
        for p in range(ptr[k], ptr[k + 1]):
            phase[p] = k
            after_out[p] = last_out[rows[p]]
            after_in[p] = last_in[cols[p]]
            last_out[rows[p]] = p
            last_in[cols[p]] = p
    last = np.zeros(m, np.bool_)
    seen = np.zeros((n, n), np.bool_)
    for p in range(m - 1, -1, -1):
        if not seen[rows[p], cols[p]]:
            seen[rows[p], cols[p]] = True
            last[p] = True
    return phase, after_out, after_in, last
