"""Multi-path selections (:mod:`commgraph.plan.multipath`) priced on the flow simulator: one
workload's selectors compared (:func:`compare_selectors`, a :class:`SelectorComparison`), and a
sweep over the offered rate with each selector's sustainable throughput (:func:`sweep_selectors`,
a :class:`SelectorSweep`): the highest rate whose median completion time stays under a bound."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from commgraph.errors import PlanError
from commgraph.plan.multipath.model import PathTable, SolveStats
from commgraph.plan.multipath.selectors import JITTER, Selection, make_selector, select
from commgraph.plan.multipath.workloads import Workload, load_workload
from commgraph.plan.paths import ComputeStep
from commgraph.sim import SimResult, Transfer, simulate
from commgraph.sim.dag import Compute
from commgraph.study.coflow import Progress, report_step
from commgraph.topology import Topology
from commgraph.workload.requests import RequestStream


@dataclass
class RequestTasks:
    """A selection as the simulator's DAG: ``tasks``, and ``last[t]``, the index in ``tasks`` of
    request ``t``'s last step."""

    tasks: list
    last: np.ndarray


def request_tasks(table: PathTable, stream: RequestStream, path: np.ndarray) -> RequestTasks:
    """The simulator's DAG for a selection: per request a timer that fires at its arrival, then its
    path's steps in order (transfers on an explicit route, computes on their device), after its
    predecessor's last step.

    Args:
        table: the paths.
        stream: the requests.
        path: each request's path (an index into ``table.paths``).

    Returns:
        The tasks and each request's last task.
    """
    tasks: list = []
    last = np.zeros(len(stream), dtype=np.int64)
    for t in range(len(stream)):
        p = table.paths[path[t]]
        origin = p.path.devices[0]
        tasks.append(Transfer(f"r{t}", origin, origin, 0.0, overhead_s=float(stream.arrival[t])))
        deps = (f"r{t}",) if stream.after[t] < 0 else (f"r{t}", tasks[last[stream.after[t]]].id)
        for n, step in enumerate(p.steps):
            name = f"r{t}.{n}"
            if isinstance(step, ComputeStep):
                tasks.append(Compute(name, step.device, step.seconds, deps))
            else:
                tasks.append(
                    Transfer(
                        name, step.devices[0], step.devices[-1], float(stream.nbytes[t]), route=step.devices, deps=deps
                    )
                )
            deps = (name,)
        last[t] = len(tasks) - 1
    return RequestTasks(tasks, last)


@dataclass
class Priced:
    """A selection run on the flow simulator: per-request completion time (arrival to last byte
    or compute) and the simulator's result (link use)."""

    jct: np.ndarray
    result: SimResult = field(repr=False)

    def summary(self) -> dict:
        """Mean, median, 99th percentile and maximum completion time, in seconds."""
        return {
            "mean_s": float(self.jct.mean()),
            "median_s": float(np.median(self.jct)),
            "p99_s": float(np.percentile(self.jct, 99)),
            "max_s": float(self.jct.max()),
        }


def price_selection(table: PathTable, stream: RequestStream, path: np.ndarray) -> Priced:
    """Run a selection on the flow simulator (:func:`request_tasks`).

    Args:
        table: the paths (and the devices' cores).
        stream: the requests.
        path: each request's path (an index into ``table.paths``).

    Returns:
        Each request's simulated completion time and the simulator's result.
    """
    dag = request_tasks(table, stream, path)
    result = simulate(table.topology, dag.tasks, timeline=False, cores=table.cores or None)
    return Priced(result.finish[dag.last] - stream.arrival, result)


@dataclass
class SelectorReport:
    """One selector's run on a workload: its selection on the model, and that selection priced on
    the simulator."""

    selection: Selection
    priced: Priced

    def to_dict(self, table: PathTable, stream: RequestStream, links: int = 8) -> dict:
        """The simulated completion times, the model's mean, decision time (over the requests the
        selector decided), path shares and the busiest ``links`` link directions."""
        counts = np.bincount(self.selection.path, minlength=len(table.paths))
        rows = sorted(self.priced.result.link_rows(), key=lambda row: -row["utilisation"])[:links]
        decided = self.selection.decided if self.selection.decided is not None else slice(None)
        seconds = self.selection.decide_seconds[decided]
        return {
            **self.priced.summary(),
            "model_mean_s": float(self.selection.model_jct(stream).mean()),
            "decide_us": float(seconds.mean() * 1e6) if seconds.size else 0.0,
            "paths": {_path_label(table, p): int(c) for p, c in enumerate(counts) if c},
            "links": [{"link": r["link"], "kind": r["kind"], "utilisation": r["utilisation"]} for r in rows],
        }


def _path_label(table: PathTable, path: int) -> str:
    """The path's devices, after its type's name when the table has several types."""
    name = table.paths[path].path.name
    return name if len(table.path_set.types) == 1 else f"{table.path_set.types[table.paths[path].kind].name} {name}"


