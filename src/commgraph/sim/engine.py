"""Event-driven flow-level simulation of a task DAG on a Topology.

Each (link, direction) is a resource of the link's bandwidth, and so is each switch with a
``forward_gbps`` (one resource for everything crossing it, both ways). A transfer first pays the per-message
overhead of every link on its route that has one: on each such hop a setup flow of ``overhead x
bandwidth`` bytes occupies that link direction alone, so messages sharing a link pay their
overheads one after another (two messages on one link take 2 x overhead + bytes / bandwidth), while
the hops of one message set up concurrently. When all its setup flows are done, its data flow
crosses the whole route. Flows share resources max-min fairly within strict priority classes; after
its last byte a transfer waits the sum of its links' latencies, then finishes. Computations on one
device run one at a time (``cores`` gives a device several servers: that many at once), in the
order they become ready. Rates change only at events (a flow or task starting or ending), and then
only in the connected part of the network the event touched: flows that share no resource, even
transitively, with a changed one keep their rates, because max-min allocations of disjoint
components are independent. Events at the same instant are handled together.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from commgraph.errors import SimulationError, TopologyError
from commgraph.sim.dag import Compute, Task, Transfer, check_dag
from commgraph.sim.maxmin import reallocate
from commgraph.topology.model import Hop, Topology

_DONE = 1e-9  # a flow with this fraction of its bytes left has finished (rounding)


@dataclass
class SimResult:
    """What happened: per task start/finish (seconds), per resource busy time and bytes, and the
    utilisation change points ``(time, resource, utilisation)`` when a timeline was recorded."""

    topology: Topology
    tasks: list[Task]
    start: np.ndarray
    finish: np.ndarray
    busy_seconds: np.ndarray
    bytes_moved: np.ndarray
    timeline: tuple[np.ndarray, np.ndarray, np.ndarray] | None

    @property
    def makespan(self) -> float:
        return float(self.finish.max()) if self.finish.size else 0.0

    def resource_name(self, resource: int) -> str:
        link = self.topology.links[resource // 2]
        a, b = (link.a, link.b) if resource % 2 == 0 else (link.b, link.a)
        return f"{a}->{b}"

    def link_rows(self) -> list[dict]:
        """One row per link direction that carried traffic."""
        rows = []
        for r in np.flatnonzero(self.bytes_moved > 0):
            link = self.topology.links[r // 2]
            rows.append({
                "link": self.resource_name(int(r)), "kind": link.kind,
                "bytes": float(self.bytes_moved[r]), "busy_seconds": float(self.busy_seconds[r]),
                "utilisation": float(self.bytes_moved[r] / (link.bandwidth_gbps * 1e9 * self.makespan))
                if self.makespan > 0 else 0.0,
            })
        return rows

    def to_dict(self) -> dict:
        return {
            "topology": self.topology.name,
            "makespan": self.makespan,
            "tasks": [{"id": t.id, "type": "transfer" if isinstance(t, Transfer) else "compute",
                       "start": float(s), "finish": float(f)}
                      for t, s, f in zip(self.tasks, self.start, self.finish)],
            "links": self.link_rows(),
        }


def simulate(topology: Topology, tasks: list[Task], *, timeline: bool = True,
             incremental: bool = True, cores: dict[str, int] | None = None) -> SimResult:
    """Run ``tasks`` on ``topology`` and return when everything happened. ``timeline`` records
    every utilisation change (for plots); ``incremental=False`` recomputes all rates at every event
    (the textbook method, same results, for comparison); ``cores`` (device id -> servers, default
    1) lets a device run that many computations at once, first come first served."""
    dependents = check_dag(tasks)
    flows = _Flows(topology, tasks)
    for device, count in (cores or {}).items():
        if device not in topology.index or not (isinstance(count, int) and count >= 1):
            raise SimulationError(f"cores: {device!r} must be a device of the topology with >= 1 cores, got {count!r}")
    return _Run(topology, tasks, dependents, flows, timeline, incremental, cores or {}).run()


class _Flows:
    """The flows as a CSR over resources, plus per-flow size, latency and class. A transfer's data
    flow ``f`` is followed by its setup flows ``f + 1 .. f + setups[f]``, one per hop with a
    per-message overhead; ``owner`` maps a setup flow to its data flow (-1 for data flows)."""

    def __init__(self, topology: Topology, tasks: list[Task]):
        self.task_flow = np.full(len(tasks), -1, dtype=np.int64)
        ptr, resources, sizes, latency, priority, task_of, owner, setups = [0], [], [], [], [], [], [], []
        capacity = [link.bandwidth_gbps * 1e9 for link in topology.links for _ in (0, 1)]
        forwarding = {}  # a switch with a forwarding limit: one resource shared by all that cross it
        for device in topology.devices:
            if device.forward_gbps is not None:
                forwarding[device.id] = len(capacity)
                capacity.append(device.forward_gbps * 1e9)

        def add(route: list[int], size: float, seconds: float, task: int, data_flow: int) -> None:
            resources.extend(route)
            ptr.append(len(resources))
            sizes.append(size)
            latency.append(seconds)
            priority.append(tasks[task].priority)
            task_of.append(task)
            owner.append(data_flow)
            setups.append(0)

        for i, task in enumerate(tasks):
            if isinstance(task, Compute):
                if task.device not in topology.index:
                    _unknown(task, task.device)
                continue
            hops = _hops(topology, task)
            f = self.task_flow[i] = len(sizes)
            route = [h.resource for h in hops] + [forwarding[h.dst] for h in hops[:-1] if h.dst in forwarding]
            if task.max_rate is not None and hops:  # a private resource of that capacity
                route.append(len(capacity))
                capacity.append(task.max_rate)
            add(route, task.bytes,
                sum(topology.links[h.link].latency_us for h in hops) * 1e-6 + task.overhead_s, i, -1)
            for h in hops:
                overhead = topology.links[h.link].overhead_us * 1e-6
                if overhead > 0:
                    add([h.resource], overhead * capacity[h.resource], 0.0, i, f)
                    setups[f] += 1
        self.ptr = np.array(ptr, dtype=np.int64)
        self.resources = np.array(resources, dtype=np.int64)
        self.sizes = np.array(sizes, dtype=np.float64)
        self.latency = np.array(latency, dtype=np.float64)
        self.priority = np.array(priority, dtype=np.int64)
        self.task_of = np.array(task_of, dtype=np.int64)
        self.owner = np.array(owner, dtype=np.int64)
        self.setups = np.array(setups, dtype=np.int64)
        self.lengths = np.diff(self.ptr)
        self.capacity = np.array(capacity, dtype=np.float64)

    def route_of(self, flow: int) -> np.ndarray:
        return self.resources[self.ptr[flow] : self.ptr[flow + 1]]

    def bytes_per_resource(self) -> np.ndarray:
        """Bytes every resource carries: each data flow's size on each resource of its route."""
        data = np.repeat(self.owner < 0, self.lengths)
        weights = np.repeat(self.sizes, self.lengths)[data]
        return np.bincount(self.resources[data], weights=weights, minlength=self.capacity.shape[0])


