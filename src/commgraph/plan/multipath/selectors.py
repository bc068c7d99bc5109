"""The online path selectors (``docs/multipath.md`` describes each rule) and the run of one over
a request stream on the request-level model (:func:`select`)."""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np

from commgraph.errors import PlanError
from commgraph.plan.multipath.lp import LookaheadLP
from commgraph.plan.multipath.model import PathTable, Selector, SolveStats
from commgraph.workload.requests import RequestStream

SELECTORS = (
    "direct",
    "greedy-intra",
    "greedy-e2e",
    "toll",
    "toll-jct",
    "toll-inflight",
    "toll-bytes",
    "greedy-queue",
    "lp",
)
FAITHFUL_GREEDY = ("greedy-intra", "greedy-e2e")  # what a selector is compared against
JITTER = (3e-6, 9e-6)  # the requester NIC's delay (seconds), thesis section 6.4.1
_SLOWER = 1e-9  # a completion counts as queued when it took this fraction longer than its traverse time


class Direct(Selector):
    """Always the type's first path (the topology's route; the accelerator for a KVS GET)."""

    name = "direct"

    def choose(self, t, backlog):
        """The first candidate of request ``t``'s type."""
        return int(self.table.candidates[self.stream.kind[t]][0])


class GreedyIntra(Selector):
    """The thesis's Greedy-Intra: least latest *completed* intra-host JCT."""

    name = "greedy-intra"

    prior = 0.0  # added to T(p, r) on a path with no completion yet

    def start(self, table, stream):
        """Forget every completion; cache each type's candidates with their traverse-time terms."""
        super().start(table, stream)
        self.last = [None] * len(table.paths)
        self.options = [
            [(int(p), float(table.base_fixed[p]) + self.prior, float(table.base_per_byte[p])) for p in c]
            for c in table.candidates
        ]
        self.kinds, self.sizes = stream.kind.tolist(), stream.nbytes.tolist()

    def choose(self, t, backlog):
        """The candidate whose latest completion was fastest (an unused one: its ``T`` plus ``prior``)."""
        size, last = self.sizes[t], self.last
        best, best_cost = -1, float("inf")
        for p, fixed, per_byte in self.options[self.kinds[t]]:
            cost = last[p] if last[p] is not None else fixed + size * per_byte
            if cost < best_cost:
                best, best_cost = p, cost
        return best

    def observe(self, request, path, jct, traverse):
        """Remember ``jct`` as ``path``'s latest completion."""
        self.last[path] = jct


class GreedyE2E(GreedyIntra):
    """The thesis's Greedy-E2E: Greedy-Intra fed end-to-end times, the JCT plus the requester
    NIC's delay (uniform in ``jitter`` seconds); a path with no completion yet counts ``T`` plus
    the mean delay."""

    name = "greedy-e2e"

    def __init__(self, jitter: tuple[float, float] = JITTER, seed: int = 0):
        if not 0 <= jitter[0] <= jitter[1]:
            raise PlanError(f"the jitter must be LO-HI with 0 <= LO <= HI, got {jitter}")
        self.jitter, self.seed = jitter, seed
        self.prior = (jitter[0] + jitter[1]) / 2  # an unused path: T plus the mean delay

    def start(self, table, stream):
        """As Greedy-Intra, with the delay's random generator restarted from ``seed``."""
        super().start(table, stream)
        self.rng = np.random.default_rng(self.seed)

    def observe(self, request, path, jct, traverse):
        """Remember ``jct`` plus a requester-NIC delay drawn from ``jitter``."""
        self.last[path] = jct + float(self.rng.uniform(*self.jitter))


class GreedyQueue(Selector):
    """The least intra-host JCT from the model's live queues: the k = 1 LP, a reference."""

    name = "greedy-queue"

    def choose(self, t, backlog):
        """The candidate with the least ``Q(p) + T(p, r)`` on the model's ``backlog``."""
        size, table = self.stream.nbytes[t], self.table
        costs = [table.queue(p, backlog) + table.traverse(p, size) for p in table.candidates[self.stream.kind[t]]]
        return int(table.candidates[self.stream.kind[t]][int(np.argmin(costs))])


