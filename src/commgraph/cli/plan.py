"""``commgraph plan allgather|allreduce|broadcast``: plan communication against a topology and price it
(``commgraph sim multipath h2d`` splits a host-to-GPU copy over paths). ``plan allreduce
--collective allgather|reducescatter`` plans those collectives across the workers instead (``ring``
or ``lp``); ``plan allgather`` is the halo exchange of a partition set."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from commgraph.cli import describe
from commgraph.cli.args import (
    add_force,
    add_json,
    add_png,
    add_topology_argument,
    byte_count,
    check_outputs,
    topology_from_args,
    wrote,
)
from commgraph.cli.info import human_bytes
from commgraph.errors import PlanError
from commgraph.partition import load_partition_set
from commgraph.partition.typed import typed_bytes
from commgraph.plan import PLANNERS, plan_allgather, plan_allreduce, plan_broadcast, plan_bulk, price
from commgraph.plan.allgather import placement
from commgraph.plan.gather import COLLECTIVES, plan_collective
from commgraph.plan.gather import PLANNERS as GATHER_PLANNERS
from commgraph.sim import progress, simulate
from commgraph.study.plot import plot_traffic


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
    add_json(bulk)
    bulk.set_defaults(run=run_h2d)


def _common(parser: argparse.ArgumentParser) -> None:
    add_json(parser)
    parser.add_argument("--out", type=Path, metavar="PLAN", help="save the plan (.json or .npz); needs one --planner")
    add_png(parser, "heat map of bytes between devices")
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
    plans, report = [], {}
    for name in _chosen(args, PLANNERS["allgather"]):
        plan = plan_allgather(name, pset, topology, 4 * args.feature_dim, devices, args.layers)
        cost = price(plan, topology)
        plans.append(plan)
        report[name] = {key: cost[key] for key in ("modeled_seconds", "bytes", "stages", "busiest_link")}
        report[name].update({k: v for k, v in plan.notes.items()})
    result = {"planners": report}
    if "typed" in pset.manifest:
        result["typed"] = _typed_halo(pset, args.feature_dim)
    _finish(args, plans, devices, result)
    return 0


def _typed_halo(pset, width: int) -> dict:
    """A typed set's halo bytes per layer at ``width`` by node type and by relation: what every
    planner moves (each row once per part that reads it), before the routes' relays."""
    measured = typed_bytes(pset, width).to_dict()
    return {
        "by_type": {t: v["halo"] for t, v in measured["node_types"].items()},
        "by_relation": {r: v["halo"] for r, v in measured["relations"].items()},
    }


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
MAX_PLAN_SECONDS = 3600.0
SAY_AFTER_SECONDS = 10.0  # planning expected to take longer is announced, and each planner's end said


def plan_seconds(planners: list[str], workers: int) -> dict[str, float]:
    """About how long each of ``planners`` takes for ``workers`` workers (:data:`PLAN_SECONDS`)."""
    return {name: PLAN_SECONDS[name][0] * (workers / WORKERS_MEASURED) ** PLAN_SECONDS[name][1] for name in planners}


def _check_plan_time(estimate: dict[str, float], workers: int, cap: float) -> None:
    """Refuse planning estimated beyond ``cap`` seconds; announce on stderr planning beyond
    :data:`SAY_AFTER_SECONDS`."""
    if not (math.isfinite(cap) and cap > 0):
        raise PlanError(f"--max-seconds must be a finite number > 0, got {cap}")
    total = sum(estimate.values())
    if total > cap:
        fast = min(PLAN_SECONDS, key=lambda name: plan_seconds([name], workers)[name])
        raise PlanError(
            f"planning {', '.join(estimate)} over {workers:,} workers would take about {total:,.0f} s, more "
            f"than --max-seconds {cap:g}: choose --planner {fast} or fewer servers, or raise --max-seconds"
        )
    if total > SAY_AFTER_SECONDS:
        print(f"commgraph: planning over {workers:,} workers takes about {total:,.0f} s", file=sys.stderr)


