"""One coflow scheduler's run of a DAG, and the bounds a comparison sets beside it.

- :func:`run_schedule`: the DAG under one scheduler (:func:`~commgraph.plan.coflow.schedule`),
  simulated; :class:`Outcome` summarises it.
- :func:`iteration_seconds`: the steady-state iteration time of several iterations back to back.
- :func:`free_communication` (an oracle): the same DAG with every transfer instant, so no
  scheduler's iteration is shorter.
- :func:`link_bound`: the busiest link direction's bytes per iteration over its speed, a bound over
  many iterations.
- :func:`ceiling`: what a baseline leaves to gain against both;
  :func:`headroom_reached`: the share of it a scheduler reaches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from commgraph.plan.coflow import Schedule, schedule
from commgraph.sim import SimResult, simulate
from commgraph.sim.coflow import Coflow, coflow_times
from commgraph.sim.dag import Task, Transfer
from commgraph.sim.progress import stage
from commgraph.topology.model import Topology

Progress = Callable[[str], None]  # a study's progress callback: called with each step's label as it ends


def report_step(label: str, progress: Progress | None) -> None:
    """Report the step ``label`` done to ``progress`` (when given)."""
    if progress is not None:
        progress(label)


@dataclass
class Outcome:
    """One scheduler's simulated iteration."""

    schedule: Schedule
    result: SimResult
    coflow_start: np.ndarray
    coflow_finish: np.ndarray

    def summary(self, tokens: int, ends: list[list[str]] | None = None) -> dict:
        """The ``--json`` entry: iteration time (steady state when ``ends`` names several
        iterations' last computations: :func:`iteration_seconds`), throughput, per coflow type its
        completion times, and how busy the network links were."""
        seconds = iteration_seconds(self.result, ends)
        cct = self.coflow_finish - self.coflow_start
        kinds = np.array([c.kind for c in self.schedule.coflows])
        coflows = {}
        for kind in dict.fromkeys(kinds.tolist()):
            mine = cct[kinds == kind]
            size = sum(self.schedule.tasks[i].bytes for c in self.schedule.coflows if c.kind == kind for i in c.flows)
            coflows[kind] = {
                "count": int(mine.size),
                "bytes": float(size),
                "mean_seconds": float(mine.mean()),
                "median_seconds": float(np.median(mine)),
                "max_seconds": float(mine.max()),
            }
        network = [row["utilisation"] for row in self.result.link_rows() if row["kind"] in ("infiniband", "ethernet")]
        return {
            "iteration_seconds": seconds,
            "tokens_per_second": tokens / seconds if seconds > 0 else 0.0,
            "coflows": coflows,
            "classes": self.schedule.classes,
            "network_utilisation": {
                "mean": float(np.mean(network)) if network else 0.0,
                "max": float(np.max(network)) if network else 0.0,
            },
        }


def run_schedule(
    name: str,
    tasks: list[Task],
    coflows: list[Coflow],
    topology: Topology,
    *,
    interleaved: bool = False,
    matching: str | None = None,
    timeline: bool = False,
    progress: Progress | None = None,
) -> Outcome:
    """Schedule the DAG with ``name`` and simulate it (each a :mod:`~commgraph.sim.progress` stage
    on stderr, and a step ``schedule NAME`` / ``simulate NAME`` reported to ``progress``)."""
    stage(f"scheduling {name}")
    plan = schedule(name, tasks, coflows, topology, interleaved=interleaved, matching=matching)
    report_step(f"schedule {name}", progress)
    stage(f"simulating {name}")
    result = simulate(topology, plan.tasks, timeline=timeline)
    report_step(f"simulate {name}", progress)
    start, finish = coflow_times(result.start, result.finish, plan.coflows)
    return Outcome(plan, result, start, finish)


def iteration_seconds(result: SimResult, ends: list[list[str]] | None = None) -> float:
    """The steady-state iteration time: with ``k > 1`` iterations, (when the last one's computations
    end - when the first one's end) / (k - 1); with one, the makespan (its DP coflows included)."""
    if not ends or len(ends) < 2:
        return result.makespan
    wanted = set(ends[0]) | set(ends[-1])
    index = {t.id: i for i, t in enumerate(result.tasks) if t.id in wanted}
    first, last = (max(result.finish[index[i]] for i in ids) for ids in (ends[0], ends[-1]))
    return float(last - first) / (len(ends) - 1)


def free_communication(topology: Topology, tasks: list[Task]) -> SimResult:
    """The same DAG with every transfer free (no bytes, latency or overhead): its makespan is the
    computations' critical path, a bound no scheduler beats (an oracle, not a baseline)."""
    instant = Topology(
        f"{topology.name} (free communication)",
        topology.devices,
        [replace(link, latency_us=0.0, overhead_us=0.0) for link in topology.links],
    )
    free = [replace(t, bytes=0.0, overhead_s=0.0, max_rate=None) if isinstance(t, Transfer) else t for t in tasks]
    return simulate(instant, free, timeline=False)


def ceiling(baseline_seconds: float, free_seconds: float, link_seconds: float = 0.0) -> dict:
    """What a baseline's iteration leaves to gain: the free-communication time (an oracle: every
    byte moves in no time), the share of the baseline's iteration that is exposed communication,
    the ceiling ratio T(baseline) / T(free), and with ``link_seconds`` (the busiest link
    direction's bytes per iteration over its bandwidth, :func:`link_bound`) the bound max(T(free),
    link seconds), which no order of the same flows beats in the long run, and T(baseline) / bound."""
    bound = max(free_seconds, link_seconds)
    top = {
        "baseline_seconds": baseline_seconds,
        "free_communication_seconds": free_seconds,
        "exposed_share": 1.0 - free_seconds / baseline_seconds if baseline_seconds > 0 else 0.0,
        "ceiling": baseline_seconds / free_seconds if free_seconds > 0 else float("inf"),
        "link_seconds": link_seconds,
        "bound_seconds": bound,
        "bound_ceiling": baseline_seconds / bound if bound > 0 else float("inf"),
    }
    return top


def link_bound(result: SimResult, iterations: int) -> float:
    """The busiest link direction's seconds per iteration at full bandwidth: every iteration sends
    the same bytes, so over many iterations no order of this DAG's flows on these routes averages
    less per iteration (a bound, not a schedule)."""
    seconds = result.link_seconds()
    return float(seconds.max()) / iterations if seconds.size else 0.0


def headroom_reached(baseline_seconds: float, seconds: float, floor_seconds: float) -> float | None:
    """(T(baseline) - T) / (T(baseline) - T(floor)): the share of the possible gain reached, against
    a floor (the DAG's floor, or the free-communication oracle); None when nothing is left."""
    gap = baseline_seconds - floor_seconds
    return (baseline_seconds - seconds) / gap if gap > 1e-12 * baseline_seconds else None
