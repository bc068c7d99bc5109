"""Coflow schedulers on simulated LLM training in the Hermod thesis's setting (issue 33): Table 5.5's
layouts on a full-bisection fat-tree of 8-GPU H100 servers with one network link per server (``nics``)
and 1 us links, several iterations back to back without a barrier (steady-state iteration time),
ZeRO-2's reduce-scatter and all-gather for DP, MoE models with as many micro-batches as pipeline
stages and Hermod's Algorithm 3 all-to-alls (``--hermod-matching direct``: Hermod's coflow order
with the all-to-alls sent directly, a variant, not the thesis's Hermod). ``--ep-flows server`` sends
the MoE all-to-alls server to server (one flow per pair of servers, the EP groups over those servers
summed: a coarser model, :func:`commgraph.workload.build_iteration`) so that the MoE cases fit; rows
say which they use.

Every row gives Megatron-LM's (one DP stream, FIFO: the baseline), Lina's, Hermod's and Sincronia's
(a generic coflow order, BSSI) steady-state iteration time (``--schedulers`` picks others; Megatron
first), the same DAG with free communication (an oracle: every byte moves in no time; the ceiling
T(megatron) / T(free)), the link bound (the busiest link direction's bytes per iteration over its
bandwidth), each scheduler over Megatron, and the **floor**
(:func:`commgraph.workload.floor.iteration_floor`: every dependency kept, each link's bytes priced
in the windows where they can move) beside each scheduler's makespan of all the iterations, which
it bounds whatever the replicas' phase: each makespan over the floor, and the share of the
makespan headroom Hermod closes, (M(megatron) - M(hermod)) / (M(megatron) - floor), beside the
period's against the oracle. ``--routing spray`` sprays every flow over the
fat-tree's equal-cost paths instead of hashing it onto one (ECMP, the default);
``--barrier`` and ``--fp32-grads`` are Megatron-LM's variants (clip-by-norm's iteration barrier,
gradients reduced in fp32), applied to the DAG every scheduler runs; ``--routing-alpha`` the MoE
token skew.

Parts (``--part``; ``--models``, ``--gpus`` and ``--gbps`` narrow a part to some of its cases):

- ``scale``: GPT-3 175B and Mixtral 8x22B on 256 / 1,024 / 2,048 / 4,096 / 8,192 GPUs at 100 Gbit/s (256 GPUs:
  the first 32 servers of a k=6 fat-tree);
- ``bandwidth``: both models on 1,024 GPUs at 40 / 100 / 400 Gbit/s;
- ``nics``: the sensitivity run: 8 NICs per server (one per GPU), 1,024 GPUs, 100 Gbit/s;
- ``qwen``: qwen-moe-24l on 1,024 GPUs at 100 Gbit/s, timed (target: 10 minutes);
- ``engine``: wall time and peak memory of building and simulating ``--models`` (default GPT-3
  175B) under Hermod on 1,024 and 8,192 GPUs (target: 8,192 GPUs in 60 s; Mixtral 8x22B with
  per-GPU all-to-alls, ``--models mixtral-8x22b --gpus 1024 --routing spray``: 10 minutes, 8 GB);
- ``heuristics``: Table 5.2's naive priorities (DP-first, PP-first, EP-first) against Megatron on
  ``--models`` (default Mixtral 8x22B) at 1,024 GPUs.

``--breakdown`` prints after each row the wall time of building the DAG, scheduling it and
simulating it per scheduler.

    python benchmarks/llm_schedulers.py --part scale --models gpt3-175b --gpus 1024
"""

from __future__ import annotations

import argparse
import resource
import time

from commgraph.plan.coflow import MATCHINGS, schedule
from commgraph.plan.coflow import SCHEDULERS as COFLOW_SCHEDULERS
from commgraph.sim import progress, simulate
from commgraph.study import SchedulerComparison, compare_schedulers
from commgraph.topology import load_preset
from commgraph.workload import DEFAULT_LAYOUT, Layout, build_iteration, gpu, model
from commgraph.workload.iteration import DP_COLLECTIVES, EP_FLOWS