def _unknown(task: Task, device: str) -> None:
    raise SimulationError(f"task {task.id!r}: unknown device {device!r}")


def _hops(topology: Topology, task: Transfer) -> list[Hop]:
    for device in (task.src, task.dst, *(task.route or ())):
        if device not in topology.index:
            _unknown(task, device)
    if task.route is None:
        try:
            return topology.route(task.src, task.dst)
        except TopologyError as exc:
            raise SimulationError(f"task {task.id!r}: {exc}") from None
    path = list(task.route)
    if path[0] != task.src or path[-1] != task.dst:
        raise SimulationError(f"task {task.id!r}: route must start at {task.src!r} and end at {task.dst!r}")
    hops = []
    for a, b in zip(path, path[1:]):
        links = topology.links_between(a, b)
        if not links:
            raise SimulationError(f"task {task.id!r}: route step {a} -> {b} has no link")
        k = max(links, key=lambda j: topology.links[j].bandwidth_gbps)
        hops.append(Hop(k, a, b, topology.links[k].a == a))
    return hops


class _Run:
    def __init__(self, topology, tasks, dependents, flows: _Flows, timeline: bool, incremental: bool,
                 cores: dict[str, int]):
        self.tasks, self.dependents, self.flows = tasks, dependents, flows
        n, n_flows, n_res = len(tasks), flows.sizes.shape[0], flows.capacity.shape[0]
        self.topology = topology
        self.start = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.waiting = np.array([len(t.deps) for t in tasks], dtype=np.int64)
        self.setting_up = flows.setups.copy()  # per data flow: setup flows not yet done
        self.remaining = flows.sizes.copy()
        self.rates = np.zeros(n_flows)
        self.active = np.zeros(n_flows, dtype=bool)
        self.load = np.zeros(n_res)
        self.busy = np.zeros(n_res)
        self.changed: list[np.ndarray] = []
        self.timers: list[tuple[float, int, int]] = []
        self.queues: dict[str, deque[int]] = {}
        self.device_busy: dict[str, int] = {}  # computations running per device
        self.cores = cores
        self.time = 0.0
        self.record = [] if timeline else None
        self.incremental = incremental
        self.everywhere = np.arange(n_res, dtype=np.int64)

    def run(self) -> SimResult:
        for i in np.flatnonzero(self.waiting == 0):
            self._begin(int(i))
        while True:
            if self.changed:
                self._reallocate()
            live = np.flatnonzero(self.active)
            dt_flow = np.inf
            if live.size:
                with np.errstate(divide="ignore"):
                    dt_flow = float((self.remaining[live] / self.rates[live]).min())
            t_next = min(self.time + dt_flow, self.timers[0][0] if self.timers else np.inf)
            if t_next == np.inf:
                break
            dt = t_next - self.time
            if dt > 0 and live.size:
                self.remaining[live] -= self.rates[live] * dt
                self.busy[self.load > 0] += dt
            self.time = t_next
            if live.size:
                # finished: rounding leaves a sliver of bytes, or less time than the clock can resolve
                left = self.remaining[live]
                done = live[(left <= _DONE * self.flows.sizes[live])
                            | (left <= self.rates[live] * max(self.time, 1.0) * 1e-15)]
                for f in done:
                    self.active[f] = False
                    self.remaining[f] = 0.0
                    self.changed.append(self.flows.route_of(f))
                    self._flow_done(int(f))
            while self.timers and self.timers[0][0] <= self.time:
                _, _, task = heapq.heappop(self.timers)
                self._end(task)
        unfinished = np.flatnonzero(np.isnan(self.finish))
        if unfinished.size:
            raise SimulationError(
                f"task {self.tasks[unfinished[0]].id!r} never finished: its flow gets no bandwidth"
            )
        timeline = None
        if self.record is not None:
            parts = list(zip(*self.record)) if self.record else ([], [], [])
            timeline = tuple(np.concatenate(p) if len(p) else np.empty(0) for p in parts)
        real = 2 * len(self.topology.links)  # forwarding limits and private rate caps are not links
        if timeline is not None:
            keep = timeline[1] < real
            timeline = tuple(part[keep] for part in timeline)
        return SimResult(self.topology, self.tasks, self.start, self.finish, self.busy[:real],
                         self.flows.bytes_per_resource()[:real], timeline)

    # -- task lifecycle ------------------------------------------------------------------------

    def _timer(self, when: float, task: int) -> None:
        heapq.heappush(self.timers, (when, task, task))

    def _begin(self, i: int) -> None:
        task = self.tasks[i]
        if isinstance(task, Compute):
            running = self.device_busy.get(task.device, 0)
            if running >= self.cores.get(task.device, 1):
                self.queues.setdefault(task.device, deque()).append(i)
                return
            self.device_busy[task.device] = running + 1
            self.start[i] = self.time
            self._timer(self.time + task.seconds, i)
            return
        self.start[i] = self.time
        f = int(self.flows.task_flow[i])
        if self.flows.setups[f]:
            for g in range(f + 1, f + 1 + self.flows.setups[f]):
                self._activate(g)
        else:
            self._send(f)

    def _send(self, f: int) -> None:
        """Start data flow ``f`` (its latency alone when it has no bytes or no hops)."""
        if self.flows.sizes[f] == 0 or self.flows.lengths[f] == 0:
            self._timer(self.time + self.flows.latency[f], int(self.flows.task_of[f]))
        else:
            self._activate(f)

    def _activate(self, f: int) -> None:
        self.active[f] = True
        self.changed.append(self.flows.route_of(f))

    def _flow_done(self, f: int) -> None:
        """A setup flow's end may start its data flow; a data flow's end starts its latency."""
        owner = self.flows.owner[f]
        if owner < 0:
            self._timer(self.time + self.flows.latency[f], int(self.flows.task_of[f]))
            return
        self.setting_up[owner] -= 1
        if self.setting_up[owner] == 0:
            self._send(int(owner))

    def _end(self, i: int) -> None:
        self.finish[i] = self.time
        task = self.tasks[i]
        if isinstance(task, Compute):
            self.device_busy[task.device] -= 1
            queue = self.queues.get(task.device)
            if queue:
                self._begin(queue.popleft())
        for j in self.dependents[i]:
            self.waiting[j] -= 1
            if self.waiting[j] == 0:
                self._begin(j)

    # -- rates -----------------------------------------------------------------------------------

    def _reallocate(self) -> None:
        """Recompute rates where the changed resources are (everywhere unless ``incremental``)."""
        changed = np.unique(np.concatenate(self.changed)) if self.incremental else self.everywhere
        self.changed = []
        load = np.empty_like(self.load)
        reallocate(self.flows.ptr, self.flows.resources, np.flatnonzero(self.active), self.flows.priority,
                   self.flows.capacity, changed, self.rates, load)
        if self.record is not None:
            moved = np.flatnonzero(load != self.load)
            if moved.size:
                self.record.append((np.full(moved.size, self.time), moved,
                                    load[moved] / self.flows.capacity[moved]))
        self.load = load
