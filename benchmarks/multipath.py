"""Multi-path selection figures (issues 20 and 29: LEO's paths, selectors and its key-value store).

1. The thesis's key-value store (section 6.4.2) on its F-NIC testbed host (``leo-fnic``): YCSB-C
   (GETs only) and YCSB-B (5% PUTs, CPU only, ordered per key), 8 B keys, 64 B values, two round
   trips, 8 CPU cores, the accelerator 3x the CPU. Rates from 0.3x the direct paths' capacity
   (every GET on the accelerator) to past every path's capacity together; per point ``--seeds``
   streams of ``--n`` requests, every selector's choices priced on the flow simulator. Median,
   mean and p99 over all seeds' requests; ratios per seed, then their median (min-max). The better
   *faithful* greedy rule is, per seed and metric, the better of ``greedy-intra`` and
   ``greedy-e2e`` (``greedy-queue``, the k = 1 LP that reads the model's queues, is a reference
   only). Sustainable throughput: the highest rate whose median stays under twice ``direct``'s
   median at 0.3x. ``lp`` (k = ``--k``) runs at two loads past saturation, on the first
   ``--lp-seeds`` streams.
2. Host -> GPU copies as a request stream (``--parts copies``): 4 MiB copies from cpu0 to gpu0 at
   1.2x the direct path's capacity on ``hgx-h100``, ``dgx-a100`` and ``hgx-h20`` (``--copy-presets``), ``--copy-n``
   requests per stream, every selector on ``--seeds`` streams and ``lp`` on the first
   ``--lp-seeds``; each selector's mean against lp's on the same stream.
3. Decision time per request, per selector.
4. Bulk host -> GPU copies split by the max-flow LP (``--parts bulk``): MMA's 8 x H20 server
   (``hgx-h20``) against its published 245 GB/s and 4.62x, and 1 GiB on dgx1-v100 (one GPU, all 8).

    python benchmarks/multipath.py [--parts copies,kvs,bulk] [--n 1000] [--copy-n 300] [--copy-presets P,..]
                                   [--seeds 8] [--k 8] [--lp-seeds 4] [--png-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from commgraph.plan.multipath import (
    FAITHFUL_GREEDY,
    LP_SECONDS,
    SELECTORS,
    SolveStats,
    load_workload,
    plan_bulk,
)
from commgraph.sim import simulate
from commgraph.study.plot import plot_sweep
from commgraph.study.selectors import sustainable, sweep
from commgraph.topology import load_preset

LOADS = (0.3, 0.5, 0.7, 0.9, 1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.4, 1.5)
LP_LOADS = (1.1, 1.2)
MIXES = ("c", "b")
HEURISTICS = [n for n in SELECTORS if n != "lp"]
PRACTICAL = ("toll-inflight", "toll-bytes")  # what a dispatcher can run: its own dispatches and completions
TOLLS = (*PRACTICAL, "toll", "toll-jct")
COPY_PRESETS = ("hgx-h100", "dgx-a100", "hgx-h20")
COPY_SPEC = "poisson:load=1.2,size=4M,types=cpu0:gpu0"
PARTS = ("copies", "kvs", "bulk")


def spread(values, digits: int = 3) -> str:
    values = np.asarray(values, dtype=float)
    return f"{np.median(values):.{digits}g} ({values.min():.{digits}g}-{values.max():.{digits}g})"


def per_seed(point, name: str, stat) -> np.ndarray:
    return np.array([stat(j) for j in point.jct[name]])


def better_greedy(point, stat) -> np.ndarray:
    return np.minimum(*(per_seed(point, g, stat) for g in FAITHFUL_GREEDY))


def kvs(n: int, seeds: int, k: int, lp_seeds: int, png_dir: Path | None, decisions: dict[str, list]) -> SolveStats:
    """Both YCSB mixes' tables; returns the lp runs' MILP solves."""
    topology = load_preset("leo-fnic")
    solves = SolveStats()
    for mix in MIXES:
        spec = f"kvs:ycsb={mix},n={n}"
        reference = load_workload(topology, spec + ",load=1")
        direct, combined = reference.direct_rate(), reference.combined_rate()
        start = time.perf_counter()
        points = sweep(topology, spec, list(LOADS), HEURISTICS, k, seeds)
        lp_points = (
            {p.load: p for p in sweep(topology, spec, list(LP_LOADS), ["lp"], k, min(lp_seeds, seeds))}
            if lp_seeds > 0
            else {}
        )
        for point in lp_points.values():
            solves = solves + point.lp_stats["lp"]
        elapsed = time.perf_counter() - start
        for point in points:
            for name in HEURISTICS:
                decisions[name].extend(np.concatenate(point.decide[name]).tolist())
        for point in lp_points.values():
            decisions["lp"].extend(np.concatenate(point.decide["lp"]).tolist())
        bound = 2 * points[0].row("direct")["median_s"]
        print(
            f"\n### {reference.label} on leo-fnic: direct paths {direct / 1e6:.2f} Mrps, every path "
            f"{combined / 1e6:.2f} Mrps; {n} requests x {seeds} seeds per point ({elapsed:.0f} s)\n"
        )
        print("Median completion time, us (all seeds' requests):\n")
        print("| load | Mrps | " + " | ".join(HEURISTICS) + " | lp |")
        print("|---|---|" + "---|" * (len(HEURISTICS) + 1))
        for point in points:
            lp = f"{lp_points[point.load].row('lp')['median_s'] * 1e6:.2f}" if point.load in lp_points else ""
            print(
                f"| {point.load:.2f} | {point.rate / 1e6:.2f} | "
                + " | ".join(f"{point.row(s)['median_s'] * 1e6:.2f}" for s in HEURISTICS)
                + f" | {lp} |"
            )
        print("\nMean and p99, us:\n")
        print("| load | " + " | ".join(HEURISTICS) + " | lp |")
        print("|---|" + "---|" * (len(HEURISTICS) + 1))
        for point in points:
            lp = (
                (
                    f"{lp_points[point.load].row('lp')['mean_s'] * 1e6:.2f} / "
                    f"{lp_points[point.load].row('lp')['p99_s'] * 1e6:.1f}"
                )
                if point.load in lp_points
                else ""
            )
            print(
                f"| {point.load:.2f} | "
                + " | ".join(
                    f"{point.row(s)['mean_s'] * 1e6:.2f} / {point.row(s)['p99_s'] * 1e6:.1f}" for s in HEURISTICS
                )
                + f" | {lp} |"
            )
        print(
            "\nThe practical rules (toll-inflight, toll-bytes) against the better faithful greedy (greedy-intra, "
            "greedy-e2e), per seed; the literal eq. 6.5 beside them (>1: the selector is faster):\n"
        )
        print(
            "| load | "
            + " | ".join(f"{stat}: {s}" for stat in ("median", "mean") for s in TOLLS)
            + " | mean toll-inflight / lp | mean toll-bytes / lp |"
        )
        print("|---|" + "---|" * (2 * len(TOLLS) + 2))
        for point in points:
            if point.load < 0.9:
                continue
            cells = []
            for stat in (np.median, np.mean):
                greedy = better_greedy(point, stat)
                cells += [spread(greedy / per_seed(point, s, stat)) for s in TOLLS]
            for practical in PRACTICAL:
                lp = per_seed(lp_points[point.load], "lp", np.mean) if point.load in lp_points else None
                cells.append(spread(per_seed(point, practical, np.mean)[: lp.size] / lp) if lp is not None else "")
            print(f"| {point.load:.2f} | " + " | ".join(cells) + " |")
        print(
            f"\nSustainable throughput (median under {bound * 1e6:.2f} us = 2x direct's at 0.3x), Mrps, on the "
            f"sweep's grid; per seed:\n"
        )
        print("| selector | sustainable Mrps (seeds pooled) | per seed: median (min-max) |")
        print("|---|---|---|")
        seed_rates = {}
        for name in HEURISTICS:
            singles = []
            for i in range(seeds):
                best = 0.0
                for point in points:
                    if np.median(point.jct[name][i]) > bound:
                        break
                    best = point.rate
                singles.append(best)
            seed_rates[name] = np.array(singles)
            print(f"| {name} | {sustainable(points, name, bound) / 1e6:.2f} | {spread(np.array(singles) / 1e6)} |")
        greedy = np.maximum(*(seed_rates[g] for g in FAITHFUL_GREEDY))
        print(
            "\nSustainable throughput over the better faithful greedy's, per seed: "
            + "; ".join(f"{s}: {spread(seed_rates[s] / greedy)}" for s in TOLLS)
        )
        if png_dir is not None:
            png_dir.mkdir(parents=True, exist_ok=True)
            curves = {
                name: ([p.rate for p in points], [p.row(name)["median_s"] for p in points]) for name in HEURISTICS
            }
            curves["lp"] = ([p.rate for p in lp_points.values()], [p.row("lp")["median_s"] for p in lp_points.values()])
            plot_sweep(
                curves,
                direct,
                combined,
                bound,
                f"leo-fnic: {reference.label}, {seeds} seeds x {n} requests",
                png_dir / f"multipath_kvs_ycsb_{mix}.png",
            )
    return solves


def decision_times(decisions: dict[str, list]) -> None:
    print("\nDecision time per request (the requests each selector decided, every point above):\n")
    print("| selector | mean us | median us | 90th pct us | decisions |")
    print("|---|---|---|---|---|")
    for name in SELECTORS:
        us = np.array(decisions[name]) * 1e6
        if us.size == 0:
            continue
        print(f"| {name} | {us.mean():.2f} | {np.median(us):.2f} | {np.percentile(us, 90):.2f} | {us.size} |")


def copies(n: int, seeds: int, k: int, lp_seeds: int, presets: list[str], decisions: dict[str, list]) -> SolveStats:
    """4 MiB host -> GPU copies as a request stream on each of ``presets``; returns lp's solves."""
    solves = SolveStats()
    print(
        f"\n### Host -> GPU copies as a stream: `{COPY_SPEC},n={n}` (cpu0 -> gpu0 over every candidate path), "
        f"{seeds} seeds, lp (k = {k}) on the first {lp_seeds}\n"
    )
    print(
        "Per seed, then the median (min-max) over seeds. `/ lp`: the selector's mean over lp's mean on the same "
        "stream (<= 1.10: within 10% of the LP); `greedy /`: the better faithful greedy's median over the "
        "selector's (>1: faster).\n"
    )
    print("| host | selector | mean us | median us | mean / lp | greedy / median |")
    print("|---|---|---|---|---|---|")
    for preset in presets:
        topology = load_preset(preset)
        spec = f"{COPY_SPEC},n={n}"
        point = sweep(topology, spec, [1.2], HEURISTICS, k, seeds)[0]
        for name in HEURISTICS:
            decisions[name].extend(np.concatenate(point.decide[name]).tolist())
        lp_point = sweep(topology, spec, [1.2], ["lp"], k, min(lp_seeds, seeds))[0] if lp_seeds > 0 else None
        if lp_point is not None:
            solves = solves + lp_point.lp_stats["lp"]
            decisions["lp"].extend(np.concatenate(lp_point.decide["lp"]).tolist())
        lp_mean = per_seed(lp_point, "lp", np.mean) if lp_point is not None else None
        greedy = better_greedy(point, np.median)
        for name in HEURISTICS + (["lp"] if lp_point is not None else []):
            source = lp_point if name == "lp" else point
            mean, median = per_seed(source, name, np.mean), per_seed(source, name, np.median)
            gap = spread(mean[: lp_mean.size] / lp_mean) if lp_mean is not None else ""
            print(
                f"| {preset} | {name} | {spread(mean * 1e6, 4)} | {spread(median * 1e6, 4)} | {gap} | "
                f"{spread(greedy[: median.size] / median)} |"
            )
    return solves


