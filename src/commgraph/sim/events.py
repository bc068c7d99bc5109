"""The flow-level simulator's core, compiled with numba: the event loop (task lifecycle, flows,
timers) and max-min fair rates with strict priority classes, in one call per simulation.

Routes are a CSR over resources (``ptr``, ``resources``: one resource per link direction), each entry
with the share of the flow's rate that resource carries (``weights``: 1 on a flow's one path; a
sprayed flow's ``1/c`` on each of ``c`` parallel core links), and each flow names its row
(``path``): the flows between two GPUs share one row, so the table holds a route per distinct path,
not per flow (a million flows over a hundred thousand paths). Classes
are served in ascending ``priority`` (0 first); each class shares fairly what the classes before it
left (progressive filling). Each event costs in proportion to what it touched, not to the network:

- the index resource -> active flows (:class:`~commgraph.sim.tables.Index`) is kept incrementally: a flow is inserted
  when it starts and swap-removed when it ends, in O(route length);
- resources whose capacity the others imply (``Flows.binding`` false: under packet spraying, a
  full-bisection fabric's links between switches) never limit a rate, so they neither join
  components nor take part in filling, and only count whether they are busy; flows then meet
  only at the servers' own links. Each route lists its binding resources first (up to
  ``Flows.bound``), so the work per event walks those alone; the others are visited only when
  a flow starts, ends, or its rate leaves or reaches zero;
- rates are recomputed only for the flows connected (through shared binding resources,
  transitively) to a changed resource (:func:`component`): disjoint components of the flow-resource graph have
  independent max-min allocations, so the others keep their rates exactly; scratch state is reset
  only where it was used (epoch stamps, residual capacities of the recomputed flows' resources);
- bytes are counted lazily: a flow keeps the bytes it had left when its rate last changed and the
  time of that change, and its projected finish time sits in a binary heap indexed by flow (one
  entry per flow with a rate above zero, moved in place when its rate changes: the heap holds
  the live flows alone, not an entry per rate a flow ever had), so advancing time costs nothing
  per live flow, and a flow's accounting changes only when its rate did;
- a resource's busy time grows by the spans during which its load was above zero; without a
  recorded timeline that is all a load is (whether some flow on the resource has a rate above
  zero: a count kept as rates leave or reach zero), and with one a load is re-summed only where
  the component reached.

Computations and timers (a computation's end, a transfer's latency after its last byte) share a
heap ordered by (time, task). Events at the same instant are handled together: flows first, then
timers, then one reallocation. Everything compiled lives in this one module (the tables it reads:
:mod:`commgraph.sim.tables`) because numba's disk
cache of a function is refreshed only when its own file changes, not its callees'. Every
``progress.TICK_EVENTS`` events, and at its end, the loop hands the clock and the tasks' finish times to
:func:`commgraph.sim.progress.tick` (interpreted: it prints a line on stderr in a long run).
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit, objmode

from commgraph.sim import progress
from commgraph.sim.tables import Flows, Outcome, State, Tasks, make_index, make_scratch

DONE = 1e-9  # a flow with this fraction of its bytes left has finished (rounding)
_TIE = 1e-9  # resources whose fair share is within this factor of the minimum saturate together
# a flow's state in max-min filling (Scratch.flag): its rate still rises with its class, or is set
UNFROZEN, SETTLED = 1, 0
NO_OWNER = -1  # Flows.owner of a data flow (a setup flow's is its data flow)


@njit(cache=True, inline="always")
def insert(index, path, ptr, bound, resources, f):  # pragma: no cover
    """Add flow ``f`` to the active flows of every binding resource on its route (``ptr[p]:bound[p]`` of
    its row ``p = path[f]``)."""
    first, flow, entry, count, slot, slot_ptr = index
    s = slot_ptr[f]
    p = path[f]
    for j in range(ptr[p], bound[p]):
        r = resources[j]
        k = first[r] + count[r]
        flow[k] = f
        entry[k] = s
        slot[s] = k
        count[r] += 1
        s += 1


@njit(cache=True, inline="always")
def remove(index, path, ptr, bound, resources, f):  # pragma: no cover
    """Take flow ``f`` out of its binding resources' active flows (the last of each takes its place)."""
    first, flow, entry, count, slot, slot_ptr = index
    s = slot_ptr[f]
    p = path[f]
    for j in range(ptr[p], bound[p]):
        r = resources[j]
        last = first[r] + count[r] - 1
        k = slot[s]
        flow[k] = flow[last]
        entry[k] = entry[last]
        slot[entry[k]] = k
        slot[s] = -1
        count[r] -= 1
        s += 1


