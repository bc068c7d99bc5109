"""Choosing a job's plans: its all-gather plan (by name, from a file, or ``auto``, the planner
whose plan the simulator prices fastest on the topology the job runs on) and its gradient
all-reduce (``native``, a planned schedule, or ``auto``).

A plan from a file is checked against the partition set and the placement before any worker
starts: every rank's share must be executable (:meth:`commgraph.plan.exchange.Exchange.from_plan`
does that check, and it is pure), so a plan made for another partition set, world size or
placement is refused with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from commgraph.errors import PlanError
from commgraph.partition import PartitionSet
from commgraph.plan.allgather import placement, plan_allgather
from commgraph.plan.allreduce import AllReduceSchedule, choose_allreduce, make_allreduce, native_seconds, plan_allreduce
from commgraph.plan.exchange import Exchange
from commgraph.plan.model import CommPlan
from commgraph.plan.price import price
from commgraph.topology import Topology

# planners a training job can execute, in the order ties are broken (the simplest first)
EXECUTABLE = ("p2p", "spst", "hybrid", "swap")
PLAN_CHOICES = ("auto", *EXECUTABLE)


@dataclass(frozen=True)
class PlanChoice:
    """The all-gather plan a job runs: the plan, each rank's plan device, its modelled time per
    layer and, for ``auto``, every planner's."""

    plan: CommPlan
    devices: list[str]  # the plan device of each rank
    modeled_seconds: float  # one layer's exchange, priced on the topology
    candidates: dict[str, float] = field(default_factory=dict)  # every planner priced (auto only)

    def describe(self) -> str:
        """One line naming the plan and its modeled time."""
        others = ", ".join(
            f"{name} {seconds * 1e3:.3f} ms" for name, seconds in self.candidates.items() if name != self.plan.planner
        )
        return (
            f"all-gather plan {self.plan.planner}: {self.modeled_seconds * 1e3:.3f} ms per layer modeled on "
            f"{self.plan.topology}" + (f" (also priced: {others})" if others else "")
        )


def parse_placement(text: str | None) -> list[str] | None:
    """A ``--placement`` value.

    Args:
        text: device ids separated by commas, or None.

    Returns:
        The device of each part in order, or None for the default placement (no text).
    """
    return None if not text else [d.strip() for d in text.split(",") if d.strip()]


def choose_allgather(
    spec: str,
    pset: PartitionSet,
    topology: Topology,
    row_bytes: int,
    devices: list[str] | None = None,
    *,
    verify: bool = True,
) -> PlanChoice:
    """``spec``: ``auto``, a planner of ``EXECUTABLE``, or a plan file (``.json``/``.npz``), checked
    to fit every part unless ``verify`` is off (a worker checks its own share when it runs it)."""
    devs = placement(pset, topology, devices)
    if spec in EXECUTABLE:
        plan = plan_allgather(spec, pset, topology, row_bytes, devs)
        return PlanChoice(plan, devs, price(plan, topology)["modeled_seconds"])
    if spec == "auto":
        priced = {}
        for name in EXECUTABLE:
            plan = plan_allgather(name, pset, topology, row_bytes, devs)
            priced[name] = (price(plan, topology)["modeled_seconds"], plan)
        best = fastest_plan({name: seconds for name, (seconds, _) in priced.items()})
        return PlanChoice(priced[best][1], devs, priced[best][0], {n: s for n, (s, _) in priced.items()})
    path = Path(spec)
    if path.suffix not in (".json", ".npz"):
        raise PlanError(
            f"--plan {spec!r}: choose one of {', '.join(PLAN_CHOICES)} or a plan file (.json or .npz) "
            "written by `commgraph plan`"
        )
    if not path.is_file():
        raise PlanError(f"--plan {spec}: no such file")
    plan = CommPlan.load(path)
    if verify:
        check_fits(plan, pset, topology, devs)
    return PlanChoice(plan, devs, price(plan, topology)["modeled_seconds"])


