"""Lower bounds on a task DAG's makespan that keep every dependency: no schedule of the same tasks
on the same routes, in any order and with any priorities, finishes sooner.

Each task gets the least time it can take (:func:`alone_seconds`): a computation its seconds; a
transfer its time alone on its route: the setup flows of its hops, then its bytes at the route's
narrowest rate (a link direction's bandwidth over the share of the flow it carries, or the flow's
rate cap), then its latency and fixed overhead. Two bounds follow (:func:`dag_floor`):

- the **critical path**: the longest chain of dependencies, each task at its least time;
- the **windows**: a resource (a link direction, a switch's forwarding limit, or a device's
  servers) does its work only between the earliest moment a task can start (its *head*: the
  longest path before it) and the latest it must end for the tasks after it to fit (its *tail*: the
  longest path after it, plus a transfer's latency after its last byte). For any head ``a`` and
  tail ``b``, the work of the tasks with head >= ``a`` and tail >= ``b`` must fit between ``a`` and
  ``makespan - b``, so makespan >= ``a + work / capacity + b`` (the one-machine relaxation with heads
  and tails; Carlier 1982). Every ``(a, b)`` pair gives a valid bound; :func:`dag_floor` tries up to
  ``THRESHOLDS`` quantiles of each, so the figure is a bound, possibly below the best one.

The longest paths run compiled (numba), one pass over the DAG each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from commgraph.sim.dag import Compute, Task, check_dag
from commgraph.sim.engine import _Flows
from commgraph.topology.model import Topology

THRESHOLDS = 24  # head and tail quantiles tried per resource


@dataclass(frozen=True)
class DagFloor:
    """``seconds``: the bound (the larger of the two); ``path_seconds``: the critical path with
    every task at its least time; ``window_seconds``: the best window bound and ``resource`` the
    resource that gives it (a link direction ``a->b``, a switch, a device; empty when none)."""

    seconds: float
    path_seconds: float
    window_seconds: float
    resource: str


@dataclass(frozen=True)
class Graph:
    """The DAG as arrays: per task its least seconds (``seconds``), its successors (CSR
    ``succ_ptr``, ``succ_idx``) and a topological ``order``; ``flows`` the simulator's flow table
    (routes, shares, sizes, capacities) that priced it."""

    seconds: np.ndarray
    succ_ptr: np.ndarray
    succ_idx: np.ndarray
    order: np.ndarray
    flows: _Flows

    def heads(self) -> np.ndarray:
        """Per task the longest path before it (the earliest it can start)."""
        return _heads(self.order, self.succ_ptr, self.succ_idx, self.seconds)

    def tails(self) -> np.ndarray:
        """Per task the longest path after it ends (the least time the DAG needs after it)."""
        return _tails(self.order, self.succ_ptr, self.succ_idx, self.seconds)

    def longest_from(self, source: int) -> np.ndarray:
        """Per task, the longest path from the start of ``source`` to the end of that task
        (``-inf`` for tasks that do not descend from it; ``source`` itself: its own seconds)."""
        return _longest_from(self.order, self.succ_ptr, self.succ_idx, self.seconds, source)


def task_graph(topology: Topology, tasks: list[Task]) -> Graph:
    """``tasks`` as a :class:`Graph` on ``topology`` (validated as :func:`~commgraph.sim.simulate`
    does)."""
    dependents = check_dag(tasks)
    flows = _Flows(topology, tasks, dependents.transfer)
    return Graph(alone_seconds(tasks, flows), dependents.ptr, dependents.idx, dependents.order, flows)


def alone_seconds(tasks: list[Task], flows: _Flows) -> np.ndarray:
    """Per task the least time it takes (module docstring): computations their seconds, transfers
    their setup, bytes at the route's narrowest rate, latency and overhead."""
    seconds = np.array([t.seconds if isinstance(t, Compute) else 0.0 for t in tasks], dtype=np.float64)
    rates = flows.capacity[flows.resources] / np.maximum(flows.weights, 1e-300)
    narrowest = np.full(flows.sizes.shape[0], np.inf)
    starts = flows.ptr[:-1][flows.lengths > 0]
    narrowest[flows.lengths > 0] = np.minimum.reduceat(rates, starts) if starts.size else narrowest[:0]
    moving = np.where(flows.sizes > 0, flows.sizes / narrowest, 0.0)
    setup = np.zeros_like(moving)
    setup_flows = np.flatnonzero(flows.owner >= 0)
    np.maximum.at(setup, flows.owner[setup_flows], moving[setup_flows])
    data = flows.owner < 0
    on = flows.task_of[data]
    seconds[on] = setup[data] + moving[data] + flows.latency[data]
    return seconds