@njit(cache=True)
def component(
    index, path, ptr, bound, resources, binding, seeds, n_seeds, epoch, res_mark, flow_mark, touched, picked
):  # pragma: no cover
    """The active flows reachable from ``seeds[:n_seeds]`` through shared ``binding`` resources
    (a flow's are ``ptr[p]:bound[p]`` of its row ``p = path[f]``), into ``picked``; returns how many.
    ``touched`` is the queue of resources to visit; marks are ``epoch`` stamps."""
    first, flow, count = index.first, index.flow, index.count
    n_touched = 0
    for s in range(n_seeds):
        r = seeds[s]
        if binding[r] and res_mark[r] != epoch:
            res_mark[r] = epoch
            touched[n_touched] = r
            n_touched += 1
    n_picked = 0
    done = 0  # touched[:done] have had their active flows visited
    while done < n_touched:
        r = touched[done]
        done += 1
        for u in range(first[r], first[r] + count[r]):
            f = flow[u]
            if flow_mark[f] != epoch:
                flow_mark[f] = epoch
                picked[n_picked] = f
                n_picked += 1
                p = path[f]
                for j in range(ptr[p], bound[p]):
                    r2 = resources[j]
                    if res_mark[r2] != epoch:
                        res_mark[r2] = epoch
                        touched[n_touched] = r2
                        n_touched += 1
    return n_picked


@njit(cache=True)
def fill(path, ptr, bound, resources, weights, priority, capacity, flows, rates, index, scratch):  # pragma: no cover
    """Max-min fair ``rates`` (bytes/s, in place) of ``flows``, which hold every active flow on
    their binding resources (``ptr[p]:bound[p]`` of each flow's row ``p = path[f]``; ``index``: resource -> active
    flows; the other resources are left out), by progressive filling class by class:
    all unfrozen flows' rates rise together, a resource consuming the sum of its flows' ``weights``
    per unit of rate, and a resource's flows freeze when it fills. A flow whose resources higher
    classes saturate gets rate 0 until they finish (preemption).

    Each round finds the fullest resources among those with unfrozen flows, freezes their flows
    and takes the frozen flows' weights off their resources: a flow is counted in and out once,
    so a class costs its flows' route entries plus, per round, the resources still in play (not
    the flows' entries every round). ``scratch`` (:class:`Scratch`) must hold zero ``counts``,
    ``unfrozen`` and ``flag`` (:data:`SETTLED`) on these flows and resources, and is left so."""
    residual, counts, unfrozen, flag, live, saturated, frozen = scratch
    first, flow, count = index.first, index.flow, index.count
    n = flows.shape[0]
    for i in range(n):
        p = path[flows[i]]
        for j in range(ptr[p], bound[p]):
            residual[resources[j]] = capacity[resources[j]]
    order = flows
    for i in range(1, n):
        if priority[flows[i]] != priority[flows[0]]:  # several classes: stably by class
            order = flows[np.argsort(priority[flows], kind="mergesort")]
            break
    run_start = 0
    while run_start < n:
        c = priority[order[run_start]]
        run_end = run_start
        n_live = 0
        while run_end < n and priority[order[run_end]] == c:
            f = order[run_end]
            flag[f] = UNFROZEN
            p = path[f]
            for j in range(ptr[p], bound[p]):
                r = resources[j]
                if unfrozen[r] == 0:
                    live[n_live] = r
                    n_live += 1
                unfrozen[r] += 1
                counts[r] += weights[j]
            run_end += 1
        pending = run_end - run_start
        run_start = run_end
        while pending > 0:
            level = np.inf
            for i in range(n_live):
                share = residual[live[i]] / counts[live[i]]
                if share < level:
                    level = share
            tied = level * (1.0 + _TIE)
            n_saturated = 0
            for i in range(n_live):
                if residual[live[i]] / counts[live[i]] <= tied:
                    saturated[n_saturated] = live[i]
                    n_saturated += 1
            n_frozen = 0
            for i in range(n_saturated):
                r = saturated[i]
                for u in range(first[r], first[r] + count[r]):
                    f = flow[u]
                    if flag[f] == UNFROZEN:
                        flag[f] = SETTLED
                        rates[f] = level
                        frozen[n_frozen] = f
                        n_frozen += 1
            for i in range(n_frozen):
                p = path[frozen[i]]
                for j in range(ptr[p], bound[p]):
                    r = resources[j]
                    residual[r] = max(residual[r] - level * weights[j], 0.0)
                    unfrozen[r] -= 1
                    counts[r] = counts[r] - weights[j] if unfrozen[r] > 0 else 0.0
            pending -= n_frozen
            kept = 0
            for i in range(n_live):
                if unfrozen[live[i]] > 0:
                    live[kept] = live[i]
                    kept += 1
            n_live = kept


