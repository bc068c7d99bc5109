"""``commgraph sim llm``: training iterations of a large language model (tensor, pipeline,
data and expert parallelism, 1F1B or interleaved 1F1B, all-reduce or ZeRO-2) simulated on a
topology under each coflow scheduler: Megatron-LM, fair sharing, Lina, Varys, Sincronia and Hermod
(exact and 6-bit DSCP), beside the ceiling: the same DAG with free communication."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from commgraph.cli import describe, pick_names
from commgraph.cli.args import add_force, add_format, add_png, add_speeds_argument, check_outputs, emit, wrote
from commgraph.errors import SimulationError
from commgraph.plan.coflow import MATCHINGS, SCHEDULERS
from commgraph.render.pictures import draw_bars, scheduler_bars
from commgraph.render.schedulers import scheduler_report
from commgraph.render.units import seconds
from commgraph.sim import progress
from commgraph.study import SchedulerComparison, compare_schedulers
from commgraph.study.coflow_plot import write_trace
from commgraph.topology import parse_speeds, resolve_topology, speeds_of, speeds_rule
from commgraph.topology.model import ROUTINGS
from commgraph.workload import DEFAULT_LAYOUT, GPUS, MODELS, Layout, gpu, model
from commgraph.workload.iteration import DP_COLLECTIVES


def register(subparsers) -> None:
    sim = subparsers.add_parser(
        "llm", help="one LLM training iteration under one or all coflow schedulers", description=describe(__doc__)
    )
    sim.add_argument("--model", required=True, choices=sorted(MODELS), help="the model trained (Table 5.5's)")
    _add_layout(sim)
    _add_fabric(sim)
    _add_iteration(sim)
    _add_run(sim)
    add_format(sim)
    add_png(sim, "bars of each scheduler's iteration time beside free communication (the ceiling) and the floor")
    sim.add_argument("--trace", type=Path, metavar="FILE.json", help="write a Chrome/Perfetto trace JSON")
    add_force(sim)
    sim.set_defaults(run=run_simulate)


def _add_layout(sim) -> None:
    """The model's parallel degrees, its pipeline schedule and the GPU pricing compute."""
    sim.add_argument("--tp", type=int, help="tensor-parallel degree (default: Table 5.5's for the model)")
    sim.add_argument("--pp", type=int, help="pipeline stages (default: Table 5.5's)")
    sim.add_argument("--dp", type=int, help="data-parallel replicas (default: the topology's GPUs / (tp x pp))")
    sim.add_argument("--ep", type=int, help="expert-parallel degree (default: Table 5.5's)")
    sim.add_argument("--microbatches", type=int, default=8, help="micro-batches per iteration")
    sim.add_argument(
        "--schedule",
        choices=("1f1b", "interleaved"),
        default="1f1b",
        help="pipeline schedule: 1F1B or Megatron's interleaved 1F1B",
    )
    sim.add_argument("--chunks", type=int, help="model chunks per device for interleaved 1F1B (default: 2)")
    sim.add_argument("--gpu", choices=sorted(GPUS), default="h100", help="GPU whose peak FLOP/s prices compute")
    sim.add_argument("--efficiency", type=float, default=0.5, help="fraction of peak FLOP/s reached")


def _add_fabric(sim) -> None:
    """The topology, its link speeds and routing."""
    sim.add_argument(
        "--topology",
        required=True,
        metavar="TOPOLOGY",
        help="a preset (commgraph topo list; clusters: NxPRESET-ib, "
        "fattree:k=K,server=PRESET[,rail=1][,bisection=full]) or a YAML file",
    )
    sim.add_argument(
        "--network-gbits",
        type=float,
        metavar="GBIT_S",
        help="override the network (InfiniBand) links' speed, in Gbit/s (default: the topology's)",
    )
    sim.add_argument("--network-gbps", type=float, dest="network_gbits", help=argparse.SUPPRESS)
    add_speeds_argument(sim, "override other link speeds, in GB/s (e.g. pcie=64)")
    sim.add_argument(
        "--routing",
        choices=ROUTINGS,
        help="how the fabric uses equal-cost paths: ecmp (per-flow hash) or spray (every flow split "
        "evenly over them); default: the topology's (ecmp unless its YAML says otherwise)",
    )