def dag_floor(
    topology: Topology, tasks: list[Task], *, cores: dict[str, int] | None = None, graph: Graph | None = None
) -> DagFloor:
    """A lower bound on the makespan of ``tasks`` on ``topology`` under any schedule (module
    docstring); ``cores`` as :func:`~commgraph.sim.simulate` takes them; ``graph``: their
    :func:`task_graph` when already built."""
    graph = graph or task_graph(topology, tasks)
    heads, tails = graph.heads(), graph.tails()
    path = float((heads + graph.seconds + tails).max()) if len(tasks) else 0.0
    best, where = 0.0, ""
    for name, jobs, work, tail_extra in _resources(topology, tasks, graph, cores or {}):
        value = window_bound(heads[jobs], work, tails[jobs] + tail_extra)
        if value > best:
            best, where = value, name
    return DagFloor(max(path, best), path, best, where)


def window_bound(heads: np.ndarray, work: np.ndarray, tails: np.ndarray) -> float:
    """max over head ``a`` and tail ``b`` thresholds that some job passes of ``a + sum(work of jobs
    with head >= a and tail >= b) + b`` (``work`` in seconds of the resource), over up to
    :data:`THRESHOLDS` quantiles of each."""
    if not heads.size:
        return 0.0
    qs = np.linspace(0.0, 1.0, THRESHOLDS)
    a = np.unique(np.quantile(heads, qs, method="lower"))
    b = np.unique(np.quantile(tails, qs, method="lower"))
    later = heads[None, :] >= a[:, None]  # thresholds x jobs
    after = tails[None, :] >= b[:, None]
    totals = (later * work[None, :]) @ after.T  # [a, b]: work of the jobs past both
    jobs = later.astype(np.float64) @ after.T.astype(np.float64)  # [a, b]: how many; none bounds nothing
    return float(np.where(jobs > 0, a[:, None] + totals + b[None, :], 0.0).max())


def _resources(topology: Topology, tasks: list[Task], graph: Graph, cores: dict[str, int]):
    """Per resource with work: its name, its jobs (task positions), each job's seconds on it, and
    what a job still needs after its work there (a transfer's latency)."""
    flows = graph.flows
    data = np.repeat(flows.owner < 0, flows.lengths)
    entry_flow = np.repeat(np.arange(flows.sizes.shape[0]), flows.lengths)[data]
    entry_res = flows.resources[data]
    work = (flows.sizes[entry_flow] * flows.weights[data]) / flows.capacity[entry_res]
    by = np.argsort(entry_res, kind="stable")
    entry_res, entry_flow, work = entry_res[by], entry_flow[by], work[by]
    bounds = np.flatnonzero(np.diff(entry_res)) + 1
    shared = 2 * len(topology.links) + sum(d.forward_gbps is not None for d in topology.devices)
    groups = zip(np.split(entry_res, bounds), np.split(entry_flow, bounds), np.split(work, bounds))
    for res, flow, seconds in groups if entry_res.size else ():  # no transfer: no link has work
        if res[0] < shared:  # a private rate cap is the flow's own, not shared
            yield resource_name(topology, int(res[0])), flows.task_of[flow], seconds, flows.latency[flow]
    device = np.array([topology.index[t.device] if isinstance(t, Compute) else -1 for t in tasks], dtype=np.int64)
    for d in np.unique(device[device >= 0]):
        jobs = np.flatnonzero(device == d)
        servers = cores.get(topology.devices[d].id, 1)
        yield topology.devices[d].id, jobs, graph.seconds[jobs] / servers, np.zeros(jobs.size)


def resource_name(topology: Topology, r: int) -> str:
    """Resource ``r`` of the simulator: a link direction ``a->b`` or a switch's forwarding limit."""
    if r < 2 * len(topology.links):
        link = topology.links[r // 2]
        a, b = (link.a, link.b) if r % 2 == 0 else (link.b, link.a)
        return f"{a}->{b}"
    limited = [d.id for d in topology.devices if d.forward_gbps is not None]
    return f"{limited[r - 2 * len(topology.links)]} (forwarding)"


@njit(cache=True)
def _heads(order, succ_ptr, succ_idx, seconds):  # pragma: no cover
    head = np.zeros(seconds.shape[0])
    for v in order:
        end = head[v] + seconds[v]
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            j = succ_idx[k]
            if end > head[j]:
                head[j] = end
    return head


@njit(cache=True)
def _tails(order, succ_ptr, succ_idx, seconds):  # pragma: no cover
    tail = np.zeros(seconds.shape[0])
    for i in range(order.shape[0] - 1, -1, -1):
        v = order[i]
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            j = succ_idx[k]
            after = seconds[j] + tail[j]
            if after > tail[v]:
                tail[v] = after
    return tail


@njit(cache=True)
def _longest_from(order, succ_ptr, succ_idx, seconds, source):  # pragma: no cover
    start = np.full(seconds.shape[0], -np.inf)
    start[source] = 0.0
    for v in order:
        if start[v] == -np.inf:
            continue
        end = start[v] + seconds[v]
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            j = succ_idx[k]
            if end > start[j]:
                start[j] = end
    return start + seconds