def simulate_events(flows: Flows, tasks: Tasks, incremental: bool, record: bool) -> Outcome:
    """Run every task from time 0 until nothing is left to happen; ``incremental=False``
    recomputes every active flow's rate at every event; ``record`` keeps the utilisation change
    points."""
    n_flows, n_res, n_tasks = flows.sizes.shape[0], flows.capacity.shape[0], tasks.compute.shape[0]
    n_dev = tasks.cores.shape[0]
    state = State(
        time=np.zeros(1),
        rates=np.zeros(n_flows),
        left=flows.sizes.copy(),
        since=np.zeros(n_flows),
        due=np.empty(n_flows),
        due_flow=np.empty(n_flows, np.int64),
        due_at=np.full(n_flows, -1, np.int64),
        due_count=np.zeros(1, np.int64),
        setting_up=flows.setups.copy(),
        load=np.zeros(n_res),
        positive=np.zeros(n_res, np.int64),
        busy=np.zeros(n_res),
        busy_since=np.zeros(n_res),
        start=np.full(n_tasks, np.nan),
        finish=np.full(n_tasks, np.nan),
        waiting=tasks.waiting.copy(),
        running=np.zeros(n_dev, np.int64),
        queue=np.empty(tasks.queue_ptr[-1], np.int64),
        queue_head=tasks.queue_ptr[:-1].copy(),
        queue_tail=tasks.queue_ptr[:-1].copy(),
        changed=np.zeros(n_res + 1, np.int64),
        changed_mark=np.zeros(n_res, np.int64),
        marks=np.zeros(1, np.int64),
        res_mark=np.zeros(n_res, np.int64),
        flow_mark=np.zeros(n_flows, np.int64),
        touched=np.empty(n_res, np.int64),
        picked=np.empty(n_flows, np.int64),
        old_rates=np.empty(n_flows),
        scratch=make_scratch(n_res, n_flows),
    )
    index = make_index(flows)
    return Outcome(state.start, state.finish, state.busy, *_run(flows, tasks, index, state, incremental, record))