def _add_iteration(sim) -> None:
    """The schedulers compared and how the iteration communicates."""
    sim.add_argument(
        "--scheduler", default="all", metavar="NAME[,NAME]", help=f"all, or some of {', '.join(SCHEDULERS)}"
    )
    sim.add_argument(
        "--matching",
        choices=MATCHINGS,
        help="how EP all-to-alls send (default: alg3 for hermod, direct for the others)",
    )
    sim.add_argument(
        "--dp-allreduce",
        choices=("ring", "tree"),
        default="ring",
        help="the algorithm of the data-parallel gradient all-reduce",
    )
    sim.add_argument(
        "--dp-collective",
        choices=DP_COLLECTIVES,
        default="allreduce",
        help="DP gradients: one all-reduce per layer, or ZeRO-2's reduce-scatter + all-gather",
    )
    sim.add_argument(
        "--barrier",
        action="store_true",
        help="clip-by-norm's iteration barrier: no parameter update before every gradient is reduced",
    )
    sim.add_argument(
        "--fp32-grads",
        action="store_true",
        help="reduce gradients in fp32 (Megatron-LM's default for bf16 models) instead of bf16",
    )


def _add_run(sim) -> None:
    """How many iterations, on which GPUs, with which token-routing skew."""
    sim.add_argument(
        "--iterations",
        type=int,
        default=1,
        help="iterations run back to back without a barrier (clip-by-value); > 1 reports the "
        "steady-state iteration time",
    )
    sim.add_argument(
        "--idle-gpus", action="store_true", help="allow tp x pp x dp below the topology's GPUs (the rest stay idle)"
    )
    sim.add_argument(
        "--routing-alpha",
        type=float,
        default=4.0,
        help="Dirichlet concentration of expert popularity (smaller: more skewed tokens)",
    )
    sim.add_argument("--seed", type=int, default=0, help="seed of the expert-parallel token-routing skew")


@progress.reported("sim llm")
def run_simulate(args: argparse.Namespace) -> int:
    names = pick_names(args.scheduler, SCHEDULERS, "scheduler", SimulationError)
    check_outputs(args, "--png", "--trace")
    speeds, topology = _topology(args)
    layout = layout_of(args, len(topology.gpus))
    if args.iterations < 1:
        raise SimulationError(f"--iterations must be >= 1, got {args.iterations}")
    spec = model(args.model)
    comparison = compare_schedulers(
        spec,
        layout,
        gpu(args.gpu, args.efficiency),
        topology,
        names,
        iterations=args.iterations,
        matching=args.matching,
        dp_allreduce=args.dp_allreduce,
        routing_alpha=args.routing_alpha,
        seed=args.seed,
        dp_collective=args.dp_collective,
        barrier=args.barrier,
        grad_bytes=4.0 if args.fp32_grads else 2.0,
    )
    rule = speeds_rule(args.topology, speeds)
    report = {**comparison.to_dict(), "routing": topology.routing, "speeds": None if rule is None else rule.to_dict()}
    if args.png:
        draw_bars(scheduler_bars(report), args.png)
        wrote(args.png)
    if args.trace:
        write_trace(comparison.outcomes, args.trace)
        wrote(args.trace)
    emit(args, scheduler_report(report, _header(args, spec, layout, topology, speeds, comparison)))
    return 0


