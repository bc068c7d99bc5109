"""Simulating 100,000 flows on a 128-server fat-tree of DGX-1s (1,024 GPUs) (issue: topology + sim).

The workload is a chain of all-to-all-like stages, each of ``flows / stages`` transfers between
random GPUs (random sizes 1-64 MB, two priority classes); stage s+1 starts when stage s finishes,
like the halo exchanges of successive GNN layers. Baseline, measured in the same run on a slice of
the same workload: the same simulator with incremental reallocation switched off (every event
recomputes max-min rates for all active flows), the textbook event-driven flow simulator. Here
every stage's flows cross the fabric and form one component, so the two differ little; the
component-local update pays off when traffic stays inside servers.

    python benchmarks/simulate_fattree.py [--flows 100000] [--stages 100] [--k 8]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from commgraph.sim import Compute, Transfer, simulate
from commgraph.topology import load_preset


def workload(gpus: list[str], flows: int, stages: int, seed: int) -> list[Transfer | Compute]:
    """Stages of random GPU-to-GPU transfers, each stage closed by a zero-second barrier task."""
    rng = np.random.default_rng(seed)
    per_stage = flows // stages
    tasks: list[Transfer | Compute] = []
    barrier: tuple[str, ...] = ()
    for stage in range(stages):
        src = rng.integers(0, len(gpus), per_stage)
        dst = (src + rng.integers(1, len(gpus), per_stage)) % len(gpus)
        sizes = rng.integers(1, 65, per_stage) * 2**20
        ids = [f"s{stage}.f{i}" for i in range(per_stage)]
        tasks += [
            Transfer(ids[i], gpus[src[i]], gpus[dst[i]], float(sizes[i]), priority=i % 2, deps=barrier)
            for i in range(per_stage)
        ]
        tasks.append(Compute(f"barrier{stage}", gpus[0], 0.0, deps=tuple(ids)))
        barrier = (f"barrier{stage}",)
    return tasks


def run(topology, tasks, *, incremental: bool) -> tuple[float, float]:
    start = time.perf_counter()
    result = simulate(topology, tasks, timeline=False, incremental=incremental)
    return time.perf_counter() - start, result.makespan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flows", type=int, default=100_000)
    parser.add_argument("--stages", type=int, default=100)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument(
        "--baseline-stages", type=int, default=3, help="stages of the workload both variants simulate for the ratio"
    )
    args = parser.parse_args()
    start = time.perf_counter()
    topology = load_preset(f"fattree:k={args.k},server=dgx1-v100,link=ib")
    gpus = [d.id for d in topology.gpus]
    print(
        f"topology: {topology.name}: {len(topology.devices)} devices, {len(topology.links)} links, "
        f"{len(gpus)} GPUs ({time.perf_counter() - start:.2f} s to build)"
    )

    per_stage = args.flows // args.stages
    small = workload(gpus, per_stage * args.baseline_stages, args.baseline_stages, seed=1)
    naive, span_a = run(topology, small, incremental=False)
    fast, span_b = run(topology, small, incremental=True)
    assert abs(span_a - span_b) <= 1e-9 * span_a, (span_a, span_b)
    print(
        f"{per_stage * args.baseline_stages:,} flows: full reallocation {naive:.1f} s, component-local {fast:.1f} s "
        f"-> {naive / fast:.2f}x (same makespan {span_b:.4f} s)"
    )

    tasks = workload(gpus, args.flows, args.stages, seed=0)
    seconds, makespan = run(topology, tasks, incremental=True)
    print(
        f"{args.flows:,} flows in {args.stages} stages: simulated in {seconds:.1f} s "
        f"(simulated makespan {makespan:.3f} s)"
    )


if __name__ == "__main__":
    main()