MODELS = ("gpt3-175b", "mixtral-8x22b")
FAT_TREE_K = {
    128: 4,
    256: 6,
    512: 8,
    1024: 8,
    2048: 12,
    4096: 14,
    8192: 16,
}  # smallest k-ary fat-tree with GPUs / 8 servers
SCHEDULERS = ("megatron", "lina", "hermod", "sincronia")


def topology(gpus: int, gbps: float, nics: int, routing: str = "ecmp"):
    """The thesis's cluster (``hermod-thesis`` at 1,024 GPUs) grown to ``gpus``."""
    return load_preset(
        f"fattree:k={FAT_TREE_K[gpus]},server=hgx-h100,nics={nics},latency=1,bisection=full",
        speeds={"ib": gbps / 8, "pcie": 64.0},
    ).with_routing(routing)


def microbatches(name: str, args: argparse.Namespace) -> int:
    """``--microbatches``, or for MoE models the pipeline depth when ``--moe-microbatches`` is 0."""
    if not model(name).moe:
        return args.microbatches
    return args.moe_microbatches or DEFAULT_LAYOUT[name][1]


def layout(name: str, gpus: int, args: argparse.Namespace) -> Layout:
    """Table 5.5's degrees for ``name``, data parallelism filling ``gpus``."""
    tp, pp, ep = DEFAULT_LAYOUT[name]
    return Layout(tp, pp, gpus // (tp * pp), ep, microbatches(name, args))


def dag_options(args: argparse.Namespace) -> dict:
    """The DAG options every case is built with (:func:`commgraph.workload.build_iteration`'s)."""
    return {
        "dp_collective": args.dp_collective,
        "ep_flows": args.ep_flows,
        "routing_alpha": args.routing_alpha,
        "barrier": args.barrier,
        "grad_bytes": 4.0 if args.fp32_grads else 2.0,
    }


def iteration(name: str, gpus: int, gbps: float, nics: int, args: argparse.Namespace):
    net = topology(gpus, gbps, nics, args.routing)
    shape = layout(name, gpus, args)
    return net, build_iteration(model(name), shape, gpu("h100"), net, iterations=args.iterations, **dag_options(args))


def compare(name: str, gpus: int, gbps: float, nics: int, args: argparse.Namespace) -> tuple[SchedulerComparison, dict]:
    """One case's comparison (:func:`commgraph.study.compare_schedulers`: each scheduler's
    steady-state iteration time, the free-communication time, the link bound and the floor), and
    the wall time of its steps: building the DAG, scheduling it (Algorithm 3 included) and
    simulating it (the simulator's own DAG checks and flow tables included) per scheduler, the free
    communication and the floor."""
    parts, clock = {}, [time.perf_counter()]

    def timed(label: str) -> None:
        now = time.perf_counter()
        parts[label] = now - clock[0]
        clock[0] = now

    comparison = compare_schedulers(
        model(name),
        layout(name, gpus, args),
        gpu("h100"),
        topology(gpus, gbps, nics, args.routing),
        list(args.schedulers),
        iterations=args.iterations,
        matching={"hermod": args.hermod_matching},
        keep_outcomes=False,
        progress=timed,
        **dag_options(args),
    )
    return comparison, parts


def header(args: argparse.Namespace) -> None:
    others = args.schedulers[1:]
    print(
        f"| case | m | flows | {' | '.join(s + ' s' for s in args.schedulers)} | free s (oracle) | ceiling "
        f"| link bound s | {' | '.join(s + ' / megatron' for s in others)} | floor s (makespan) "
        f"| {' | '.join(s + ' makespan / floor' for s in args.schedulers)} | hermod headroom closed (makespan) "
        f"| of oracle headroom | wall s |"
    )
    print("|---" * (10 + 3 * len(args.schedulers) - 1) + "|")


def line(label: str, comparison: SchedulerComparison, wall: float, args: argparse.Namespace) -> None:
    rows, top = comparison.schedulers, comparison.ceiling
    base, free, floor = top["baseline_seconds"], top["free_communication_seconds"], top["floor_seconds"]
    span, focus = rows["megatron"]["makespan_seconds"], "hermod" if "hermod" in args.schedulers else args.schedulers[-1]

    def closed(top: float, mine: float, bottom: float) -> str:
        return f"{(top - mine) / (top - bottom):.0%}" if top - bottom > 1e-12 * top else "-"

    times = " | ".join(f"{rows[s]['iteration_seconds']:.3f}" for s in args.schedulers)
    ratios = " | ".join(f"{rows[s]['speedup']:.3f}x" for s in args.schedulers[1:])
    above = " | ".join(f"{rows[s]['makespan_seconds'] / floor:.3f}x" for s in args.schedulers)
    it = comparison.iteration
    print(
        f"| {label} | {it.layout.microbatches} | {it.flows:,} | {times} | {free:.3f} | "
        f"{top['ceiling']:.3f}x | {top['link_seconds']:.3f} | {ratios} | {floor:.3f} | {above} | "
        f"{closed(span, rows[focus]['makespan_seconds'], floor)} | "
        f"{closed(base, rows[focus]['iteration_seconds'], free)} | {wall:.0f} |",
        flush=True,
    )
    print(f"  floor binds at: {top['floor_binding']}", flush=True)


def sweep(title: str, cases: list[tuple[str, int, float, int]], args: argparse.Namespace) -> None:
    print(
        f"\n{title} ({args.iterations} iterations, {args.dp_collective}, ep flows per {args.ep_flows}, "
        f"hermod matching {args.hermod_matching}, routing {args.routing}, alpha {args.routing_alpha:g}"
        f"{', barrier' if args.barrier else ''}{', fp32 gradients' if args.fp32_grads else ''})"
    )
    header(args)
    for name, gpus, gbps, nics in cases:
        comparison, parts = compare(name, gpus, gbps, nics, args)
        line(f"{name} {gpus:,} GPUs {gbps:g} Gbit/s nics={nics}", comparison, sum(parts.values()), args)
        if args.breakdown:
            print("  wall s: " + ", ".join(f"{part} {seconds:.1f}" for part, seconds in parts.items()), flush=True)


def engine(args: argparse.Namespace) -> None:
    """Per model and GPU count: build the DAG and Hermod's schedule, drop the unscheduled DAG (only
    its iterations' ends are kept), then simulate; wall times and the peak RSS so far."""
    for name in args.models.split(","):
        print(
            f"\nengine: {name}, {args.iterations} iterations, hermod ({args.hermod_matching}), 100 Gbit/s, nics=1, "
            f"routing {args.routing}, ep flows per {args.ep_flows}"
        )
        print("| GPUs | tasks | flows | build + schedule s | simulate s | total s | peak RSS GB | makespan s |")
        print("|---|---|---|---|---|---|---|---|")
        for gpus in args.gpus:
            with progress.reporting(f"engine {name} {gpus} GPUs"):  # progress on stderr after 5 s
                start = time.perf_counter()
                progress.stage("building and scheduling")
                net, it = iteration(name, gpus, 100.0, 1, args)
                plan = schedule("hermod", it.tasks, it.coflows, net, matching=args.hermod_matching)
                flows = it.flows
                del it
                built = time.perf_counter() - start
                start = time.perf_counter()
                progress.stage("simulating")
                result = simulate(net, plan.tasks, timeline=False)
                simulated = time.perf_counter() - start
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
            print(
                f"| {gpus:,} | {len(plan.tasks):,} | {flows:,} | {built:.1f} | {simulated:.1f} | "
                f"{built + simulated:.1f} | {rss:.2f} | {result.makespan!r} |",
                flush=True,
            )
            del plan, result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("scale", "bandwidth", "nics", "qwen", "engine", "heuristics"), required=True)
    parser.add_argument("--models", default=",".join(MODELS), help="models of the scale and bandwidth parts")
    parser.add_argument("--gpus", default="", help="comma list of GPU counts (default: the part's)")
    parser.add_argument("--gbps", default="", help="comma list of link speeds in Gbit/s (bandwidth part)")
    parser.add_argument("--iterations", type=int, default=3, help="iterations without a barrier")
    parser.add_argument("--dp-collective", choices=DP_COLLECTIVES, default="zero2")
    parser.add_argument(
        "--ep-flows",
        choices=EP_FLOWS,
        default="gpu",
        help="MoE all-to-alls GPU to GPU per EP group, or server to server (coarser)",
    )
    parser.add_argument(
        "--hermod-matching",
        choices=MATCHINGS,
        default="alg3",
        help="how hermod sends EP all-to-alls: alg3 (the thesis's Algorithm 3), bvn, or direct "
        "(every pair at once: Hermod's coflow order alone)",
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="after each row, the wall time of building, scheduling and simulating"
    )
    parser.add_argument(
        "--routing",
        choices=("ecmp", "spray"),
        default="ecmp",
        help="per-flow ECMP hashing, or every flow sprayed over the fat-tree's equal-cost paths",
    )
    parser.add_argument(
        "--routing-alpha",
        type=float,
        default=1.0,
        help="Dirichlet concentration of MoE expert popularity (inf: uniform)",
    )
    parser.add_argument(
        "--barrier",
        action="store_true",
        help="clip-by-norm's iteration barrier: no update before every gradient is reduced",
    )
    parser.add_argument("--fp32-grads", action="store_true", help="reduce gradients in fp32 (Megatron-LM's default)")
    parser.add_argument("--microbatches", type=int, default=8, help="micro-batches per iteration (dense models)")
    parser.add_argument(
        "--moe-microbatches",
        type=int,
        default=0,
        help="micro-batches for the MoE models (0: as many as pipeline stages)",
    )
    parser.add_argument(
        "--schedulers",
        default="",
        help=f"comma list, megatron first (default: {','.join(SCHEDULERS)}; the heuristics part: Table 5.2's)",
    )
    args = parser.parse_args(argv)
    table = ("megatron", "dp-first", "pp-first", "ep-first") if args.part == "heuristics" else SCHEDULERS
    args.schedulers = tuple(args.schedulers.split(",")) if args.schedulers else table
    if args.schedulers[0] != "megatron" or set(args.schedulers) - set(COFLOW_SCHEDULERS):
        parser.error(f"--schedulers: megatron first, then some of {', '.join(COFLOW_SCHEDULERS)}")
    if args.part == "heuristics" and args.models == ",".join(MODELS):
        args.models = "mixtral-8x22b"
    if args.part == "engine" and args.models == ",".join(MODELS):
        args.models = "gpt3-175b"
    models = args.models.split(",")
    default_gpus = {"engine": "1024,8192", "scale": ",".join(map(str, FAT_TREE_K))}.get(args.part, "1024")
    args.gpus = [int(g) for g in (args.gpus or default_gpus).split(",")]
    if set(args.gpus) - set(FAT_TREE_K):
        parser.error(f"--gpus must be among {', '.join(map(str, FAT_TREE_K))}")
    speeds = [float(g) for g in (args.gbps or ("40,100,400" if args.part == "bandwidth" else "100")).split(",")]
    if args.part == "scale":
        sweep("scale, 100 Gbit/s per server", [(m, g, 100.0, 1) for m in models for g in args.gpus], args)
    elif args.part == "bandwidth":
        sweep("bandwidth, 1,024 GPUs", [(m, g, s, 1) for m in models for g in args.gpus for s in speeds], args)
    elif args.part == "nics":
        sweep("sensitivity: 8 NICs per server", [(m, g, s, 8) for m in models for g in args.gpus for s in speeds], args)
    elif args.part == "heuristics":
        sweep("Table 5.2's heuristics", [(m, g, s, 1) for m in models for g in args.gpus for s in speeds], args)
    elif args.part == "qwen":
        sweep("qwen-moe-24l", [("qwen-moe-24l", g, s, 1) for g in args.gpus for s in speeds], args)
    else:
        engine(args)


if __name__ == "__main__":
    main()