@dataclass
class SelectorComparison:
    """Every selector's run on one workload (:func:`compare_selectors`).

    Args:
        topology: the host's name.
        workload: the paths and the request stream.
        reports: selector name -> its report, in the order asked.
    """

    topology: str
    workload: Workload
    reports: dict[str, SelectorReport]

    def rows(self) -> dict[str, dict]:
        """Per selector, :meth:`SelectorReport.to_dict`."""
        return {name: r.to_dict(self.workload.table, self.workload.stream) for name, r in self.reports.items()}

    def to_dict(self) -> dict:
        """Plain data: ``topology``, ``requests``, ``rate_per_s`` and ``selectors`` (:meth:`rows`)."""
        stream = self.workload.stream
        return {
            "topology": self.topology,
            "requests": len(stream),
            "rate_per_s": self.workload.rate,
            "selectors": self.rows(),
        }


def compare_selectors(
    workload: Workload,
    names: list[str],
    k: int = 8,
    progress: Progress | None = None,
    jitter: tuple[float, float] = JITTER,
    seed: int = 0,
) -> SelectorComparison:
    """Each selector run on the model, then its choices priced on the flow simulator.

    Args:
        workload: the paths and the request stream.
        names: the selectors (:data:`~commgraph.plan.multipath.selectors.SELECTORS`).
        k: the LP's horizon.
        progress: called with each selector's name when it is done, or None.
        jitter: greedy-e2e's requester-NIC delay range (seconds).
        seed: greedy-e2e's random seed.

    Returns:
        The report, its selectors in the order of ``names``.
    """
    reports = {}
    for name in names:
        selection = select(workload.table, workload.stream, make_selector(name, k, jitter, seed))
        reports[name] = SelectorReport(selection, price_selection(workload.table, workload.stream, selection.path))
        report_step(name, progress)
    return SelectorComparison(workload.table.topology.name, workload, reports)


def with_option(spec: str, key: str, value) -> str:
    """A workload spec with one option set.

    Args:
        spec: ``poisson:...`` or ``kvs:...``.
        key: the option.
        value: its new value.

    Returns:
        ``spec`` with ``key=value`` last and any earlier ``key`` dropped (for ``load``, ``rate`` too).
    """
    head, _, body = spec.partition(":")
    drop = {key, "rate"} if key == "load" else {key}
    items = [item for item in body.split(",") if item and item.partition("=")[0] not in drop]
    return f"{head}:{','.join([*items, f'{key}={value}'])}"


@dataclass
class SweepPoint:
    """One offered load (a multiple of the direct paths' capacity): per selector the simulated
    completion times of every seed's stream together, the decision times and, for a selector that
    solves a MILP, its solves over every seed (``lp_stats``)."""

    load: float
    rate: float
    jct: dict[str, list[np.ndarray]]
    decide: dict[str, list[np.ndarray]]
    lp_stats: dict[str, SolveStats] = field(default_factory=dict)

    def row(self, name: str) -> dict:
        """``name``'s figures at this load: median, mean and p99 over all seeds' requests, each
        seed's median, and the mean decision time."""
        jct = np.concatenate(self.jct[name])
        per_seed = [float(np.median(j)) for j in self.jct[name]]
        decide = np.concatenate(self.decide[name]) if self.decide[name] else np.zeros(1)
        return {
            "load": self.load,
            "rate_per_s": self.rate,
            "median_s": float(np.median(jct)),
            "mean_s": float(jct.mean()),
            "p99_s": float(np.percentile(jct, 99)),
            "median_per_seed_s": per_seed,
            "decide_us": float(decide.mean() * 1e6),
        }


def sweep(
    topology: Topology,
    spec: str,
    loads: list[float],
    names: list[str],
    k: int = 8,
    seeds: int = 1,
    jitter: tuple[float, float] = JITTER,
    progress: Progress | None = None,
) -> list[SweepPoint]:
    """``spec`` at each of ``loads`` with ``seeds`` streams each, every selector priced on the
    simulator.

    Args:
        topology: the host.
        spec: a ``poisson:`` or ``kvs:`` workload; its ``load``/``rate`` is replaced, its ``seed``
            (default 0) is the first of ``seeds`` consecutive ones.
        loads: offered loads, multiples of the direct paths' capacity (> 0).
        names: the selectors (:data:`~commgraph.plan.multipath.selectors.SELECTORS`).
        k: the LP's horizon.
        seeds: streams per load (>= 1).
        jitter: greedy-e2e's requester-NIC delay range (seconds).
        progress: called with ``load L seed S`` after each stream, or None.

    Returns:
        One point per load, in the order given.

    Raises:
        PlanError: a load <= 0, seeds < 1, or a bad spec.
    """
    if not loads or any(not load > 0 for load in loads):
        raise PlanError(f"the sweep's loads must be > 0, got {loads}")
    if seeds < 1:
        raise PlanError(f"seeds must be >= 1, got {seeds}")
    first = int(dict(item.partition("=")[::2] for item in spec.partition(":")[2].split(",") if item).get("seed", 0))
    points = []
    for load in loads:
        point = SweepPoint(load, 0.0, {n: [] for n in names}, {n: [] for n in names})
        for seed in range(first, first + seeds):
            workload = load_workload(topology, with_option(with_option(spec, "load", load), "seed", seed))
            point.rate = workload.rate
            for name, report in compare_selectors(workload, names, k, jitter=jitter, seed=seed).reports.items():
                point.jct[name].append(report.priced.jct)
                decided = report.selection.decided
                point.decide[name].append(report.selection.decide_seconds[decided])
                if report.selection.lp_stats is not None:
                    point.lp_stats[name] = point.lp_stats.get(name, SolveStats()) + report.selection.lp_stats
            report_step(f"load {load:g} seed {seed}", progress)
        points.append(point)
    return points


