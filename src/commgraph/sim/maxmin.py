"""Max-min fair rates with strict priority classes (progressive filling), compiled with numba.

The simulator calls :func:`reallocate` at every event, so it is the hot loop: with 100,000 flows a
run has about as many events. Flows are a CSR over resources (one resource per link direction).
Classes are served in ascending ``priority`` (0 first); each class shares fairly what the classes
before it left. Only the flows connected (through shared resources, transitively) to a changed
resource are recomputed: disjoint components of the flow-resource graph have independent max-min
allocations, so the others keep their rates exactly.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_TIE = 1e-9  # resources whose fair share is within this factor of the minimum saturate together


@njit(cache=True)
def reallocate(ptr, resources, active, priority, capacity, changed, rates, load):  # pragma: no cover
    """Recompute ``rates`` (bytes/s, in place) of the ``active`` flows that share a component
    with a ``changed`` resource, then refill ``load`` (bytes/s per resource) for all active flows.
    A flow whose resources higher classes saturate gets rate 0 until they finish (preemption)."""
    n_res = capacity.shape[0]
    n_active = active.shape[0]
    # resource -> positions in `active` (counting sort)
    start = np.zeros(n_res + 1, np.int64)
    for a in range(n_active):
        f = active[a]
        for j in range(ptr[f], ptr[f + 1]):
            start[resources[j] + 1] += 1
    for r in range(n_res):
        start[r + 1] += start[r]
    fill = start[:-1].copy()
    users = np.empty(start[n_res], np.int64)
    for a in range(n_active):
        f = active[a]
        for j in range(ptr[f], ptr[f + 1]):
            r = resources[j]
            users[fill[r]] = a
            fill[r] += 1
    # flows reachable from the changed resources
    seen_res = np.zeros(n_res, np.bool_)
    chosen = np.zeros(n_active, np.bool_)
    stack = np.empty(n_res, np.int64)
    top = 0
    for r in changed:
        if not seen_res[r]:
            seen_res[r] = True
            stack[top] = r
            top += 1
    picked = np.empty(n_active, np.int64)
    n_picked = 0
    while top > 0:
        top -= 1
        r = stack[top]
        for u in range(start[r], start[r + 1]):
            a = users[u]
            if not chosen[a]:
                chosen[a] = True
                picked[n_picked] = a
                n_picked += 1
                f = active[a]
                for j in range(ptr[f], ptr[f + 1]):
                    r2 = resources[j]
                    if not seen_res[r2]:
                        seen_res[r2] = True
                        stack[top] = r2
                        top += 1
    # progressive filling, class by class: the picked flows sorted by class, each class a run
    residual = capacity.copy()
    counts = np.zeros(n_res, np.int64)
    pending = np.empty(n_picked, np.int64)
    frozen = np.empty(n_picked, np.int64)
    flows = active[picked[:n_picked]]
    flows = flows[np.argsort(priority[flows], kind="mergesort")]
    run_start = 0
    while run_start < n_picked:
        c = priority[flows[run_start]]
        run_end = run_start
        while run_end < n_picked and priority[flows[run_end]] == c:
            run_end += 1
        n_pending = run_end - run_start
        pending[:n_pending] = flows[run_start:run_end]
        run_start = run_end
        while n_pending > 0:
            for i in range(n_pending):
                f = pending[i]
                for j in range(ptr[f], ptr[f + 1]):
                    counts[resources[j]] += 1
            level = np.inf
            for i in range(n_pending):
                f = pending[i]
                for j in range(ptr[f], ptr[f + 1]):
                    share = residual[resources[j]] / counts[resources[j]]
                    if share < level:
                        level = share
            bound = level * (1.0 + _TIE)
            kept = 0
            n_frozen = 0
            for i in range(n_pending):
                f = pending[i]
                saturated = False
                for j in range(ptr[f], ptr[f + 1]):
                    if residual[resources[j]] / counts[resources[j]] <= bound:
                        saturated = True
                        break
                if saturated:
                    rates[f] = level
                    frozen[n_frozen] = f
                    n_frozen += 1
                else:
                    pending[kept] = f  # kept <= i: never overwrites an unvisited entry
                    kept += 1
            for i in range(n_frozen):
                f = frozen[i]
                for j in range(ptr[f], ptr[f + 1]):
                    r = resources[j]
                    residual[r] = max(residual[r] - level, 0.0)
                    counts[r] = 0
            for i in range(kept):
                f = pending[i]
                for j in range(ptr[f], ptr[f + 1]):
                    counts[resources[j]] = 0
            n_pending = kept
    load[:] = 0.0
    for a in range(n_active):
        f = active[a]
        for j in range(ptr[f], ptr[f + 1]):
            load[resources[j]] += rates[f]