@njit(cache=True)
def _run(flows, tasks, index, state, incremental, record):  # pragma: no cover
    """The event loop; returns the recorded utilisation change points (time, resource, value)."""
    timers = [(0.0, 0)]
    timers.pop()
    rec_t, rec_r, rec_u = np.empty(0), np.empty(0, np.int64), np.empty(0)
    n_rec = np.int64(0)  # not a literal: _reallocate is compiled for one type of it, not two
    if record:
        rec_t, rec_r, rec_u = np.empty(1024), np.empty(1024, np.int64), np.empty(1024)
    rates, left, since, sizes = state.rates, state.left, state.since, flows.sizes
    due, due_flow = state.due, state.due_flow
    for i in range(tasks.compute.shape[0]):
        if state.waiting[i] == 0:
            _begin(flows, tasks, index, state, timers, i)
    events = 0
    while True:
        events += 1
        if events & (progress.TICK_EVENTS - 1) == 0:
            _tick(state.time[0], state.finish)
        if state.changed[0] > 0:
            n_rec, rec_t, rec_r, rec_u = _reallocate(
                flows, index, state, incremental, record, n_rec, rec_t, rec_r, rec_u
            )
        t_next = np.inf
        if state.due_count[0]:
            t_next = due[0]
        if timers and timers[0][0] < t_next:
            t_next = timers[0][0]
        if t_next == np.inf:
            break
        now = state.time[0] = max(t_next, state.time[0])
        while state.due_count[0]:
            when, f = due[0], due_flow[0]
            bytes_left = left[f] - rates[f] * (now - since[f])
            # finished: its projected end, a sliver of bytes left, or less time than the clock resolves
            if not (when <= now or bytes_left <= DONE * sizes[f] or bytes_left <= rates[f] * max(now, 1.0) * 1e-15):
                break
            _flow_done(flows, tasks, index, state, timers, f)
        while timers and timers[0][0] <= now:
            _end(flows, tasks, index, state, timers, heapq.heappop(timers)[1])
    _tick(state.time[0], state.finish)
    return rec_t[:n_rec], rec_r[:n_rec], rec_u[:n_rec]


@njit(cache=True)
def _tick(now, finish):  # pragma: no cover
    """Hand the clock and the finish times to :func:`commgraph.sim.progress.tick` (interpreted)."""
    with objmode():
        progress.tick(now, finish)


@njit(cache=True, inline="always")
def _begin(flows, tasks, index, state, timers, i):  # pragma: no cover
    """Task ``i`` is ready: a computation starts or queues for a server; a transfer starts its
    setup flows, or its data flow when it has none."""
    now = state.time[0]
    if tasks.compute[i]:
        d = tasks.device[i]
        if state.running[d] >= tasks.cores[d]:
            state.queue[state.queue_tail[d]] = i
            state.queue_tail[d] += 1
            return
        state.running[d] += 1
        state.start[i] = now
        heapq.heappush(timers, (now + tasks.seconds[i], i))
        return
    state.start[i] = now
    f = tasks.flow[i]
    if flows.setups[f]:
        for g in range(f + 1, f + 1 + flows.setups[f]):
            _activate(flows, index, state, g)
    else:
        _send(flows, index, state, timers, f)


@njit(cache=True, inline="always")
def _send(flows, index, state, timers, f):  # pragma: no cover
    """Start data flow ``f`` (its latency alone when it has no bytes or no hops)."""
    p = flows.path[f]
    if flows.sizes[f] == 0 or flows.ptr[p + 1] == flows.ptr[p]:
        heapq.heappush(timers, (state.time[0] + flows.latency[f], flows.task_of[f]))
    else:
        _activate(flows, index, state, f)


@njit(cache=True, inline="always")
def _activate(flows, index, state, f):  # pragma: no cover
    insert(index, flows.path, flows.ptr, flows.bound, flows.resources, f)
    state.left[f] = flows.sizes[f]
    state.since[f] = state.time[0]
    state.rates[f] = 0.0
    _mark_changed(flows, state, f)


@njit(cache=True, inline="always")
def _mark_changed(flows, state, f):  # pragma: no cover
    p = flows.path[f]
    for j in range(flows.ptr[p], flows.ptr[p + 1]):
        r = flows.resources[j]
        if state.changed_mark[r] != state.marks[0] + 1:  # stamped for the next reallocation
            state.changed_mark[r] = state.marks[0] + 1
            state.changed[0] += 1
            state.changed[state.changed[0]] = r


