"""All-reduce planning on the machines people own (issue #30).

1. Every planner's algorithm bandwidth (bytes over the busiest link direction's time) against the
   partition bound, on dgx-a100, hgx-h100, 2x and 4x servers of each on one IB switch, a rail-split
   2xdgx-a100 fabric with PXN, and the DGX-1; the LP's certificate; lp / ring (NCCL's channels).
2. Simulated bus bandwidth (nccl-tests' definition) of the multi-channel ring, all-reduce and its
   all-gather half, priced by the flow simulator at 8 GiB, against published nccl-tests figures.
3. Synthesis time and peak memory of the LP from 16 to 512 GPUs (2 to 64 x dgx-a100 on one IB switch,
   and 8 / 16 x hgx-h100, with and without 8 rails and PXN), each size in a fresh process (its peak
   resident memory is the row's), repeated up to 64 GPUs, once beyond.
4. The LP on ForestColl's published A100 model (arXiv 2402.06787, its public topologies.py: each GPU
   at 300 GB/s to one NVSwitch node and 25 GB/s to its own NIC, NICs on two IB switches by GPU
   parity), 2, 4 and 8 boxes: algorithm bandwidth against ForestColl's optimum (all-gather algbw / 2 for
   an all-reduce) and synthesis time, to set beside ForestColl's own generation time on that model.
5. All-gather and reduce-scatter (``commgraph.plan.gather``) on ForestColl's A100 model, 2, 4 and 8
   boxes: ``lp`` and ``ring`` algorithm bandwidth against ForestColl's optimum, and synthesis time.

    python benchmarks/allreduce_plan.py [--repeats 3] [--max-gpus 512] [--parts 1,2,3,4,5] [--presets A,B]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from commgraph.plan import CommPlan, Send, plan_allreduce, price
from commgraph.plan.gather import COLLECTIVES, plan_collective
from commgraph.plan.gather import PLANNERS as GATHER_PLANNERS
from commgraph.study.plans import compare_allreduce
from commgraph.topology import Device, Link, Topology, load_preset

TOPOLOGIES = (
    "dgx-a100",
    "hgx-h100",
    "2xdgx-a100-ib",
    "4xdgx-a100-ib",
    "2xhgx-h100-ib",
    "4xhgx-h100-ib",
    "2xdgx-a100-ib-rails2-pxn",
    "dgx1-v100",
)
PLANNERS = ("ring", "ring1", "tree", "tree1", "ps", "lp")
# Published nccl-tests bus bandwidth, 8 GPUs of one server, large messages (GB/s), with the source.
PUBLISHED = {
    "dgx-a100": (
        230.0,
        "S. Jeaugey (NVIDIA), github.com/NVIDIA/nccl-tests/issues/149: 8xA100 NVSwitch, "
        "all_reduce_perf busbw ~230 GB/s at 8 GB (12 NVLinks x ~20 GB/s effective = 240)",
    ),
    "hgx-h100": (
        370.0,
        "S. Jeaugey (NVIDIA), github.com/NVIDIA/nccl-tests/issues/212: 8xH100, effective NVLink "
        "bandwidth 370 GB/s seen as busbw of non-allreduce operations or all_reduce with "
        "NCCL_ALGO=RING (NVLS all-reduce: ~480)",
    ),
}


def planners_table() -> None:
    print("\n1. algorithm bandwidth (GB/s) per planner, and its fraction of the partition bound")
    for name in TOPOLOGIES:
        topology = load_preset(name)
        found = compare_allreduce(topology, 1e9, PLANNERS)
        row, seconds = found.planners, found.planning_seconds
        bound = row["lp"]["bandwidth"]["bound"]
        cells = "  ".join(
            f"{p} {plan['bandwidth']['algbw_gbps']:7.2f} ({plan['bandwidth']['of_bound']:.3f})"
            for p, plan in row.items()
        )
        lp, ring = row["lp"], row["ring"]
        certificate = lp.get("certificate")
        proof = (
            f"certificate <= {certificate['algbw_gbps_at_most']:.2f} GB/s, converged {certificate['converged']}"
            if certificate
            else "direct links: trees of GPU-to-GPU links, the paper's LP"
        )
        print(f"  {name:>26} ({len(topology.workers)} GPUs): {cells}")
        print(
            f"  {'':>26}  bound {bound['algbw_gbps']:.2f} GB/s ({bound['partition']}, {bound['links']} links); "
            f"lp / ring {lp['bandwidth']['algbw_gbps'] / ring['bandwidth']['algbw_gbps']:.3f}; lp planned in "
            f"{seconds['lp']:.2f} s; {proof}"
        )


def all_gather_half(plan: CommPlan) -> CommPlan:
    """The ring all-reduce's all-gather phase alone: every hop carries (n-1)/n of the data, half of
    the all-reduce's 2(n-1)/n."""
    half = CommPlan("allreduce", "ring-allgather", plan.topology)
    half.stages = [[Send(s.src, s.dst, s.nbytes / 2, route=s.route) for s in plan.stages[0]]]
    return half


