"""``commgraph sim llm``: one training iteration of a large language model (tensor, pipeline,
data and expert parallelism, 1F1B or interleaved 1F1B) simulated on a topology under each coflow
scheduler: fair sharing, Lina, Varys, Sincronia and Hermod (exact and 6-bit DSCP)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from commgraph.cli import describe, pick_names
from commgraph.errors import SimulationError
from commgraph.plan.coflow import MATCHINGS, SCHEDULERS, run_schedule
from commgraph.plan.coflow_plot import plot_schedulers, write_trace
from commgraph.topology import parse_speeds, resolve_topology
from commgraph.workload import DEFAULT_LAYOUT, GPUS, MODELS, Layout, build_iteration, gpu, model

PCIE_GEN5 = 64.0  # GB/s per direction, x16: the H100 servers' GPU-NIC path


def register(subparsers) -> None:
    sim = subparsers.add_parser("llm", help="one LLM training iteration under one or all coflow schedulers",
                                description=describe(__doc__))
    sim.add_argument("--model", required=True, choices=sorted(MODELS))
    sim.add_argument("--tp", type=int, help="tensor-parallel degree (default: Table 5.5's for the model)")
    sim.add_argument("--pp", type=int, help="pipeline stages (default: Table 5.5's)")
    sim.add_argument("--dp", type=int, default=1, help="data-parallel replicas")
    sim.add_argument("--ep", type=int, help="expert-parallel degree (default: Table 5.5's)")
    sim.add_argument("--microbatches", type=int, default=8, help="micro-batches per iteration")
    sim.add_argument("--schedule", choices=("1f1b", "interleaved"), default="1f1b",
                     help="pipeline schedule: 1F1B or Megatron's interleaved 1F1B")
    sim.add_argument("--chunks", type=int, help="model chunks per device for interleaved 1F1B (default 2)")
    sim.add_argument("--gpu", choices=sorted(GPUS), default="h100", help="GPU whose peak FLOP/s prices compute")
    sim.add_argument("--efficiency", type=float, default=0.5, help="fraction of peak FLOP/s reached")
    sim.add_argument("--topology", required=True, metavar="TOPOLOGY",
                     help="a preset (NxPRESET-ib, fattree:k=K,server=PRESET[,rail=1][,bisection=full]) or YAML")
    sim.add_argument("--network-gbps", type=float, default=100.0, help="network link speed in Gbit/s (IB links)")
    sim.add_argument("--speeds", metavar="K=GBPS,...", help=f"other link speeds in GB/s (pcie defaults to {PCIE_GEN5})")
    sim.add_argument("--scheduler", default="all", help=f"'all' or a comma list of {','.join(SCHEDULERS)}")
    sim.add_argument("--matching", choices=MATCHINGS,
                     help="how EP all-to-alls send (default: alg3 for hermod, direct for the others)")
    sim.add_argument("--dp-allreduce", choices=("ring", "tree"), default="ring")
    sim.add_argument("--routing-alpha", type=float, default=4.0,
                     help="Dirichlet concentration of expert popularity (smaller: more skewed tokens)")
    sim.add_argument("--seed", type=int, default=0, help="seed of the expert-parallel token-routing skew")
    sim.add_argument("--json", action="store_true", help="print the comparison as JSON")
    sim.add_argument("--png", type=Path, metavar="timeline.png", help="draw each scheduler's timeline")
    sim.add_argument("--trace", type=Path, metavar="FILE", help="write a Chrome/Perfetto trace JSON")
    sim.set_defaults(run=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    names = pick_names(args.scheduler, SCHEDULERS, "scheduler", SimulationError)
    if not (math.isfinite(args.network_gbps) and args.network_gbps > 0):
        raise SimulationError(f"--network-gbps must be > 0, got {args.network_gbps}")
    spec = model(args.model)
    tp, pp, ep = DEFAULT_LAYOUT[args.model]
    chunks = args.chunks or (2 if args.schedule == "interleaved" else 1)
    layout = Layout(args.tp or tp, args.pp or pp, args.dp, args.ep or ep, args.microbatches, args.schedule, chunks)
    speeds = {"pcie": PCIE_GEN5, "ib": args.network_gbps / 8, **parse_speeds(args.speeds)}
    topology = resolve_topology(args.topology, device="auto", speeds=speeds)
    iteration = build_iteration(spec, layout, gpu(args.gpu, args.efficiency), topology,
                                dp_allreduce=args.dp_allreduce, routing_alpha=args.routing_alpha, seed=args.seed)
    outcomes = {name: run_schedule(name, iteration.tasks, iteration.coflows, topology,
                                   interleaved=layout.schedule == "interleaved", matching=args.matching,
                                   timeline=False)
                for name in names}
    report = {"schedulers": {name: o.summary(iteration.tokens) for name, o in outcomes.items()},
              "flows": iteration.flows}
    if args.png:
        plot_schedulers(outcomes, iteration.leaders[:: layout.dp][: 16], args.png)
    if args.trace:
        write_trace(outcomes, args.trace)
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{spec.name} tp={layout.tp} pp={layout.pp} dp={layout.dp} ep={layout.ep} m={layout.microbatches} "
          f"{layout.schedule} on {topology.name} ({layout.gpus} GPUs, {args.network_gbps:g} Gbit/s): "
          f"{len(iteration.coflows)} coflows, {iteration.flows} flows")
    base = report["schedulers"][names[0]]["iteration_seconds"]
    print(f"  {'scheduler':<12} {'iteration s':>12} {'tokens/s':>12} {'vs ' + names[0]:>10}  coflow mean completion (ms)")
    for name, row in report["schedulers"].items():
        ccts = "  ".join(f"{kind} {c['mean_seconds'] * 1e3:.2f}" for kind, c in row["coflows"].items())
        print(f"  {name:<12} {row['iteration_seconds']:12.4f} {row['tokens_per_second']:12.0f} "
              f"{base / row['iteration_seconds']:9.3f}x  {ccts}")
    for path, what in ((args.png, "timeline"), (args.trace, "trace")):
        if path:
            print(f"{what} written to {path}")
    return 0
