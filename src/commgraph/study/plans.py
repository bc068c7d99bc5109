"""Planners compared on one collective and one topology: each planner's plan, priced on the flow
simulator (:func:`~commgraph.plan.price`), beside the bounds, with the planner ``auto`` takes.

- :func:`compare_halo`: a partition set's per-layer halo exchange (``plan allgather``): modeled
  time per layer, bytes, stages and busiest link; ``--plan auto`` takes the fastest of
  :data:`~commgraph.plan.choose.EXECUTABLE` (:func:`~commgraph.plan.choose.fastest_plan`).
- :func:`compare_allreduce`: the gradient all-reduce across the workers (``plan allreduce``):
  modeled and normalized time, algorithm and bus bandwidth against the throughput bound, and
  Lemma 2.1's lower bound; ``--allreduce auto`` takes the fastest of torch's own all-reduce and
  the planned candidates (:func:`~commgraph.plan.allreduce.fastest_allreduce`).
- :func:`compare_collective`: all-gather or reduce-scatter across the workers (``ring``, ``lp``).
- :func:`compare_broadcast`: the arborescence packing's one plan.

Each takes an optional ``progress`` callback, called with ``plan NAME`` as each planner's plan is
made and priced. An all-reduce over many workers takes long to plan: :func:`planning_estimate`
says about how long, and :func:`compare_allreduce` refuses planning estimated beyond its
``max_seconds`` (its progress hears ``estimate`` once planning is let start).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from commgraph.errors import PlanError
from commgraph.partition import PartitionSet
from commgraph.partition.typed import typed_bytes
from commgraph.plan import CommPlan, plan_allgather, plan_allreduce, plan_broadcast, price
from commgraph.plan.allreduce import AUTO_CANDIDATES, fastest_allreduce, native_seconds
from commgraph.plan.choose import EXECUTABLE, fastest_plan
from commgraph.plan.gather import plan_collective
from commgraph.study.coflow import Progress, report_step
from commgraph.topology import Topology

# How long each all-reduce planner takes on WORKERS_MEASURED workers (64xdgx1-v100-ib, one core of
# the project's 2-core test machine) and the power of the worker count its time grows with
# (measured from 256 to 512 workers); ps is priced from its 256-worker time.
WORKERS_MEASURED = 512
PLAN_SECONDS = {
    "ring": (32.0, 2.4),
    "ring1": (18.0, 2.0),
    "tree": (26.0, 2.3),
    "tree1": (15.0, 2.0),
    "ps": (104.0, 3.0),
    "lp": (25.0, 2.3),
}
LP_NOTES = ("optimum", "optimum_fraction", "trees", "certificate")
GATHER_NOTES = ("normalized_time", "optimum", "optimum_fraction", "certificate", "synthesis", "arborescences")


@dataclass
class PlanComparison:
    """Planners' plans of one collective on one topology, priced (the module's description).

    Args:
        collective: ``halo`` (a partition set's per-layer exchange), ``allreduce``, ``allgather``
            or ``reducescatter`` (across the workers) or ``broadcast``.
        planners: per planner, its row as JSON-ready data: ``modeled_seconds`` and, by collective,
            ``bytes``, ``stages``, ``busiest_link`` (halo), ``normalized_time`` and ``bandwidth``
            (``algbw_gbps``, ``busbw_gbps``, ``of_bound``, the ``bound``), the LP's optimum, trees
            and certificate, and the planner's own notes.
        plans: per planner, its plan.
        planning_seconds: per planner, the seconds its plan took to make (not its price).
        chosen: the planner ``auto`` takes (``native``: torch's own all-reduce, which no row
            holds), or None where not every candidate was planned.
        lower_bound: the all-reduce's Lemma 2.1 lower bound on normalized time (None: none).
        native_seconds: torch's own all-reduce, modeled, where ``auto`` compared it.
        typed: a typed set's halo bytes per layer ``by_type`` and ``by_relation``.
    """

    collective: str
    planners: dict[str, dict]
    plans: dict[str, CommPlan]
    planning_seconds: dict[str, float]
    chosen: str | None = None
    lower_bound: float | None = None
    native_seconds: float | None = None
    typed: dict | None = None

    def to_dict(self) -> dict:
        """Plain data (``plan allgather|allreduce|broadcast --format json``): ``planners`` and
        ``chosen``; the all-reduce's ``lower_bound`` (and ``native_seconds`` where compared), the
        collective across the workers by name, a typed set's ``typed``."""
        data = {"planners": self.planners, "chosen": self.chosen}
        if self.collective == "allreduce":
            data["lower_bound"] = self.lower_bound
            if self.native_seconds is not None:
                data["native_seconds"] = self.native_seconds
        elif self.collective in ("allgather", "reducescatter"):
            data["collective"] = self.collective
        if self.typed is not None:
            data["typed"] = self.typed
        return data


def _planned(names, make, progress: Progress | None) -> tuple[dict[str, CommPlan], dict[str, float]]:
    """Each of ``names``' plan by ``make(name)``, and the seconds each took; ``progress`` told of each."""
    plans, seconds = {}, {}
    for name in names:
        start = time.perf_counter()
        plans[name] = make(name)
        seconds[name] = time.perf_counter() - start
        report_step(f"plan {name}", progress)
    return plans, seconds


def compare_halo(
    pset: PartitionSet,
    topology: Topology,
    row_bytes: int,
    names: list[str] | tuple[str, ...],
    *,
    devices: list[str] | None = None,
    layers: int = 2,
    progress: Progress | None = None,
) -> PlanComparison:
    """Each planner of ``names`` (:data:`~commgraph.plan.allgather.PLANNERS`) plans ``pset``'s
    per-layer halo exchange of ``row_bytes``-byte rows on ``topology`` (parts on ``devices``;
    ``layers``: replicate's L-hop halo), priced.

    Raises:
        PlanError: an unknown planner, or a placement the topology cannot hold.
    """
    plans, seconds = _planned(
        names, lambda name: plan_allgather(name, pset, topology, row_bytes, devices, layers), progress
    )
    rows = {}
    for name, plan in plans.items():
        cost = price(plan, topology)
        rows[name] = {key: cost[key] for key in ("modeled_seconds", "bytes", "stages", "busiest_link")} | plan.notes
    chosen = None
    if set(EXECUTABLE) <= set(rows):
        chosen = fastest_plan({name: rows[name]["modeled_seconds"] for name in EXECUTABLE})
    typed = _typed_halo(pset, row_bytes // 4) if "typed" in pset.manifest else None
    return PlanComparison("halo", rows, plans, seconds, chosen, typed=typed)


def _typed_halo(pset: PartitionSet, width: int) -> dict:
    """A typed set's halo bytes per layer at ``width`` by node type and by relation: what every
    planner moves (each row once per part that reads it), before the routes' relays."""
    measured = typed_bytes(pset, width).to_dict()
    return {
        "by_type": {t: v["halo"] for t, v in measured["node_types"].items()},
        "by_relation": {r: v["halo"] for r, v in measured["relations"].items()},
    }


def planning_estimate(names: list[str] | tuple[str, ...], workers: int) -> dict[str, float]:
    """About how long each all-reduce planner of ``names`` takes to plan for ``workers`` workers
    (:data:`PLAN_SECONDS`)."""
    return {name: PLAN_SECONDS[name][0] * (workers / WORKERS_MEASURED) ** PLAN_SECONDS[name][1] for name in names}


def check_planning_time(names: list[str] | tuple[str, ...], workers: int, max_seconds: float) -> None:
    """Refuse planning ``names`` over ``workers`` workers estimated beyond ``max_seconds``.

    Raises:
        PlanError: ``max_seconds`` not a finite number > 0, or the estimate beyond it.
    """
    if not (math.isfinite(max_seconds) and max_seconds > 0):
        raise PlanError(f"max_seconds must be a finite number > 0, got {max_seconds}", parameters=("max_seconds",))
    total = sum(planning_estimate(names, workers).values())
    if total > max_seconds:
        fast = min(PLAN_SECONDS, key=lambda name: planning_estimate([name], workers)[name])
        raise PlanError(
            f"planning {', '.join(names)} over {workers:,} workers would take about {total:,.0f} s, more "
            f"than max_seconds {max_seconds:g}: choose planner {fast} or fewer servers, or raise max_seconds",
            parameters=("max_seconds", "planner"),
        )


def compare_allreduce(
    topology: Topology,
    nbytes: float,
    names: list[str] | tuple[str, ...],
    *,
    max_seconds: float | None = None,
    progress: Progress | None = None,
) -> PlanComparison:
    """Each all-reduce planner of ``names`` (:data:`~commgraph.plan.allreduce.PLANNERS`) plans an
    all-reduce of ``nbytes`` across ``topology``'s workers, priced; where every candidate of
    ``--allreduce auto`` was planned, the one it takes. Planning estimated beyond ``max_seconds``
    (:func:`planning_estimate`; None: any) is refused before it starts.

    Raises:
        PlanError: an unknown planner, ``nbytes`` not positive, fewer than 2 workers, or planning
            estimated beyond ``max_seconds``.
    """
    if max_seconds is not None:
        check_planning_time(names, len(topology.workers), max_seconds)
    report_step("estimate", progress)
    plans, seconds = _planned(names, lambda name: plan_allreduce(name, topology, nbytes), progress)
    rows = {name: _allreduce_row(name, plan, topology) for name, plan in plans.items()}
    bound = plans[names[-1]].notes["lower_bound"] if plans else None
    chosen, native = None, None
    if set(AUTO_CANDIDATES[1:]) <= set(rows):
        native = native_seconds(topology, nbytes)
        chosen = fastest_allreduce({"native": native, **{n: rows[n]["modeled_seconds"] for n in AUTO_CANDIDATES[1:]}})
    return PlanComparison("allreduce", rows, plans, seconds, chosen, lower_bound=bound, native_seconds=native)


def _allreduce_row(name: str, plan: CommPlan, topology: Topology) -> dict:
    """An all-reduce plan's row: its normalized time, modeled seconds and bandwidth (``lp``: its
    optimum, trees and certificate too)."""
    row = {
        "normalized_time": plan.notes["normalized_time"],
        "modeled_seconds": price(plan, topology)["modeled_seconds"],
        "bandwidth": plan.notes["bandwidth"],
    }
    if name == "lp":
        row |= {key: plan.notes[key] for key in LP_NOTES if key in plan.notes}
    return row


def compare_collective(
    collective: str,
    topology: Topology,
    nbytes: float,
    names: list[str] | tuple[str, ...],
    *,
    progress: Progress | None = None,
) -> PlanComparison:
    """Each planner of ``names`` (:data:`~commgraph.plan.gather.PLANNERS`) plans ``collective``
    (``allgather`` or ``reducescatter``) of an ``nbytes`` tensor across ``topology``'s workers, priced.

    Raises:
        PlanError: an unknown collective or planner, ``nbytes`` not positive, fewer than 2 workers.
    """
    plans, seconds = _planned(names, lambda name: plan_collective(collective, name, topology, nbytes), progress)
    rows = {
        name: {"modeled_seconds": price(plan, topology)["modeled_seconds"], "bandwidth": plan.notes["bandwidth"]}
        | {key: plan.notes[key] for key in GATHER_NOTES if key in plan.notes}
        for name, plan in plans.items()
    }
    return PlanComparison(collective, rows, plans, seconds)


def compare_broadcast(
    topology: Topology, root: str, nbytes: float, *, progress: Progress | None = None
) -> PlanComparison:
    """The arborescence packing's broadcast of ``nbytes`` from ``root`` to every worker, priced.

    Raises:
        PlanError: ``root`` not a device of ``topology``, or ``nbytes`` not positive.
    """
    plans, seconds = _planned(["arborescence"], lambda _: plan_broadcast(topology, root, nbytes), progress)
    plan = plans["arborescence"]
    row = {
        "normalized_time": plan.notes["normalized_time"],
        "modeled_seconds": price(plan, topology)["modeled_seconds"],
        **{key: plan.notes[key] for key in ("optimum", "optimum_fraction", "arborescences_rate")},
    }
    return PlanComparison("broadcast", {"arborescence": row}, plans, seconds)