def nccl_tests_check() -> None:
    print(
        "\n2. simulated bus bandwidth of the multi-channel ring at 8 GiB (nccl-tests: all-reduce busbw = "
        "algbw x 2(n-1)/n, all-gather busbw = algbw x (n-1)/n)"
    )
    size = 8 * 2**30
    for name, (published, source) in PUBLISHED.items():
        topology = load_preset(name)
        n = len(topology.workers)
        plan = plan_allreduce("ring", topology, size)
        reduce_bus = size / price(plan, topology)["modeled_seconds"] / 1e9 * 2 * (n - 1) / n
        gather_bus = size / price(all_gather_half(plan), topology)["modeled_seconds"] / 1e9 * (n - 1) / n
        ring1 = plan_allreduce("ring1", topology, size)
        ring1_bus = size / price(ring1, topology)["modeled_seconds"] / 1e9 * 2 * (n - 1) / n
        print(
            f"  {name}: all-reduce busbw {reduce_bus:.1f} GB/s ({reduce_bus / published - 1:+.1%} vs published "
            f"{published:.0f}), all-gather busbw {gather_bus:.1f} GB/s ({gather_bus / published - 1:+.1%}); "
            f"single-channel ring1 all-reduce busbw {ring1_bus:.1f}\n      source: {source}"
        )


def timed_lp(topology: Topology, repeats: int) -> tuple[CommPlan, list[float]]:
    """The LP's plan for 1 GB on ``topology`` and the seconds each of ``repeats`` syntheses took."""
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        plan = plan_allreduce("lp", topology, 1e9)
        runs.append(time.perf_counter() - start)
    return plan, runs


@dataclass(frozen=True)
class Synthesis:
    """One preset's LP syntheses in a fresh process: seconds per run, the plan's figures, and the
    process's peak resident memory."""

    runs: list[float]
    algbw_gbps: float
    of_bound: float
    certificate_gbps: float
    converged: bool
    rounds: int
    trees: int
    peak_mb: float