class Toll(Selector):
    """Equation 6.5 in plain Python over a handful of candidates (microseconds per decision), with
    the base traverse time ``T`` (``current=False``) or the latest completed JCT (``current=True``,
    ``toll-jct``)."""

    name = "toll"

    def __init__(self, current: bool = False):
        self.current = current
        self.name = "toll-jct" if current else "toll"

    def start(self, table, stream):
        """Reset every path's counter ``k_hat`` and latest completion."""
        super().start(table, stream)
        self.k_hat = [0] * len(table.paths)
        self.last = [None] * len(table.paths)
        self.options = [
            [
                (
                    int(p),
                    float(table.toll_fixed[p]),
                    float(table.toll_per_byte[p]),
                    float(table.base_fixed[p]),
                    float(table.base_per_byte[p]),
                )
                for p in c
            ]
            for c in table.candidates
        ]
        self.kinds, self.sizes = stream.kind.tolist(), stream.nbytes.tolist()

    def choose(self, t, backlog):
        """The candidate with the least ``k_hat x toll + T`` (``toll-jct``: the latest JCT for ``T``)."""
        size, k_hat, last = self.sizes[t], self.k_hat, self.last
        best, best_cost = -1, float("inf")
        for p, toll_fixed, toll_per_byte, base_fixed, base_per_byte in self.options[self.kinds[t]]:
            now = last[p] if self.current and last[p] is not None else base_fixed + size * base_per_byte
            cost = k_hat[p] * (toll_fixed + size * toll_per_byte) + now
            if cost < best_cost:
                best, best_cost = p, cost
        return best

    def observe(self, request, path, jct, traverse):
        """Grow ``path``'s ``k_hat`` on a completion slower than its traverse time, else reset it."""
        self.k_hat[path] = self.k_hat[path] + 1 if jct > traverse * (1 + _SLOWER) else 0
        self.last[path] = jct


class TollInflight(Selector):
    """The toll trade-off from the dispatcher's own requests in flight per path and the static path
    costs (``docs/multipath.md``): ``T + q b + k_hat b`` while ``q > 0``, ``T`` otherwise."""

    name = "toll-inflight"

    def start(self, table, stream):
        """No request in flight, every ``k_hat`` 0."""
        super().start(table, stream)
        self.inflight = [0] * len(table.paths)
        self.k_hat = [0] * len(table.paths)
        self.options = [
            {
                int(p): (
                    float(table.base_fixed[p]),
                    float(table.base_per_byte[p]),
                    float(table.neck_seconds[p]),
                    float(table.neck_per_byte[p]),
                )
                for p in c
            }
            for c in table.candidates
        ]
        self.kinds, self.sizes = stream.kind.tolist(), stream.nbytes.tolist()

    def _queued(self, p: int, size: float, costs: tuple[float, float, float, float]) -> tuple[float, float, float]:
        """(T, b, q): the request alone, its bottleneck occupancy, and how many of p's in-flight
        requests it would wait for at the bottleneck (p holds ``T / b``, this one included, without
        queueing)."""
        fixed, per_byte, neck_seconds, neck_per_byte = costs
        alone, neck = fixed + size * per_byte, max(neck_seconds, size * neck_per_byte)
        return alone, neck, (self.inflight[p] + 1 - alone / neck if neck > 0 else 0.0)

    def choose(self, t, backlog):
        """The candidate with the least ``T + (q + k_hat) b`` (``T`` where ``q <= 0``)."""
        size, k_hat = self.sizes[t], self.k_hat
        best, best_cost = -1, float("inf")
        for p, costs in self.options[self.kinds[t]].items():
            alone, neck, queued = self._queued(p, size, costs)
            cost = alone + (queued + k_hat[p]) * neck if queued > 0 else alone
            if cost < best_cost:
                best, best_cost = p, cost
        return best

    def decided(self, t, path):
        """Count the dispatch in flight and update ``path``'s ``k_hat``."""
        costs = self.options[self.kinds[t]].get(path)
        if costs is not None:  # k_hat: requests sent in a row into p's queue, reset when it is empty
            self.k_hat[path] = self.k_hat[path] + 1 if self._queued(path, self.sizes[t], costs)[2] > 0 else 0
        self.inflight[path] += 1

    def observe(self, request, path, jct, traverse):
        """One request fewer in flight on ``path``."""
        self.inflight[path] -= 1


