"""Multi-path selection figures (issue: LEO communication paths and multi-path selection).

1. Mean completion time over load: Poisson streams of 1 MiB requests at 30-90% of the direct paths'
   capacity on dgx1-v100 (host memory cpu0 -> gpu0: the route and relays through gpu0's NVLink
   peers) and pcie-8gpu-qpi (cpu0 -> gpu0 or gpu2, a request served at either: no NVLink, so the
   only second path is another GPU), every selector's choices priced on the flow simulator; each
   point is the median over seeds, with the spread (min-max). Ratios against the better greedy
   rule and against ``lp`` are taken per seed, then their median. A third case is the thesis's
   own: key-value GETs of 64 KiB from the NIC, served by the GPU (20 us) or by the CPU (60 us).
2. Decision time per request: ``toll`` and ``lp`` (median and 10-90th percentile over requests).
3. Bulk host -> GPU copy of 1 GiB, one GPU and all 8 of a DGX-1: ``direct`` and the ``lp`` split,
   simulated, and the ratio.

    python benchmarks/multipath.py [--n 200] [--seeds 3] [--k 8]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from commgraph.plan.multipath import SELECTORS, compare_selectors, load_workload, plan_bulk
from commgraph.plan.paths import CommPath, PathSet, RequestType
from commgraph.sim import simulate
from commgraph.topology import load_preset

# A key-value GET (the thesis's case): 64 KiB from the NIC, served by the GPU (20 us) or the CPU (60 us).
KVS = PathSet((RequestType("get", 65536.0, (CommPath(("nic0", "pcie0", "gpu0")), CommPath(("nic0", "pcie0", "cpu0"))),
                           {"gpu0": 2e-5, "cpu0": 6e-5}),))
CASES = (("dgx1-v100", "cpu0:gpu0", None), ("pcie-8gpu-qpi", "cpu0:gpu0|gpu2", None), ("dgx1-v100", "get", KVS))
LOADS = (0.3, 0.5, 0.7, 0.9)


def spread(values) -> str:
    values = np.asarray(values)
    return f"{np.median(values):.3g} ({values.min():.3g}-{values.max():.3g})"


def load_curve(n: int, seeds: int, k: int) -> dict[str, list[float]]:
    decisions: dict[str, list[float]] = {"toll": [], "lp": []}
    print("\n| topology | load | " + " | ".join(f"{s} mean us" for s in SELECTORS)
          + " | better greedy / toll | toll / lp |")
    print("|---|---|" + "---|" * (len(SELECTORS) + 2))
    for preset, types, paths in CASES:
        topology = load_preset(preset)
        for load in LOADS:
            means = {name: [] for name in SELECTORS}
            gain, gap = [], []
            for seed in range(seeds):
                workload = load_workload(topology, f"poisson:load={load},size=1M,types={types},n={n},seed={seed}",
                                         paths)
                reports = compare_selectors(workload, list(SELECTORS), k)
                for name, report in reports.items():
                    means[name].append(report.priced.jct.mean() * 1e6)
                for name in decisions:
                    decisions[name].extend(reports[name].selection.decide_seconds.tolist())
                greedy = min(means["greedy-e2e"][-1], means["greedy-intra"][-1])
                gain.append(greedy / means["toll"][-1])
                gap.append(means["toll"][-1] / means["lp"][-1])
            print(f"| {preset} ({types}) | {load:.1f} | " + " | ".join(spread(means[s]) for s in SELECTORS)
                  + f" | {spread(gain)} | {spread(gap)} |", flush=True)
    return decisions


def decision_times(decisions: dict[str, list[float]]) -> None:
    print("\ndecision time per request (all points above):")
    for name, seconds in decisions.items():
        us = np.array(seconds) * 1e6
        print(f"  {name:>5}: median {np.median(us):10.2f} us  (10-90%: {np.percentile(us, 10):.2f}-"
              f"{np.percentile(us, 90):.2f} us, {us.size} decisions)")


def bulk() -> None:
    topology = load_preset("dgx1-v100")
    print("\nbulk host (cpu0) -> GPU copy of 1 GiB per GPU on dgx1-v100, simulated:")
    for gpus in (["gpu0"], [g.id for g in topology.gpus]):
        seconds = {}
        for planner in ("direct", "lp"):
            start = time.perf_counter()
            plan = plan_bulk(topology, "cpu0", gpus, float(1 << 30), planner)
            planned = time.perf_counter() - start
            seconds[planner] = simulate(topology, plan.tasks(), timeline=False).makespan
            print(f"  {len(gpus)} GPU(s) {planner:>6}: {seconds[planner] * 1e3:9.3f} ms  "
                  f"({len(plan.parts)} paths, planned in {planned * 1e3:.1f} ms)")
        print(f"  {len(gpus)} GPU(s) direct / lp = {seconds['direct'] / seconds['lp']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="requests per stream (default 200)")
    parser.add_argument("--seeds", type=int, default=3, help="streams per point (default 3)")
    parser.add_argument("--k", type=int, default=8, help="the LP's horizon (default 8)")
    args = parser.parse_args()
    bulk()
    decision_times(load_curve(args.n, args.seeds, args.k))


if __name__ == "__main__":
    main()