def fastest_plan(seconds: dict[str, float]) -> str:
    """The planner ``auto`` takes from every planner of :data:`EXECUTABLE`'s modeled seconds: the
    fastest, ties to the earlier in :data:`EXECUTABLE`."""
    return min(EXECUTABLE, key=lambda name: seconds[name])  # min keeps the first of equals


def check_fits(plan: CommPlan, pset: PartitionSet, topology: Topology, devices: list[str]) -> None:
    """Refuse a plan that some rank could not execute on this partition set, topology and
    placement. Devices no rank runs on may appear only as host memory (not as worker devices)."""
    if plan.kind != "allgather":
        raise PlanError(f"the plan is a {plan.kind} plan; training needs an all-gather plan")
    if plan.planner == "replicate":
        raise PlanError("a replicate plan moves nothing per layer; use --exchange replicate instead")
    ranks, workers = set(devices), {d.id for d in topology.workers}
    present = {d.id for d in topology.devices}
    for stage in plan.stages:
        for send in stage:
            for device in (send.src, send.dst):
                if device not in present:
                    raise PlanError(
                        f"the plan sends between {send.src} and {send.dst}, but {device} is not a device "
                        f"of topology {topology.name!r} (the plan was made for {plan.topology!r})"
                    )
                if device not in ranks and device in workers:
                    raise PlanError(
                        f"the plan sends between {send.src} and {send.dst}, but the {len(devices)} "
                        f"rank(s) run on {', '.join(devices)}: it was made for another world size "
                        "or placement (see --placement)"
                    )
    for k in range(pset.num_parts):
        part = pset.part(k)
        try:
            Exchange.from_plan(plan, k, devices, part.owned, part.halo)
        except PlanError as exc:
            raise PlanError(f"the plan does not fit {pset.path}: {exc}") from None


@dataclass(frozen=True)
class AllReduceChoice:
    """The all-reduce a job runs: its name, its schedule (None: torch's own) and its modelled time."""

    name: str  # native, or the planner whose schedule runs
    schedule: AllReduceSchedule | None  # None: torch's all_reduce
    modeled_seconds: float | None  # the gradient's all-reduce as priced (native: ``native_seconds``)

    def describe(self) -> str:
        """One line naming the all-reduce and its modeled time."""
        modeled = (
            "not modeled: the topology has other workers"
            if self.modeled_seconds is None
            else f"{self.modeled_seconds * 1e3:.3f} ms per step modeled"
        )
        return f"all-reduce {self.name}: {modeled}"


def choose_job_allreduce(spec: str, topology: Topology, devices: list[str], nbytes: float) -> AllReduceChoice:
    """``--allreduce`` for a job whose rank ``r`` runs on ``devices[r]``: a planned schedule needs
    the topology's workers to be exactly the job's devices (``auto`` then falls back to native)."""
    if len(devices) < 2:
        return AllReduceChoice("native", None, 0.0)
    fits = check_allreduce(spec, topology, devices)
    if spec == "auto":
        spec = choose_allreduce(topology, nbytes) if fits else "native"
    if not fits:
        seconds = None
    elif spec == "native":
        seconds = native_seconds(topology, nbytes)
    else:
        seconds = price(plan_allreduce(spec, topology, nbytes), topology)["modeled_seconds"]
    return AllReduceChoice(spec, make_allreduce(spec, topology, nbytes), seconds)


def check_allreduce(spec: str, topology: Topology, devices: list[str]) -> bool:
    """Whether a planned schedule can run (the topology's workers are exactly the job's devices);
    one named explicitly that cannot is refused, and so is a topology where two of the job's
    devices have no route between them (TopologyError naming the pair), before any worker starts."""
    workers = [d.id for d in topology.workers]
    fits = sorted(workers) == sorted(devices)
    if fits:
        topology.check_routes(devices)
    if spec not in ("auto", "native") and not fits and len(devices) > 1:
        raise PlanError(
            f"--allreduce {spec} plans over every worker of {topology.name!r} ({len(workers)}), but the "
            f"job runs on {len(devices)} of them: use a topology with one worker per rank, or "
            "--allreduce native"
        )
    return fits
