"""``commgraph plan allgather|allreduce|broadcast``: plan communication against a topology and price it
(``commgraph sim multipath h2d`` splits a host-to-GPU copy over paths). ``plan allreduce
--collective allgather|reducescatter`` plans those collectives across the workers instead (``ring``
or ``lp``); ``plan allgather`` is the halo exchange of a partition set."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from commgraph.cli import describe
from commgraph.cli.args import (
    add_force,
    add_format,
    add_png,
    add_topology_argument,
    byte_count,
    check_outputs,
    emit,
    topology_from_args,
    wrote,
)
from commgraph.errors import PlanError
from commgraph.partition import load_partition_set
from commgraph.plan import PLANNERS, plan_bulk
from commgraph.plan.allgather import placement
from commgraph.plan.gather import COLLECTIVES
from commgraph.plan.gather import PLANNERS as GATHER_PLANNERS
from commgraph.render import Report
from commgraph.render.pictures import draw_bars, plan_bars
from commgraph.render.plans import (
    allgather_report,
    bound_lines,
    broadcast_report,
    collective_report,
    h2d_report,
    native_line,
)
from commgraph.sim import progress, simulate
from commgraph.study.plans import (
    PlanComparison,
    compare_allreduce,
    compare_broadcast,
    compare_collective,
    compare_halo,
    planning_estimate,
)


def register(subparsers) -> None:
    parser = subparsers.add_parser("plan", help="plan and price communication", description=describe(__doc__))
    kinds = parser.add_subparsers(dest="plan_kind", metavar="COMMAND", required=True)
    _add_allgather(kinds)
    _add_allreduce(kinds)
    _add_broadcast(kinds)


def _add_allgather(kinds) -> None:
    gather = kinds.add_parser(
        "allgather",
        help="per-layer halo exchange of a partition set",
        description="Plan each GNN layer's halo exchange of a partition set on a topology "
        "with every planner (or one) and price the plans on the flow simulator; of a typed set, "
        "the rows each layer receives by node type and by relation.",
    )
    gather.add_argument("partdir", type=Path, metavar="PARTDIR", help="partition set (commgraph partition make)")
    add_topology_argument(gather)
    gather.add_argument(
        "--feature-dim", type=int, required=True, metavar="F", help="embedding width; rows are F float32 values"
    )
    gather.add_argument(
        "--planner", choices=("all", *PLANNERS["allgather"]), default="all", help="the planner to run, or all of them"
    )
    gather.add_argument("--placement", metavar="DEV,DEV,...", help="device of each part (default: GPUs in order)")
    gather.add_argument("--layers", type=int, default=2, help="GNN layers (for replicate's L-hop halo)")
    _common(gather)
    gather.set_defaults(run=run_allgather)


def _add_allreduce(kinds) -> None:
    reduce = kinds.add_parser(
        "allreduce",
        help="gradient all-reduce across the workers",
        description="Plan an all-reduce (or, with --collective, an all-gather or "
        "reduce-scatter) across the topology's workers with every planner (or "
        "one), beside the throughput bound, and price the plans.",
    )
    add_topology_argument(reduce)
    reduce.add_argument(
        "--bytes",
        type=byte_count,
        default="1e8",
        metavar="SIZE",
        help="bytes to all-reduce, or of the whole gathered tensor; K/M/G suffixes",
    )
    reduce.add_argument(
        "--collective",
        choices=("allreduce", *COLLECTIVES),
        default="allreduce",
        help="the collective across the workers (all-gather and reduce-scatter: ring or lp)",
    )
    reduce.add_argument(
        "--planner",
        choices=("all", *dict.fromkeys(PLANNERS["allreduce"] + GATHER_PLANNERS)),
        default="all",
        help="the planner to run, or all of them (all-gather and reduce-scatter: ring or lp)",
    )
    reduce.add_argument(
        "--max-seconds",
        type=float,
        default=MAX_PLAN_SECONDS,
        metavar="S",
        help="refuse planning estimated to take longer than this many seconds",
    )
    _common(reduce)
    reduce.set_defaults(run=run_allreduce)


def _add_broadcast(kinds) -> None:
    cast = kinds.add_parser(
        "broadcast",
        help="broadcast from one worker by arborescence packing",
        description="Plan a broadcast from one device to every worker by packing "
        "edge-disjoint arborescences, and price it.",
    )
    add_topology_argument(cast)
    cast.add_argument("--root", required=True, help="the device that holds the data (e.g. gpu0)")
    cast.add_argument(
        "--bytes", type=byte_count, default="1e8", metavar="SIZE", help="bytes to broadcast, K/M/G suffixes"
    )
    _common(cast)
    cast.set_defaults(run=run_broadcast, planner="arborescence")


def register_h2d(kinds) -> None:
    bulk = kinds.add_parser(
        "h2d",
        help="bulk copy from host memory to GPUs, split over paths (max-flow LP)",
        description="Bulk host -> GPU copies: each GPU's route (direct) or split over the "
        "candidate paths of every GPU at once by a max-flow LP that shares each "
        "link (lp), priced on the flow simulator. Simulated only: commgraph has "
        "no executor for a split copy yet, and a machine with one GPU has no "
        "second path.",
    )
    add_topology_argument(bulk)
    bulk.add_argument("--bytes", type=byte_count, default="1G", metavar="SIZE", help="bytes per GPU, K/M/G suffixes")
    bulk.add_argument("--gpus", default="0", metavar="I,J,...", help="target GPUs by index or id")
    bulk.add_argument("--src", help="host memory the bytes start in (default: the first CPU)")
    bulk.add_argument(
        "--planner", choices=("all", *PLANNERS["h2d"]), default="all", help="the planner to run, or all of them"
    )
    add_format(bulk)
    bulk.set_defaults(run=run_h2d)


def _common(parser: argparse.ArgumentParser) -> None:
    add_format(parser)
    parser.add_argument("--out", type=Path, metavar="PLAN", help="save the plan (.json or .npz); needs one --planner")
    add_png(parser, "bars of each plan's modeled time (and algorithm bandwidth) against the throughput bound")
    add_force(parser)


def _chosen(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    """The planners asked for; the output paths checked first."""
    chosen = list(names) if args.planner == "all" else [args.planner]
    if args.out and len(chosen) > 1:
        raise PlanError("--out saves one plan: choose it with --planner")
    check_outputs(args, "--out", "--png")
    return chosen


@progress.reported("plan")
def run_allgather(args: argparse.Namespace) -> int:
    if args.feature_dim < 1:
        raise PlanError(f"--feature-dim must be >= 1, got {args.feature_dim}")
    topology = topology_from_args(args)
    pset = load_partition_set(args.partdir)
    pset.validate()
    devices = placement(pset, topology, args.placement.split(",") if args.placement else None)
    names = _chosen(args, PLANNERS["allgather"])
    found = compare_halo(pset, topology, 4 * args.feature_dim, names, devices=devices, layers=args.layers)
    _finish(args, found, allgather_report(found.to_dict(), found.chosen))
    return 0


MAX_PLAN_SECONDS = 3600.0
SAY_AFTER_SECONDS = 10.0  # planning expected to take longer is announced, and each planner's end said


@progress.reported("plan")
def run_allreduce(args: argparse.Namespace) -> int:
    if args.collective != "allreduce":
        return run_gather(args)
    if args.planner not in ("all", *PLANNERS["allreduce"]):
        raise PlanError(
            f"unknown all-reduce planner {args.planner!r}; choose one of {', '.join(PLANNERS['allreduce'])}"
        )
    topology = topology_from_args(args)
    names = _chosen(args, PLANNERS["allreduce"])
    found = compare_allreduce(
        topology, args.bytes, names, max_seconds=args.max_seconds, progress=_say_planned(names, len(topology.workers))
    )
    native = (native_line(found.native_seconds),) if found.chosen == "native" else ()
    result = found.to_dict()
    report = collective_report(result, found.chosen, (*native, *bound_lines(result, "allreduce")))
    _finish(args, found, report, args.bytes)
    return 0


def _say_planned(names: list[str], workers: int) -> Callable[[str], None] | None:
    """Where planning ``names`` over ``workers`` workers is estimated beyond :data:`SAY_AFTER_SECONDS`,
    a progress callback that says so on stderr once planning is let start (``estimate``), then how
    long each planner took (``plan NAME``)."""
    total = sum(planning_estimate(names, workers).values())
    if total <= SAY_AFTER_SECONDS:
        return None
    started = [time.monotonic()]

    def say(label: str) -> None:
        now = time.monotonic()
        if label == "estimate":
            print(f"commgraph: planning over {workers:,} workers takes about {total:,.0f} s", file=sys.stderr)
        else:
            print(f"commgraph: {label.removeprefix('plan ')} planned in {now - started[0]:.0f} s", file=sys.stderr)
        started[0] = now

    return say


def run_gather(args: argparse.Namespace) -> int:
    """``plan allreduce --collective allgather|reducescatter``: ``ring`` and ``lp``, priced as the all-reduce."""
    if args.planner not in ("all", *GATHER_PLANNERS):
        raise PlanError(
            f"unknown {args.collective} planner {args.planner!r}; choose one of {', '.join(GATHER_PLANNERS)}"
        )
    topology = topology_from_args(args)
    found = compare_collective(args.collective, topology, args.bytes, _chosen(args, GATHER_PLANNERS))
    result = found.to_dict()
    _finish(args, found, collective_report(result, after=bound_lines(result, args.collective)), args.bytes)
    return 0


@progress.reported("plan")
def run_broadcast(args: argparse.Namespace) -> int:
    check_outputs(args, "--out", "--png")
    found = compare_broadcast(topology_from_args(args), args.root, args.bytes)
    _finish(args, found, broadcast_report(found.to_dict()), args.bytes)
    return 0


@progress.reported("plan")
def run_h2d(args: argparse.Namespace) -> int:
    topology = topology_from_args(args)
    gpus = [_gpu(topology, item.strip()) for item in args.gpus.split(",") if item.strip()]
    cpus = [d.id for d in topology.devices if d.kind == "cpu"]
    if args.src is None and not cpus:
        raise PlanError(f"topology {topology.name!r} has no CPU: name the source with --src")
    src = args.src or cpus[0]
    nbytes = args.bytes
    report = {}
    for name in PLANNERS["h2d"] if args.planner == "all" else (args.planner,):
        plan = plan_bulk(topology, src, gpus, nbytes, name)
        progress.stage(f"simulating {name}")
        report[name] = {
            "seconds": simulate(topology, plan.tasks(), timeline=False).makespan,
            "bound_seconds": plan.bound_seconds,
            "paths": [part.to_dict() for part in plan.parts],
        }
    emit(args, h2d_report({"src": src, "gpus": gpus, "bytes": nbytes, "planners": report}))
    return 0


def _gpu(topology, item: str) -> str:
    gpus = [d.id for d in topology.gpus]
    if item.isdigit():
        if int(item) >= len(gpus):
            raise PlanError(f"--gpus: GPU {item} out of range; topology {topology.name!r} has {len(gpus)} GPUs")
        return gpus[int(item)]
    if item not in gpus:
        raise PlanError(f"--gpus: {item!r} is not a GPU of topology {topology.name!r}")
    return item


def _finish(args: argparse.Namespace, found: PlanComparison, report: Report, nbytes: float | None = None) -> None:
    """Save the plan (``--out``), draw the bars (``--png``) and print the report in ``--format``."""
    if args.out:
        next(iter(found.plans.values())).save(args.out)
        wrote(args.out)
    if args.png:
        draw_bars(plan_bars(report.data, found.chosen, nbytes), args.png)
        wrote(args.png)
    emit(args, report)