class TollBytes(Selector):
    """The toll trade-off on a drain-time estimate from the bytes the dispatcher has in flight
    (``docs/multipath.md``): ``T + W + k_hat b`` while ``W > 0``, ``T`` otherwise, with ``W`` the
    wait its own dispatches leave on the path.

    It keeps ``left``, the seconds of its own work it believes are still on each link direction
    and compute server: a dispatch adds the request's bytes over each link's bandwidth (its compute
    on the least loaded server), time drains every element at one second per second, and a
    completion caps each element the request crossed at the work dispatched onto it after that
    request (what was sent before it there has drained). ``W`` reads ``left`` as the model reads
    its queues: a segment's most loaded link, a device's least loaded server. Where the model is
    the world (a single dispatcher), ``left`` is the model's backlog and the cap never binds.
    """

    name = "toll-bytes"

    def start(self, table, stream):
        """Nothing in flight, every ``k_hat`` 0."""
        super().start(table, stream)
        n = table.n_elements
        self._left, self._at = [0.0] * n, [0.0] * n  # left[e] as it was at time at[e]
        self.sent = [0.0] * n  # seconds of work ever dispatched onto each element
        self.marks: dict[int, list[tuple[int, float]]] = {}  # request -> (element, ``sent`` after it)
        self.k_hat = [0] * len(table.paths)
        self.now = 0.0
        # per path: its steps as (servers, seconds) for a compute step, ((element, seconds per byte), ...) for a
        # segment; and T's and b's terms
        self.steps = [
            [
                (g.elements.tolist(), g.seconds) if g.compute else tuple(zip(g.elements.tolist(), g.per_byte.tolist()))
                for g in groups
            ]
            for groups in table.groups
        ]
        self.costs = [
            (
                float(table.base_fixed[p]),
                float(table.base_per_byte[p]),
                float(table.neck_seconds[p]),
                float(table.neck_per_byte[p]),
            )
            for p in range(len(table.paths))
        ]
        self.kinds, self.sizes, self.arrivals = stream.kind.tolist(), stream.nbytes.tolist(), stream.arrival.tolist()

    def _level(self, e: int, now: float) -> float:
        return max(self._left[e] - (now - self._at[e]), 0.0)

    def left(self) -> np.ndarray:
        """The estimate at the latest event: seconds of its own work on each element."""
        return np.array([self._level(e, self.now) for e in range(len(self._left))])

    def _wait(self, p: int, now: float) -> float:
        """W: the estimate read along path ``p`` (a segment's busiest link, a device's idlest server)."""
        level = self._level
        return sum(
            min(level(e, now) for e in step[0]) if isinstance(step[0], list) else max(level(e, now) for e, _ in step)
            for step in self.steps[p]
        )

    def choose(self, t, backlog):
        """The candidate with the least ``T + W + k_hat b`` (``T`` where ``W = 0``)."""
        now, size, k_hat = self.arrivals[t], self.sizes[t], self.k_hat
        self.now = now
        best, best_cost = -1, float("inf")
        for p in self.table.candidates[self.kinds[t]].tolist():
            fixed, per_byte, neck_seconds, neck_per_byte = self.costs[p]
            wait = self._wait(p, now)
            cost = fixed + size * per_byte
            if wait > 0:
                cost += wait + k_hat[p] * max(neck_seconds, size * neck_per_byte)
            if cost < best_cost:
                best, best_cost = p, cost
        return best

    def decided(self, t, path):
        """Add the request's work to the estimate and update ``path``'s ``k_hat``."""
        now, size = self.arrivals[t], self.sizes[t]
        self.now = now
        self.k_hat[path] = self.k_hat[path] + 1 if self._wait(path, now) > 0 else 0
        mark = []
        for step in self.steps[path]:
            if isinstance(step[0], list):
                servers, seconds = step
                work = [(min(servers, key=lambda e: self._level(e, now)), seconds)]
            else:
                work = [(e, size * per_byte) for e, per_byte in step]
            for e, amount in work:
                if amount > 0:
                    self._left[e], self._at[e] = self._level(e, now) + amount, now
                    self.sent[e] += amount
                    mark.append((e, self.sent[e]))
        self.marks[t] = mark

    def observe(self, request, path, jct, traverse):
        """At the completion, cap the estimate on the request's elements at what was dispatched onto
        them after it."""
        done = max(self.now, self.arrivals[request] + jct)
        self.now = done
        for e, sent in self.marks.pop(request):
            self._left[e], self._at[e] = min(self._level(e, done), self.sent[e] - sent), done


