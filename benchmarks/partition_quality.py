"""Partition quality and speed (issue: G3 partitioning).

Quality: Cora and an RMAT power-law graph, K = 4 and 8, every method: total remote (communication
volume) and its ratio to METIS's, remote min/max, node and degree (edge) imbalance.
Speed: rmat:nodes=1000000,edges=10000000 into 8 parts: the whole g3 pipeline against the plain METIS
call alone (the baseline, timed in the same run), and each one's peak memory (max RSS of a child
process that runs only that step on the already-built graph).

    python benchmarks/partition_quality.py [--rmat rmat:nodes=100000,edges=1000000,seed=0] [--skip-speed]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import time

from commgraph.graph import load_graph
from commgraph.partition import partition_graph, partition_metrics
from commgraph.partition.metis import metis_edge_cut, undirected_adjacency

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
        base = rows["metis"][0]["total_remote"]
        for method, (m, seconds) in rows.items():
            print(f"{parts:>2} {method:>7} {m['total_remote']:>13,} {m['total_remote'] / base:>8.3f} "
                  f"{m['remote_min_max']:>15.3f} {m['node_imbalance']:>9.3f} {m['edge_imbalance']:>11.3f} "
                  f"{seconds:>8.2f}")


def _timed(task, graph, queue) -> None:
    start = time.perf_counter()
    if task == "metis":
        metis_edge_cut(undirected_adjacency(graph), 8, 0)
    else:
        partition_graph(graph, 8, "g3", 0)
    seconds = time.perf_counter() - start
    queue.put((seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20))


def speed(spec: str) -> None:
    start = time.perf_counter()
    graph = load_graph(spec)
    print(f"\n{spec}: {graph.num_nodes:,} nodes, {graph.num_edges:,} stored edges "
          f"(generated in {time.perf_counter() - start:.1f} s)")
    context = mp.get_context("fork")
    results = {}
    for task in ("metis", "g3"):
        queue = context.Queue()
        child = context.Process(target=_timed, args=(task, graph, queue))
        child.start()
        results[task] = queue.get()
        child.join()
    (metis_s, metis_gb), (g3_s, g3_gb) = results["metis"], results["g3"]
    print(f"METIS call alone (baseline, incl. building its adjacency): {metis_s:7.1f} s, peak RSS {metis_gb:.2f} GB")
    print(f"whole g3 pipeline (stage 1 + stage 2):                      {g3_s:7.1f} s, peak RSS {g3_gb:.2f} GB")
    print(f"ratio g3 / METIS: {g3_s / metis_s:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rmat", default="rmat:nodes=100000,edges=1000000,seed=0")
    parser.add_argument("--speed-graph", default="rmat:nodes=1000000,edges=10000000,seed=0")
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    quality("cora")
    quality(args.rmat)
    if not args.skip_speed:
        speed(args.speed_graph)


if __name__ == "__main__":
    main()