@progress.reported("plan")
def run_allreduce(args: argparse.Namespace) -> int:
    nbytes = args.bytes
    if args.collective != "allreduce":
        return run_gather(args, nbytes)
    if args.planner not in ("all", *PLANNERS["allreduce"]):
        raise PlanError(
            f"unknown all-reduce planner {args.planner!r}; choose one of {', '.join(PLANNERS['allreduce'])}"
        )
    topology = topology_from_args(args)
    chosen = _chosen(args, PLANNERS["allreduce"])
    estimate = plan_seconds(chosen, len(topology.workers))
    _check_plan_time(estimate, len(topology.workers), args.max_seconds)
    plans, report, bound = [], {}, None
    for name in chosen:
        started = time.monotonic()
        plan = plan_allreduce(name, topology, nbytes)
        if sum(estimate.values()) > SAY_AFTER_SECONDS:
            print(f"commgraph: {name} planned in {time.monotonic() - started:.0f} s", file=sys.stderr)
        plans.append(plan)
        bound = plan.notes["lower_bound"]
        report[name] = _allreduce_row(name, plan, topology)
    devices = [d.id for d in topology.workers]
    _finish(args, plans, devices, {"planners": report, "lower_bound": bound})
    if not args.json:
        _print_bounds(report)
    return 0


def _allreduce_row(name: str, plan, topology) -> dict:
    """An all-reduce plan's row: its normalized time, modeled seconds and bandwidth (``lp``: its
    optimum, trees and certificate too)."""
    row = {
        "normalized_time": plan.notes["normalized_time"],
        "modeled_seconds": price(plan, topology)["modeled_seconds"],
        "bandwidth": plan.notes["bandwidth"],
    }
    if name == "lp":
        row.update(
            {k: plan.notes[k] for k in ("optimum", "optimum_fraction", "trees", "certificate") if k in plan.notes}
        )
    return row


def _print_bounds(report: dict) -> None:
    """Each distinct throughput bound of the rows, one line each."""
    bounds = {
        (
            r["bandwidth"]["bound"]["algbw_gbps"],
            r["bandwidth"]["bound"]["partition"],
            r["bandwidth"]["bound"]["links"],
        )
        for r in report.values()
    }
    for gbps, partition, links in sorted(bounds):
        print(f"throughput bound ({partition} partition, {links} links): {gbps:.2f} GB/s of algorithm bandwidth")


def run_gather(args: argparse.Namespace, nbytes: float) -> int:
    """``plan allreduce --collective allgather|reducescatter``: ``ring`` and ``lp``, priced as the all-reduce."""
    if args.planner not in ("all", *GATHER_PLANNERS):
        raise PlanError(
            f"unknown {args.collective} planner {args.planner!r}; choose one of {', '.join(GATHER_PLANNERS)}"
        )
    topology = topology_from_args(args)
    plans, report = [], {}
    for name in _chosen(args, GATHER_PLANNERS):
        plan = plan_collective(args.collective, name, topology, nbytes)
        plans.append(plan)
        report[name] = {
            "modeled_seconds": price(plan, topology)["modeled_seconds"],
            "bandwidth": plan.notes["bandwidth"],
        }
        report[name].update(
            {
                k: plan.notes[k]
                for k in ("normalized_time", "optimum", "optimum_fraction", "certificate", "synthesis", "arborescences")
                if k in plan.notes
            }
        )
    _finish(args, plans, [d.id for d in topology.workers], {"collective": args.collective, "planners": report})
    if not args.json:
        bound = next(iter(report.values()))["bandwidth"]["bound"]
        print(
            f"throughput bound (all-gather cut, {bound['partition']}): {bound['algbw_gbps']:.2f} GB/s "
            "of algorithm bandwidth"
        )
    return 0


