"""Coflow schedulers on simulated LLM training (issue: Hermod), Table 5.5's simulation layouts on
fat-trees of HGX H100 servers (8 GPUs, 8 NICs each, full bisection), one iteration per run.

Parts (each prints a markdown table; ratios are against ``fair`` and ``lina`` of the same run):

- ``layouts``: the three simulation models on 1,024 GPUs (128 servers, 100 Gbit/s);
- ``scale``: GPT-3 175B on 1,024 / 2,048 / 4,096 / 8,192 GPUs (data parallelism 16..128);
- ``bandwidth``: GPT-3 175B on 1,024 GPUs at 40 / 100 / 200 / 400 Gbit/s;
- ``engine``: wall time, flows and peak memory of simulating one GPT-3 175B iteration on 1,024 and
  8,192 GPUs, against the same engine recomputing every rate at every event (1,024 GPUs only).

    python benchmarks/llm_schedulers.py [--part all] [--microbatches 8] [--moe-microbatches 2]
"""

from __future__ import annotations

import argparse
import resource
import time

from commgraph.plan.coflow import SCHEDULERS, run_schedule, schedule
from commgraph.sim import simulate
from commgraph.topology import load_preset
from commgraph.workload import DEFAULT_LAYOUT, Layout, build_iteration, gpu, model

SIMULATION_MODELS = ("gpt3-175b", "mixtral-8x22b", "qwen-moe-24l")
FAT_TREE_K = {1024: 8, 2048: 12, 4096: 14, 8192: 16}  # smallest k-ary fat-tree with GPUs / 8 servers


def topology(gpus: int, gbps: float):
    return load_preset(f"fattree:k={FAT_TREE_K[gpus]},server=hgx-h100,bisection=full",
                       speeds={"ib": gbps / 8, "pcie": 64.0})


def iteration(name: str, gpus: int, gbps: float, microbatches: int):
    tp, pp, ep = DEFAULT_LAYOUT[name]
    net = topology(gpus, gbps)
    layout = Layout(tp, pp, gpus // (tp * pp), ep, microbatches)
    return net, build_iteration(model(name), layout, gpu("h100"), net)


def compare(name: str, gpus: int, gbps: float, microbatches: int, schedulers: list[str],
            matching: str | None) -> dict[str, float]:
    start = time.perf_counter()
    net, it = iteration(name, gpus, gbps, microbatches)
    tokens = {s: it.tokens / run_schedule(s, it.tasks, it.coflows, net, matching=matching).result.makespan
              for s in schedulers}
    tokens["_flows"] = it.flows
    tokens["_seconds"] = time.perf_counter() - start
    return tokens


def header(schedulers: list[str]) -> None:
    print("| case | flows | " + " | ".join(f"{s} tokens/s" for s in schedulers)
          + " | hermod / fair | hermod / lina | wall s |")
    print("|---" * (len(schedulers) + 5) + "|")


def table(rows: list[tuple[str, dict]], schedulers: list[str]) -> None:
    for label, r in rows:
        cells = " | ".join(f"{r[s]:,.0f}" if s in r else "-" for s in schedulers)
        print(f"| {label} | {r['_flows']:,} | {cells} | {r['hermod'] / r['fair']:.3f}x | "
              f"{r['hermod'] / r['lina']:.3f}x | {r['_seconds']:.0f} |", flush=True)


def engine(microbatches: int) -> None:
    print("| GPUs | tasks | flows | build s | simulate s | full-reallocation s | ratio | peak RSS GB |")
    print("|---|---|---|---|---|---|---|---|")
    for gpus in (1024, 8192):
        start = time.perf_counter()
        net, it = iteration("gpt3-175b", gpus, 100.0, microbatches)
        plan = schedule("hermod", it.tasks, it.coflows, net)
        built = time.perf_counter() - start
        start = time.perf_counter()
        fast = simulate(net, plan.tasks, timeline=False)
        fast_s = time.perf_counter() - start
        slow_s, ratio = "-", "-"
        if gpus == 1024:
            start = time.perf_counter()
            slow = simulate(net, plan.tasks, timeline=False, incremental=False)
            slow_s = time.perf_counter() - start
            assert abs(slow.makespan - fast.makespan) <= 1e-9 * fast.makespan
            slow_s, ratio = f"{slow_s:.1f}", f"{slow_s / fast_s:.2f}x"
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(f"| {gpus:,} | {len(plan.tasks):,} | {it.flows:,} | {built:.1f} | {fast_s:.1f} | {slow_s} | {ratio} | "
              f"{rss:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("all", "layouts", "scale", "bandwidth", "engine"), default="all")
    parser.add_argument("--microbatches", type=int, default=8, help="micro-batches per iteration (GPT-3)")
    parser.add_argument("--moe-microbatches", type=int, default=2,
                        help="micro-batches for the MoE models (their all-to-alls are most of the flows)")
    parser.add_argument("--schedulers", default=",".join(SCHEDULERS))
    parser.add_argument("--models", default=",".join(SIMULATION_MODELS), help="models of the layouts part")
    parser.add_argument("--moe-schedulers", default="fair,lina,hermod",
                        help="schedulers run on the MoE models (each run simulates hundreds of thousands of flows)")
    parser.add_argument("--moe-matching", default="direct", choices=("direct", "alg3", "bvn"),
                        help="EP all-to-all sending for every scheduler on the MoE models")
    args = parser.parse_args()
    schedulers = args.schedulers.split(",")
    parts = ("layouts", "scale", "bandwidth", "engine") if args.part == "all" else (args.part,)
    if "layouts" in parts:
        print("\n1,024 GPUs, 100 Gbit/s, Table 5.5 layouts (dp 16)")
        header(schedulers)
        for name in args.models.split(","):
            dense = not model(name).moe
            m = args.microbatches if dense else args.moe_microbatches
            chosen = schedulers if dense else [s for s in schedulers if s in args.moe_schedulers.split(",")]
            r = compare(name, 1024, 100.0, m, chosen, None if dense else args.moe_matching)
            table([(f"{name} m={m}", r)], schedulers)
    if "scale" in parts:
        print("\nGPT-3 175B, 100 Gbit/s, tp 8 pp 8")
        header(schedulers)
        for gpus in FAT_TREE_K:
            table([(f"{gpus:,} GPUs (dp {gpus // 64})", compare("gpt3-175b", gpus, 100.0, args.microbatches,
                                                               schedulers, None))], schedulers)
    if "bandwidth" in parts:
        print("\nGPT-3 175B, 1,024 GPUs")
        header(schedulers)
        for gbps in (40, 100, 200, 400):
            table([(f"{gbps} Gbit/s", compare("gpt3-175b", 1024, gbps, args.microbatches, schedulers, None))],
                  schedulers)
    if "engine" in parts:
        print(f"\nengine: one GPT-3 175B iteration (m={args.microbatches}, hermod)")
        engine(args.microbatches)


if __name__ == "__main__":
    main()