@njit(cache=True, inline="always")
def _flow_done(flows, tasks, index, state, timers, f):  # pragma: no cover
    """Flow ``f`` sent its last byte: a setup flow's end may start its data flow; a data flow's
    end starts its latency."""
    remove(index, flows.path, flows.ptr, flows.bound, flows.resources, f)
    _mark_changed(flows, state, f)
    if state.rates[f] > 0.0:
        _count_positive(flows, state, f, -1)
    state.rates[f] = 0.0
    state.left[f] = 0.0
    _undue(state, f)
    owner = flows.owner[f]
    if owner == NO_OWNER:
        heapq.heappush(timers, (state.time[0] + flows.latency[f], flows.task_of[f]))
        return
    state.setting_up[owner] -= 1
    if state.setting_up[owner] == 0:
        _send(flows, index, state, timers, owner)


@njit(cache=True)
def _set_due(state, f, when):  # pragma: no cover
    """Flow ``f`` is projected to finish at ``when``: its heap entry, made or moved there."""
    k = state.due_at[f]
    if k < 0:
        k = state.due_count[0]
        state.due_count[0] += 1
    state.due_flow[k], state.due[k] = f, when
    _sift(state, k)


@njit(cache=True)
def _undue(state, f):  # pragma: no cover
    """Flow ``f`` has no projected finish (its rate is zero, or it finished): its entry leaves
    the heap, the last entry taking its place."""
    k = state.due_at[f]
    if k < 0:
        return
    state.due_at[f] = -1
    state.due_count[0] -= 1
    last = state.due_count[0]
    if k != last:
        state.due_flow[k], state.due[k] = state.due_flow[last], state.due[last]
        _sift(state, k)


@njit(cache=True, inline="always")
def _sift(state, k):  # pragma: no cover
    """Move heap entry ``k`` up or down to its place: entries ordered by (projected finish, flow),
    the order of ``heapq`` on ``(time, flow)`` tuples."""
    due, flow, at, n = state.due, state.due_flow, state.due_at, state.due_count[0]
    f, when = flow[k], due[k]
    while k > 0:
        up = (k - 1) >> 1
        if due[up] < when or (due[up] == when and flow[up] < f):
            break
        flow[k], due[k] = flow[up], due[up]
        at[flow[k]] = k
        k = up
    while True:
        down = 2 * k + 1
        if down >= n:
            break
        if down + 1 < n and (due[down + 1] < due[down] or (due[down + 1] == due[down] and flow[down + 1] < flow[down])):
            down += 1
        if when < due[down] or (when == due[down] and f < flow[down]):
            break
        flow[k], due[k] = flow[down], due[down]
        at[flow[k]] = k
        k = down
    flow[k], due[k] = f, when
    at[f] = k


@njit(cache=True, inline="always")
def _count_positive(flows, state, f, step):  # pragma: no cover
    """Flow ``f``'s rate left or reached zero: count it in or out of its resources."""
    p = flows.path[f]
    for j in range(flows.ptr[p], flows.ptr[p + 1]):
        state.positive[flows.resources[j]] += step


@njit(cache=True, inline="always")
def _end(flows, tasks, index, state, timers, i):  # pragma: no cover
    """Task ``i`` finished: its server takes the next queued computation, and its dependents
    whose last dependency it was begin."""
    state.finish[i] = state.time[0]
    if tasks.compute[i]:
        d = tasks.device[i]
        state.running[d] -= 1
        if state.queue_head[d] < state.queue_tail[d]:
            state.queue_head[d] += 1
            _begin(flows, tasks, index, state, timers, state.queue[state.queue_head[d] - 1])
    for k in range(tasks.dep_ptr[i], tasks.dep_ptr[i + 1]):
        j = tasks.dep_idx[k]
        state.waiting[j] -= 1
        if state.waiting[j] == 0:
            _begin(flows, tasks, index, state, timers, j)