def sustainable(points: list[SweepPoint], name: str, bound_s: float) -> float:
    """The highest offered rate at which ``name``'s median completion time stays under ``bound_s``,
    at every lower load of the sweep too.

    Args:
        points: a sweep (:func:`sweep`), in any order.
        name: a selector of the sweep.
        bound_s: the bound on the median (seconds).

    Returns:
        Requests per second; 0 if the lowest load already fails.
    """
    best = 0.0
    for point in sorted(points, key=lambda p: p.load):
        if point.row(name)["median_s"] > bound_s:
            break
        best = point.rate
    return best


def latency_bound(points: list[SweepPoint], names: list[str]) -> float:
    """The default bound on the median completion time of a sweep (:func:`sustainable`): twice
    ``direct``'s median at the sweep's lowest load, or the best selector's there without ``direct``.

    Args:
        points: a sweep (:func:`sweep`), in any order.
        names: the sweep's selectors.

    Returns:
        The bound in seconds.
    """
    lowest = min(points, key=lambda p: p.load)
    return 2 * (
        lowest.row("direct")["median_s"] if "direct" in names else min(lowest.row(n)["median_s"] for n in names)
    )


@dataclass
class SelectorSweep:
    """A sweep's report (:func:`sweep_selectors`).

    Args:
        topology: the host's name.
        workload: the swept workload's spec.
        label: the workload described (its mix and sizes).
        names: the selectors, in the order asked.
        seeds: streams per load.
        direct_rate: the direct paths' capacity, requests per second.
        combined_rate: every path's together, requests per second.
        bound_s: the bound on the median completion time (seconds).
        points: one per load, in the order given.
    """

    topology: str
    workload: str
    label: str
    names: list[str]
    seeds: int
    direct_rate: float
    combined_rate: float
    bound_s: float
    points: list[SweepPoint]

    def rows(self) -> dict[str, list[dict]]:
        """Per selector, its :meth:`SweepPoint.row` at each load."""
        return {name: [p.row(name) for p in self.points] for name in self.names}

    def sustainable(self) -> dict[str, float]:
        """Per selector, its sustainable throughput under :attr:`bound_s` (:func:`sustainable`)."""
        return {name: sustainable(self.points, name, self.bound_s) for name in self.names}

    def to_dict(self) -> dict:
        """Plain data: the rates, the bound, ``sustainable_per_s`` and ``selectors`` (:meth:`rows`)."""
        return {
            "topology": self.topology,
            "workload": self.workload,
            "direct_rate_per_s": self.direct_rate,
            "combined_rate_per_s": self.combined_rate,
            "bound_s": self.bound_s,
            "sustainable_per_s": self.sustainable(),
            "selectors": self.rows(),
        }


def sweep_selectors(
    topology: Topology,
    spec: str,
    loads: list[float],
    names: list[str],
    k: int = 8,
    seeds: int = 1,
    jitter: tuple[float, float] = JITTER,
    bound_s: float | None = None,
    progress: Progress | None = None,
) -> SelectorSweep:
    """:func:`sweep`, with the capacities of the workload's paths and each selector's sustainable
    throughput.

    Args:
        topology, spec, loads, names, k, seeds, jitter, progress: as :func:`sweep`'s.
        bound_s: the bound on the median completion time (default: :func:`latency_bound`).

    Raises:
        PlanError: as :func:`sweep`.
    """
    reference = load_workload(topology, with_option(spec, "load", 1))
    points = sweep(topology, spec, loads, names, k, seeds, jitter, progress=progress)
    bound = latency_bound(points, names) if bound_s is None else bound_s
    return SelectorSweep(
        topology.name,
        spec,
        reference.label,
        list(names),
        seeds,
        reference.direct_rate(),
        reference.combined_rate(),
        bound,
        points,
    )