@progress.reported("plan")
def run_broadcast(args: argparse.Namespace) -> int:
    check_outputs(args, "--out", "--png")
    topology = topology_from_args(args)
    plan = plan_broadcast(topology, args.root, args.bytes)
    row = {
        "normalized_time": plan.notes["normalized_time"],
        "modeled_seconds": price(plan, topology)["modeled_seconds"],
        **{k: plan.notes[k] for k in ("optimum", "optimum_fraction", "arborescences_rate")},
    }
    _finish(args, [plan], [d.id for d in topology.workers], {"planners": {"arborescence": row}})
    if not args.json:
        print(f"rate {row['arborescences_rate']:.3f} links: as fast as that many edge-disjoint arborescences")
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
    if args.json:
        print(json.dumps({"src": src, "gpus": gpus, "bytes": nbytes, "planners": report}))
        return 0
    base = report.get("direct", {}).get("seconds")
    for name, row in report.items():
        ratio = f"  ({base / row['seconds']:.2f}x direct)" if base and name != "direct" else ""
        print(
            f"{name:>8}: {row['seconds'] * 1e3:10.3f} ms simulated, bound {row['bound_seconds'] * 1e3:10.3f} ms{ratio}"
        )
        for part in row["paths"]:
            print(f"          {part['gpu']:<6} {part['bytes'] / 1e6:12.2f} MB  {' > '.join(part['devices'])}")
    print("simulated only: commgraph has no executor for a split copy yet (one GPU or none has no second path)")
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


def _finish(args: argparse.Namespace, plans, devices, result: dict) -> None:
    if args.out:
        plans[0].save(args.out)
        wrote(args.out)
    if args.png:
        plot_traffic(plans, devices, args.png)
        wrote(args.png)
    if args.json:
        print(json.dumps(result))
        return
    for name, row in result["planners"].items():
        print(_row_text(name, row))
    if "typed" in result:
        _print_typed(result["typed"])
    if result.get("lower_bound") is not None:
        print(f"lower bound (Lemma 2.1): {result['lower_bound']:.4f}")


def _row_text(name: str, row: dict) -> str:
    """One planner's line: modeled time, then its normalized time and bandwidth, or its bytes and
    busiest link."""
    text = f"{name:>10}: modeled {row['modeled_seconds'] * 1e6:12.2f} us"
    if "normalized_time" in row or "bandwidth" in row:
        if "normalized_time" in row:
            text += f"   normalized time {row['normalized_time']:.4f}"
        if "trees" in row:
            text += f" (= {row['optimum_fraction']}, {len(row['trees'])} trees)"
        if "arborescences" in row:
            text += f" (= {row['optimum_fraction']}, {row['arborescences']} arborescences)"
        if "bandwidth" in row:
            band = row["bandwidth"]
            text += (
                f"   algbw {band['algbw_gbps']:.2f} GB/s (busbw {band['busbw_gbps']:.2f}), "
                f"{band['of_bound']:.3f} of the bound"
            )
        if "certificate" in row:
            family = "tree" if "trees" in row else "arborescence"
            text += f"; certificate: no {family} schedule beats {row['certificate']['algbw_gbps_at_most']:.2f} GB/s"
    else:
        busiest = row["busiest_link"]
        text += f"   {row['bytes'] / 1e6:10.3f} MB in {row['stages']} stage(s)"
        if busiest:
            text += f"   busiest {busiest['link']} ({busiest['kind']})"
        if "fallback" in row:
            text += "   [p2p: trees priced slower]"
        if "total_duplicated_nodes" in row:
            text += (
                f"   no exchange; {row['total_duplicated_nodes']:,} duplicated nodes, "
                f"{row['extra_memory_bytes'] / 1e6:.2f} MB"
            )
    return text


def _print_typed(typed: dict) -> None:
    """A typed set's halo rows per layer by node type and by relation, a line each."""
    for key, what in (("by_type", "node type"), ("by_relation", "relation (a row two relations read in each)")):
        cells = ", ".join(f"{name} {human_bytes(v)}" for name, v in typed[key].items())
        print(f"halo rows per layer by {what}: {cells}")
