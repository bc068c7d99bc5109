"""Partition quality and speed (issue: G3 partitioning).

Quality: Cora and an RMAT power-law graph, K = 4 and 8, every method: total remote (communication
volume) and its ratio to METIS's, remote min/max, node and degree (edge) imbalance. One more row,
``deg-ref``, is a reference, not a method: METIS's volume objective with the degree sum as its only
balance constraint (within 4%, no node constraint, no stage 2). It shows what degree balance alone
costs in volume, which bounds what g3, bound by degree and node balance both, can reach.
Speed: rmat:nodes=1000000,edges=10000000 into 8 parts: the whole g3 pipeline against the plain METIS
call alone (the baseline, timed in the same run), and each one's peak memory (max RSS of a child
process that runs only that step on the already-built graph).

    python benchmarks/partition_quality.py [--rmat rmat:nodes=100000,edges=1000000,seed=0] [--skip-speed]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from commgraph.graph import load_graph
from commgraph.partition import partition_graph, partition_metrics
from commgraph.partition.g3 import STAGE1_IMBALANCE
from commgraph.partition.metis import metis_edge_cut, metis_multi_constraint, undirected_adjacency

METHODS = ("g3", "metis", "chunk", "random")


def quality(spec: str) -> None:
    graph = load_graph(spec)
    print(f"\n{graph.name}: {graph.num_nodes:,} nodes, {graph.num_edges:,} stored edges")
    print(f"{'K':>2} {'method':>7} {'total remote':>13} {'x METIS':>8} {'remote min/max':>15} "
          f"{'node imb':>9} {'degree imb':>11} {'seconds':>8}")
    for parts in (4, 8):
        rows = {}
        for method in METHODS:
            start = time.perf_counter()
            assignment, _ = partition_graph(graph, parts, method, seed=0)
            rows[method] = (partition_metrics(graph, assignment, parts), time.perf_counter() - start)
        start = time.perf_counter()
        degree_only = metis_multi_constraint(undirected_adjacency(graph), graph.in_degrees()[:, None], parts, 0,
                                             STAGE1_IMBALANCE)
        rows["deg-ref"] = (partition_metrics(graph, degree_only, parts), time.perf_counter() - start)
        base = rows["metis"][0]["total_remote"]
        for method, (m, seconds) in rows.items():
            print(f"{parts:>2} {method:>7} {m['total_remote']:>13,} {m['total_remote'] / base:>8.3f} "
                  f"{m['remote_min_max']:>15.3f} {m['node_imbalance']:>9.3f} {m['edge_imbalance']:>11.3f} "
                  f"{seconds:>8.2f}")


def _step(task: str, spec: str) -> None:
    """Run one timed step in this (fresh) process and print its seconds and peak RSS as JSON."""
    graph = load_graph(spec)
    start = time.perf_counter()
    if task == "metis":
        metis_edge_cut(undirected_adjacency(graph), 8, 0)
    else:
        partition_graph(graph, 8, "g3", 0)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))


def speed(spec: str) -> None:
    print(f"\n{spec} into 8 parts, each step in a fresh process (graph generation not timed)")
    results = {}
    for task in ("metis", "g3"):
        out = subprocess.run([sys.executable, __file__, "--step", task, "--speed-graph", spec],
                             capture_output=True, text=True, check=True).stdout
        results[task] = json.loads(out.strip().splitlines()[-1])
    metis, g3 = results["metis"], results["g3"]
    print(f"METIS call alone (baseline, incl. building its adjacency): {metis['seconds']:7.1f} s, "
          f"peak RSS {metis['peak_gb']:.2f} GB (graph included)")
    print(f"whole g3 pipeline (stage 1 + stage 2):                      {g3['seconds']:7.1f} s, "
          f"peak RSS {g3['peak_gb']:.2f} GB (graph included)")
    print(f"ratio g3 / METIS: {g3['seconds'] / metis['seconds']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rmat", default="rmat:nodes=100000,edges=1000000,seed=0")
    parser.add_argument("--speed-graph", default="rmat:nodes=1000000,edges=10000000,seed=0")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--step", choices=("metis", "g3"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        _step(args.step, args.speed_graph)
        return
    quality("cora")
    quality(args.rmat)
    if not args.skip_speed:
        speed(args.speed_graph)


if __name__ == "__main__":
    main()