def bulk() -> None:
    print("\nBulk host (cpu0) -> GPU copies of 1 GiB per GPU, simulated:\n")
    print("| host | GPUs | direct ms | lp split ms | split GB/s | split / direct | paths | planned ms |")
    print("|---|---|---|---|---|---|---|---|")
    for preset, counts in (("hgx-h20", (1,)), ("dgx1-v100", (1, 8))):
        topology = load_preset(preset)
        for count in counts:
            gpus = [g.id for g in topology.gpus[:count]]
            seconds = {}
            for planner in ("direct", "lp"):
                start = time.perf_counter()
                plan = plan_bulk(topology, "cpu0", gpus, float(1 << 30), planner)
                planned = time.perf_counter() - start
                seconds[planner] = simulate(topology, plan.tasks(), timeline=False).makespan
            print(
                f"| {preset} | {count} | {seconds['direct'] * 1e3:.3f} | {seconds['lp'] * 1e3:.3f} | "
                f"{count * (1 << 30) / seconds['lp'] / 1e9:.1f} | {seconds['direct'] / seconds['lp']:.2f}x | "
                f"{len(plan.parts)} | {planned * 1e3:.1f} |"
            )
    print("\nMMA (arXiv 2512.16056) on 8 x H20: 245 GB/s host -> GPU, 4.62x one path.")


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="requests per stream (default 1000)")
    parser.add_argument("--seeds", type=int, default=8, help="streams per point (default 8)")
    parser.add_argument("--k", type=int, default=8, help="the LP's horizon (default 8)")
    parser.add_argument("--lp-seeds", type=int, default=4, help="streams per lp point (default 4, the first seeds)")
    parser.add_argument("--png-dir", type=Path, help="write median-against-rate curves here")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"which tables, comma-separated from {', '.join(PARTS)} (default all)"
    )
    parser.add_argument("--copy-n", type=int, default=300, help="requests per host -> GPU copy stream (default 300)")
    parser.add_argument(
        "--copy-presets",
        default=",".join(COPY_PRESETS),
        help=f"hosts of the copies part, comma-separated (default {','.join(COPY_PRESETS)})",
    )
    args = parser.parse_args()
    parts = args.parts.split(",")
    if not set(parts) <= set(PARTS):
        parser.error(f"--parts takes names from {', '.join(PARTS)}, got {args.parts}")
    if "bulk" in parts:
        bulk()
    decisions: dict[str, list] = {name: [] for name in SELECTORS}
    solves = SolveStats()
    if "copies" in parts:
        solves = solves + copies(
            args.copy_n, args.seeds, args.k, args.lp_seeds, args.copy_presets.split(","), decisions
        )
    if "kvs" in parts:
        solves = solves + kvs(args.n, args.seeds, args.k, args.lp_seeds, args.png_dir, decisions)
    decision_times(decisions)
    print(
        f"\nlp: {solves.solves} MILP solves, {solves.time_limited} stopped at the {LP_SECONDS:g} s "
        "limit with their best solution"
    )


if __name__ == "__main__":
    main()