@njit(cache=True)
def _reallocate(flows, index, state, incremental, record, n_rec, rec_t, rec_r, rec_u):  # pragma: no cover
    """Recompute rates on the component of the changed resources (of every resource unless
    ``incremental``); re-time the flows whose rate moved and re-sum their resources' loads."""
    now = state.time[0]
    state.marks[0] += 1
    epoch = state.marks[0]
    ptr, resources, capacity = flows.ptr, flows.resources, flows.capacity
    rates, left, since, res_mark, touched = (
        state.rates,
        state.left,
        state.since,
        state.res_mark,
        state.touched,
    )
    load, busy, busy_since, first, active, count = (
        state.load,
        state.busy,
        state.busy_since,
        index.first,
        index.flow,
        index.count,
    )
    if incremental:
        seeds, n_seeds = state.changed[1:], state.changed[0]
    else:
        seeds, n_seeds = np.arange(flows.capacity.shape[0]), flows.capacity.shape[0]
    binding, bound, path = flows.binding, flows.bound, flows.path
    n_picked = component(
        index,
        path,
        ptr,
        bound,
        resources,
        binding,
        seeds,
        n_seeds,
        epoch,
        res_mark,
        state.flow_mark,
        touched,
        state.picked,
    )
    state.changed[0] = 0
    picked = state.picked[:n_picked]
    old = state.old_rates[:n_picked]
    old[:] = rates[picked]
    fill(path, ptr, bound, resources, flows.weights, flows.priority, capacity, picked, rates, index, state.scratch)
    n_moved = 0  # resources whose load may have moved: the changed ones and those of re-rated flows
    for s in range(n_seeds):
        res_mark[seeds[s]] = -epoch
        touched[n_moved] = seeds[s]
        n_moved += 1
    for k in range(n_picked):
        f = picked[k]
        rate = rates[f]
        if rate != old[k]:
            # a recorded load moves with every rate on its binding resources; an unrecorded one (whether
            # a flow on the resource has a rate above zero) only when a rate leaves or reaches zero
            p = path[f]
            end = bound[p] if record else ptr[p]
            if (rate > 0.0) != (old[k] > 0.0):
                _count_positive(flows, state, f, 1 if rate > 0.0 else -1)
                end = ptr[p + 1]
            left[f] -= old[k] * (now - since[f])
            since[f] = now
            if rate > 0:
                _set_due(state, f, now + left[f] / rate)
            else:
                _undue(state, f)
            for j in range(ptr[p], end):
                r = resources[j]
                if res_mark[r] != -epoch:
                    res_mark[r] = -epoch
                    touched[n_moved] = r
                    n_moved += 1
    moved = touched[:n_moved]
    if record:  # ascending, as the timeline lists them (each resource's load is its own otherwise)
        moved = np.sort(moved)
    for r in moved:
        total = 0.0
        if record and binding[r]:
            for u in range(first[r], first[r] + count[r]):
                f = active[u]  # its slot's route entry: the same offset into its row
                total += rates[f] * flows.weights[ptr[path[f]] + index.entry[u] - index.slot_ptr[f]]
        else:  # only whether it is busy
            total = 1.0 if state.positive[r] > 0 else 0.0
        was = load[r]
        if total == was:
            continue
        if was == 0.0:
            busy_since[r] = now
        elif total == 0.0:
            busy[r] += now - busy_since[r]
        load[r] = total
        if record:
            if n_rec == rec_t.shape[0]:
                rec_t, rec_r, rec_u = _grow(rec_t), _grow(rec_r), _grow(rec_u)
            rec_t[n_rec], rec_r[n_rec], rec_u[n_rec] = now, r, total / capacity[r]
            n_rec += 1
    return n_rec, rec_t, rec_r, rec_u


@njit(cache=True)
def _grow(a):  # pragma: no cover
    b = np.empty(2 * a.shape[0], a.dtype)
    b[: a.shape[0]] = a
    return b