def make_selector(name: str, k: int = 8, jitter: tuple[float, float] = JITTER, seed: int = 0) -> Selector:
    """A selector by name.

    Args:
        name: one of :data:`SELECTORS`.
        k: the LP's horizon (requests).
        jitter: greedy-e2e's requester-NIC delay range (seconds).
        seed: greedy-e2e's random seed.

    Returns:
        A new selector.

    Raises:
        PlanError: an unknown name, ``k < 1`` or a bad jitter.
    """
    if name == "lp":
        return LookaheadLP(k)
    if name == "greedy-e2e":
        return GreedyE2E(jitter, seed)
    kinds = {
        "direct": Direct,
        "greedy-intra": GreedyIntra,
        "greedy-queue": GreedyQueue,
        "toll": Toll,
        "toll-inflight": TollInflight,
        "toll-bytes": TollBytes,
    }
    if name == "toll-jct":
        return Toll(current=True)
    if name not in kinds:
        raise PlanError(f"unknown selector {name!r}; choose from {', '.join(SELECTORS)} or all")
    return kinds[name]()


@dataclass
class Selection:
    """One selector's choices: ``path`` per request (index into ``PathTable.paths``), the model's
    ``completion`` times, and seconds spent deciding each request (0 where a dependency decided)."""

    selector: str
    path: np.ndarray
    completion: np.ndarray
    decide_seconds: np.ndarray
    decided: np.ndarray = None  # True where the selector chose (not pinned by a dependency)
    lp_stats: SolveStats | None = None  # the run's MILP solves, for a selector that solves one

    def model_jct(self, stream: RequestStream) -> np.ndarray:
        """Each request's completion time in the model (seconds from its arrival)."""
        return self.completion - stream.arrival


def select(table: PathTable, stream: RequestStream, selector: Selector) -> Selection:
    """Run ``selector`` over the stream in arrival order on the request-level model: completions
    are reported to it when they happen, dependencies pin a request to its predecessor's path.

    Args:
        table: the paths.
        stream: the requests.
        selector: the rule; started afresh for this run.

    Returns:
        Its choices, the model's completion times, decision times and, for ``lp``, its solves.
    """
    n = len(stream)
    selector.start(table, stream)
    backlog = np.zeros(table.n_elements)
    path = np.full(n, -1, dtype=np.int64)
    completion, decide = np.zeros(n), np.zeros(n)
    chose = np.zeros(n, dtype=bool)
    pending: list[tuple[float, int]] = []
    now = 0.0
    for t in range(n):
        arrival = float(stream.arrival[t])
        while pending and pending[0][0] <= arrival:
            _, done = heapq.heappop(pending)
            selector.observe(
                done,
                int(path[done]),
                completion[done] - stream.arrival[done],
                table.traverse(int(path[done]), stream.nbytes[done]),
            )
        np.maximum(backlog - (arrival - now), 0.0, out=backlog)
        now = arrival
        before = stream.after[t]
        same = (
            table.same_route[stream.kind[t]].get(table.paths[path[before]].path.devices, -1)
            if before >= 0 and completion[before] > arrival
            else -1
        )
        if same >= 0:
            choice = same
        else:
            tick = time.perf_counter()
            choice = selector.choose(t, backlog)
            decide[t] = time.perf_counter() - tick
            chose[t] = True
        path[t] = choice
        selector.decided(t, choice)
        jct = table.queue(choice, backlog) + table.traverse(choice, stream.nbytes[t])
        completion[t] = max(arrival + jct, completion[before] if before >= 0 else 0.0)
        table.add(choice, stream.nbytes[t], backlog)
        heapq.heappush(pending, (completion[t], t))
    return Selection(selector.name, path, completion, decide, chose, selector.stats)