def _topology(args: argparse.Namespace):
    """The ``--speeds`` overrides (``--network-gbits`` as ``ib``) and the topology they give."""
    if args.network_gbits is not None and not (math.isfinite(args.network_gbits) and args.network_gbits > 0):
        raise SimulationError(f"--network-gbits must be > 0 (Gbit/s), got {args.network_gbits}")
    speeds = parse_speeds(args.speeds)
    if args.network_gbits is not None:
        speeds["ib"] = args.network_gbits / 8
    topology = resolve_topology(args.topology, device="auto", speeds=speeds or None)
    if args.routing:
        topology = topology.with_routing(args.routing)
    return speeds, topology


def _header(args, spec, layout: Layout, topology, speeds: dict, comparison: SchedulerComparison) -> tuple[str, ...]:
    """The lines above the table: the run, its link speeds, and the bounds beside the schedulers."""
    iteration, top, baseline = comparison.iteration, comparison.ceiling, comparison.baseline
    network = network_gbits(topology)
    return (
        f"{spec.name} tp={layout.tp} pp={layout.pp} dp={layout.dp} ep={layout.ep} m={layout.microbatches} "
        f"{layout.schedule} {args.dp_collective} on {topology.name} ({layout.gpus} GPUs, "
        f"{f'network {network} Gbit/s' if network else 'no network links'}, {topology.routing}), "
        f"{iteration.iterations} iteration(s): {len(iteration.coflows):,} coflows, {iteration.flows:,} flows",
        f"  link speeds per direction: {speeds_of(args.topology, topology, speeds)}",
        f"  free communication (an oracle): {seconds(comparison.free_seconds)} per iteration; {baseline} exposes "
        f"{top['exposed_share']:.1%} of its iteration, so no scheduler beats {top['ceiling']:.3f}x over it; its "
        f"busiest link needs {seconds(top['link_seconds'])} per iteration, so over many iterations none beats "
        f"{top['bound_ceiling']:.3f}x",
        f"  floor (every dependency kept, link bytes priced where they can move): {seconds(top['floor_seconds'])} "
        f"for all {iteration.iterations} iteration(s) ({top['floor_binding']}): no scheduler finishes them "
        f"sooner, so none beats {top['floor_ceiling']:.3f}x over {baseline}'s makespan; headroom reached is "
        f"measured on the makespan against it",
    )


def network_gbits(topology) -> str:
    """The speeds of the topology's network links (InfiniBand, Ethernet) in Gbit/s, e.g. ``400``;
    empty where it has none."""
    speeds = sorted({link.bandwidth_gbps * 8 for link in topology.links if link.kind in ("infiniband", "ethernet")})
    return "/".join(f"{s:g}" for s in speeds)


def layout_of(args: argparse.Namespace, gpus: int) -> Layout:
    """The layout the options give (Table 5.5's degrees where left out, ``dp`` filling the
    topology); it must use every GPU unless ``--idle-gpus``."""
    tp, pp, ep = DEFAULT_LAYOUT[args.model]
    tp, pp, ep = (
        tp if args.tp is None else args.tp,
        pp if args.pp is None else args.pp,
        ep if args.ep is None else args.ep,
    )
    for name, value in (
        ("tp", tp),
        ("pp", pp),
        ("ep", ep),
        ("dp", args.dp),
        ("microbatches", args.microbatches),
        ("chunks", args.chunks),
    ):
        if value is not None and value < 1:
            raise SimulationError(f"--{name} must be >= 1, got {value}")
    dp = args.dp if args.dp is not None else max(gpus // (tp * pp), 1)
    chunks = args.chunks or (2 if args.schedule == "interleaved" else 1)
    layout = Layout(tp, pp, dp, ep, args.microbatches, args.schedule, chunks)
    if layout.gpus > gpus:
        raise SimulationError(f"tp x pp x dp = {layout.gpus} GPUs, the topology has {gpus}")
    if layout.gpus != gpus and not args.idle_gpus:
        raise SimulationError(
            f"tp x pp x dp = {tp} x {pp} x {dp} = {layout.gpus} GPUs, the topology has {gpus}: "
            f"change the degrees or pass --idle-gpus to leave {gpus - layout.gpus} idle"
        )
    layout.check(model(args.model))
    return layout
