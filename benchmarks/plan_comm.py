"""Communication planning figures (issue: CommPlan and planners).

All-gather: 8-part g3 partitions of Cora and of an RMAT power-law graph, feature dim 128, on
dgx1-v100; every planner's modelled time (flow-level simulator) and its ratio to p2p, the baseline
priced in the same run; then spst against p2p on every single-server preset and a 2-server cluster.
All-reduce: every planner's normalised time on dgx1-v100, p3.8xlarge and p2.16xlarge, the LP optimum
and Lemma 2.1's bound, and the LP's planning time for 16 GPUs.

    python benchmarks/plan_comm.py [--rmat rmat:nodes=100000,edges=1000000,seed=0]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from commgraph.graph import load_graph
from commgraph.partition import load_partition_set, partition_graph, partition_metrics, write_partition_set
from commgraph.plan import ALLGATHER_PLANNERS, plan_allgather, price
from commgraph.plan.allreduce import PLANNERS as ALLREDUCE_PLANNERS
from commgraph.study.plans import compare_allreduce, compare_halo
from commgraph.topology import load_preset

ROW_BYTES = 128 * 4


def partition_set(spec: str, folder: Path):
    graph = load_graph(spec)
    assignment, _ = partition_graph(graph, 8, "g3", 0)
    write_partition_set(
        graph,
        assignment,
        8,
        folder / graph.name,
        method="g3",
        seed=0,
        seconds=0.0,
        metrics=partition_metrics(graph, assignment, 8),
    )
    return graph.name, load_partition_set(folder / graph.name)


def allgather(psets) -> None:
    dgx1 = load_preset("dgx1-v100")
    names = ("p2p", *[p for p in ALLGATHER_PLANNERS if p != "p2p"])
    for name, pset in psets:
        print(f"\nall-gather, {name}, 8 g3 parts, feature dim 128, dgx1-v100")
        found = compare_halo(pset, dgx1, ROW_BYTES, names)
        p2p = found.planners["p2p"]["modeled_seconds"]
        for planner, row in found.planners.items():
            extra = f"  ({row['total_duplicated_nodes']:,} duplicated nodes)" if planner == "replicate" else ""
            print(
                f"  {planner:>9}: {row['modeled_seconds'] * 1e6:10.2f} us  x p2p {row['modeled_seconds'] / p2p:6.3f}"
                f"  {row['bytes'] / 1e6:8.2f} MB  planned in {found.planning_seconds[planner]:.2f} s{extra}"
            )
    print("\nspst / p2p modelled time on other topologies (feature dim 128)")
    for topology_name in (
        "dgx1-v100",
        "p3.16xlarge",
        "pcie-8gpu-qpi",
        "dgx-a100",
        "hgx-h100",
        "p2.16xlarge",
        "2xp3.8xlarge-ib",
        "localhost-cpu:8",
    ):
        topology = load_preset(topology_name)
        ratios = []
        for _, pset in psets:
            a = price(plan_allgather("spst", pset, topology, ROW_BYTES), topology)["modeled_seconds"]
            b = price(plan_allgather("p2p", pset, topology, ROW_BYTES), topology)["modeled_seconds"]
            ratios.append(a / b)
        print(f"  {topology_name:>16}: " + "  ".join(f"{n}: {r:.3f}" for (n, _), r in zip(psets, ratios)))


def allreduce() -> None:
    print("\nall-reduce, normalised time (all the data once over one single link)")
    for topology_name in ("dgx1-v100", "p3.8xlarge", "p2.16xlarge", "pcie-8gpu-qpi", "2xdgx1-v100-ib"):
        topology = load_preset(topology_name)
        found = compare_allreduce(topology, 1e8, ALLREDUCE_PLANNERS)
        lp, bound = found.plans["lp"].notes, found.lower_bound
        print(
            f"  {topology_name:>15}: "
            + "  ".join(f"{p} {row['normalized_time']:.4f}" for p, row in found.planners.items())
            + f"  | LP optimum {lp['optimum_fraction']}, bound {'-' if bound is None else f'{bound:.4f}'}"
            f", LP planned in {found.planning_seconds['lp']:.3f} s ({len(topology.workers)} GPUs)"
        )
        if topology_name == "p2.16xlarge":
            classes = {"intra-card": [], "card-central": [], "central-central": []}
            for link, share in lp["link_utilisation"].items():
                a, b = link.split("-")
                key = (
                    "central-central"
                    if "pcie_c" in a and "pcie_c" in b
                    else "intra-card"
                    if "gpu" in a or "gpu" in b
                    else "card-central"
                )
                classes[key].append(share)
            print(
                "      p2.16xlarge link-class utilisation (mean share of the bottleneck): "
                + ", ".join(f"{k} {np.mean(v):.3f}" for k, v in classes.items())
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rmat", default="rmat:nodes=100000,edges=1000000,seed=0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        psets = [partition_set(spec, Path(tmp)) for spec in ("cora", args.rmat)]
        allgather(psets)
    allreduce()


if __name__ == "__main__":
    main()