def _synthesise(name: str, repeats: int) -> Synthesis:
    plan, runs = timed_lp(load_preset(name), repeats)
    band, proof = plan.notes["bandwidth"], plan.notes["certificate"]
    return Synthesis(
        runs,
        band["algbw_gbps"],
        band["of_bound"],
        proof["algbw_gbps_at_most"],
        proof["converged"],
        plan.notes["synthesis"]["rounds"],
        len(plan.notes["trees"]),
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


SYNTHESIS = (
    "2xdgx-a100-ib",
    "4xdgx-a100-ib",
    "8xdgx-a100-ib",
    "16xdgx-a100-ib",
    "64xdgx-a100-ib",
    "8xhgx-h100-ib",
    "16xhgx-h100-ib",
    "8xdgx-a100-ib-rails8-pxn",
    "8xhgx-h100-ib-rails8-pxn",
    "16xhgx-h100-ib-rails8-pxn",
)


def synthesis(repeats: int, max_gpus: int, presets: tuple[str, ...] = SYNTHESIS) -> None:
    print("\n3. lp synthesis time (s), median and spread of the repeats, each preset in a fresh process")
    for name in presets:
        gpus = 8 * int(name.split("x", 1)[0])
        if gpus > max_gpus:
            continue
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            row = pool.submit(_synthesise, name, repeats if gpus <= 64 else 1).result()
        print(
            f"  {gpus} GPUs ({name}): median {statistics.median(row.runs):.2f} s, min {min(row.runs):.2f}, "
            f"max {max(row.runs):.2f} over {len(row.runs)}; lp {row.algbw_gbps:.2f} GB/s, {row.of_bound:.4f} of "
            f"the bound, certificate <= {row.certificate_gbps:.2f} (converged {row.converged}); {row.rounds} "
            f"rounds, {row.trees} trees; peak memory {row.peak_mb:.0f} MB",
            flush=True,
        )


def forestcoll_a100(boxes: int) -> Topology:
    """ForestColl's A100 model as a commgraph topology: per box 8 GPUs on one NVSwitch node (300 GB/s
    each way per GPU), a NIC per GPU (25 GB/s), NIC ``b`` of every box on IB switch ``b % 2``. A GPU
    reaches the other parity's switch only by forwarding (PXN), so ``gpu_forwarding`` is on."""
    devices = [Device("ib0", "switch", "fabric"), Device("ib1", "switch", "fabric")]
    links = []
    for box in range(boxes):
        switch = f"b{box}.nvswitch"
        devices.append(Device(switch, "nvswitch", f"b{box}"))
        for g in range(8):
            gpu, nic = f"b{box}.gpu{g}", f"b{box}.nic{g}"
            devices += [Device(gpu, "gpu", f"b{box}"), Device(nic, "nic", f"b{box}")]
            links += [
                Link(gpu, switch, "nvswitch", 1, 300.0, 1.0),
                Link(gpu, nic, "pcie", 1, 25.0, 1.0),
                Link(nic, f"ib{g % 2}", "infiniband", 1, 25.0, 1.0),
            ]
    return Topology(f"forestcoll-a100-{boxes}box", devices, links, gpu_forwarding=True)


# ForestColl's optimal all-gather algorithm bandwidth on its A100 model (GB/s); its README gives the
# 2-box figure, the 4- and 8-box ones are its code's output (see docs/benchmarks/allreduce.md).
FORESTCOLL_ALLGATHER = {2: 346.67, 4: 266.67, 8: 228.57}


def forestcoll_model(repeats: int) -> None:
    print(
        "\n4. lp on ForestColl's A100 model: all-reduce algbw against ForestColl's optimum "
        "(all-gather algbw / 2) and synthesis time"
    )
    for boxes, allgather in FORESTCOLL_ALLGATHER.items():
        plan, runs = timed_lp(forestcoll_a100(boxes), repeats)
        band = plan.notes["bandwidth"]
        print(
            f"  {8 * boxes} GPUs: lp {band['algbw_gbps']:.2f} GB/s, {band['of_bound']:.4f} of the bound, "
            f"ForestColl's optimum {allgather / 2:.2f} (ratio {band['algbw_gbps'] / (allgather / 2):.4f}); "
            f"synthesis median {statistics.median(runs):.2f} s, min {min(runs):.2f}, max {max(runs):.2f} "
            f"over {len(runs)}"
        )


def gather_model(repeats: int) -> None:
    print(
        "\n5. all-gather and reduce-scatter on ForestColl's A100 model: algbw against ForestColl's optimum "
        "and synthesis time"
    )
    for boxes, optimum in FORESTCOLL_ALLGATHER.items():
        topology = forestcoll_a100(boxes)
        for collective in COLLECTIVES:
            cells = []
            for planner in GATHER_PLANNERS:
                runs = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    plan = plan_collective(collective, planner, topology, 1e9)
                    runs.append(time.perf_counter() - start)
                band = plan.notes["bandwidth"]
                cells.append(
                    f"{planner} {band['algbw_gbps']:.2f} GB/s ({band['algbw_gbps'] / optimum:.4f} of the "
                    f"optimum) in {statistics.median(runs):.2f} s ({min(runs):.2f}-{max(runs):.2f})"
                )
            print(
                f"  {8 * boxes} GPUs {collective}: ForestColl's optimum {optimum:.2f}; " + "; ".join(cells), flush=True
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-gpus", type=int, default=512, help="leave out larger syntheses (512 GPUs: a minute)")
    parser.add_argument("--parts", default="1,2,3,4,5", help="which numbered parts to run (default: all)")
    parser.add_argument("--presets", default=",".join(SYNTHESIS), help="part 3's presets (default: all of them)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if "1" in parts:
        planners_table()
    if "2" in parts:
        nccl_tests_check()
    if "3" in parts:
        synthesis(args.repeats, args.max_gpus, tuple(args.presets.split(",")))
    if "4" in parts:
        forestcoll_model(args.repeats)
    if "5" in parts:
        gather_model(args.repeats)


if __name__ == "__main__":
    main()
