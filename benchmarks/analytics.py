"""Graph analytics speed: commgraph's vertex programs with 1 and 2 workers against NetworKit, side by side.

For each graph (default: ``rmat:nodes=1000000,edges=10000000`` and a 1M-node SBM) and each of BFS,
connected components and PageRank (20 iterations: tolerance 0 on both sides):

- NetworKit (a multi-threaded C++ library; ``pip install networkit``, the ``bench`` extra) on an
  undirected graph of the same edges, with 1 thread and with 2 (this machine's cores), graph
  construction not timed;
- commgraph with 1 and with 2 worker processes (one thread each), started by the local launcher on a
  partition set of the graph (``--partition``, random by default: parts of equal node counts and,
  on these graphs, nearly equal edge counts; g3 ran for over 20 minutes at 1M nodes on this shared
  machine without finishing, and METIS's minimum cut left one RMAT part with 97% of the edges, so
  one worker did nearly all the work); a run's time is the slowest worker's,
  from the first iteration to the last (compiling the hooks and transposing a part's edges before,
  as NetworKit builds both directions before); the 2 workers exchange boundary values through the
  job's all-gather plan over Gloo.

Each case runs ``--repeats`` times after a warm-up; the table gives the median and the spread
(fastest-slowest). Ratios: commgraph's 1 worker over NetworKit's 2 threads (target <= 2) and over its
1 thread, and 1 worker over 2 workers (target >= 1.3). Memory per worker: its peak resident memory
(VmHWM) less what it held after the imports, against its part's CSR (indptr, indices and weights;
target <= 3x). Edges per second: the edges a worker scanned, summed, over the run's time.

    .venv/bin/python benchmarks/analytics.py \
        [--graphs SPEC ...] [--algos bfs ...] [--repeats 5]

The whole default run takes about 6 minutes here; one graph per invocation (``--graphs``) keeps each
under 4, so that others get the lock in between.

Every rank of a commgraph run is this same file, started by the local launcher with ``RANK`` set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from commgraph.analytics import AnalyzeOptions
from commgraph.graph import load_graph
from commgraph.partition import load_partition_set, partition_graph, partition_metrics, write_partition_set
from commgraph.runtime import in_torchrun, join, launch_local
from commgraph.runtime.job import JobOptions
from commgraph.runtime.table_memory import status_bytes

GRAPHS = ("rmat:nodes=1000000,edges=10000000,seed=0", "sbm:nodes=1000000,classes=16,features=1,degree=20,seed=0")
ALGOS = ("bfs", "cc", "pagerank")
PAGERANK_ITERATIONS = 20


def _options(algo: str, source: int) -> AnalyzeOptions:
    if algo == "pagerank":  # a fixed number of iterations: tolerance 0 never stops it early
        return AnalyzeOptions("pagerank", tol=1e-300, max_iterations=PAGERANK_ITERATIONS)
    return AnalyzeOptions(algo, source=source if algo == "bfs" else None)


# -- a worker of a commgraph run -------------------------------------------------------------------


def worker(job_file: str) -> None:
    from commgraph.analytics.program import compile_hooks
    from commgraph.analytics.worker import run_worker

    job = json.loads(Path(job_file).read_text())
    world = join(120, "cpu")
    for algo in job["algos"]:
        compile_hooks(_options(algo, 0).program(), weighted=False)
    baseline = status_bytes("VmRSS") // 1024  # after the imports, joining and compiling
    part = load_partition_set(job["partdir"]).part(world.rank)
    csr_bytes = part.indptr.nbytes + part.indices.nbytes + (0 if part.weights is None else part.weights.nbytes)
    results = []
    for algo in job["algos"]:
        times = []
        for repeat in range(job["repeats"] + 1):  # the first is the warm-up
            result = run_worker(world, Path(job["partdir"]), _options(algo, job["source"]), JobOptions())
            if world.is_leader and repeat > 0:
                times.append(
                    {
                        "seconds": result.seconds,
                        "iterations": result.iterations,
                        "bytes": result.bytes,
                        "edges": result.edges,
                    }
                )
        results.append({"algo": algo, "runs": times})
    from commgraph.runtime import Communicator

    memory = Communicator(world).all_gather_object(
        {"peak_kb": status_bytes("VmHWM") // 1024, "baseline_kb": baseline, "csr_bytes": csr_bytes}
    )
    if world.is_leader:
        Path(job["out"]).write_text(json.dumps({"results": results, "memory": memory}))
    world.close()


# -- the parent ------------------------------------------------------------------------------------


def networkit_times(graph, source: int, repeats: int, threads: int, algos: list[str]) -> dict[str, list[float]]:
    import networkit as nk

    nk.setNumberOfThreads(threads)
    src, dst = graph.edge_list()
    keep = src < dst
    g = nk.graph.GraphFromCoo(
        (np.ones(int(keep.sum())), (src[keep].astype(np.uint64), dst[keep].astype(np.uint64))),
        n=graph.num_nodes,
        directed=False,
    )
    runs = {
        "bfs": lambda: nk.distance.BFS(g, source, storePaths=False).run(),
        "cc": lambda: nk.components.ConnectedComponents(g).run(),
        "pagerank": lambda: _nk_pagerank(nk, g),
    }
    times = {}
    for algo in algos:
        once = runs[algo]
        once()
        times[algo] = []
        for _ in range(repeats):
            start = time.perf_counter()
            once()
            times[algo].append(time.perf_counter() - start)
    return times


def _nk_pagerank(nk, g) -> None:
    pagerank = nk.centrality.PageRank(g, 0.85, 1e-300)
    pagerank.maxIterations = PAGERANK_ITERATIONS
    pagerank.run()


def commgraph_run(partdir: Path, workers: int, source: int, repeats: int, folder: Path, algos: list[str]) -> dict:
    job = folder / f"job-{workers}.json"
    out = folder / f"out-{workers}.json"
    job.write_text(
        json.dumps({"partdir": str(partdir), "algos": algos, "source": source, "repeats": repeats, "out": str(out)})
    )
    env_path = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
    os.environ["PYTHONPATH"] = env_path
    if launch_local([str(job)], workers, grace=60, module="analytics", threads_per_worker=1) != 0:
        raise SystemExit(f"the {workers}-worker run failed")
    return json.loads(out.read_text())


def partition_set(graph, workers: int, method: str, folder: Path) -> Path:
    path = folder / f"{graph.name}-{graph.checksum()[:12]}-{method}-k{workers}"
    if not (path / "manifest.json").is_file():
        start = time.perf_counter()
        assignment, details = partition_graph(graph, workers, method, 0)
        write_partition_set(
            graph,
            assignment,
            workers,
            path,
            method=method,
            seed=0,
            seconds=time.perf_counter() - start,
            metrics={**partition_metrics(graph, assignment, workers), **details},
            force=True,
        )
        print(f"  partitioned into {workers} with {method} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return path


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    if in_torchrun():
        worker(sys.argv[1])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", nargs="+", default=list(GRAPHS))
    parser.add_argument("--algos", nargs="+", choices=ALGOS, default=list(ALGOS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--partition", default="random")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "commgraph-bench-analytics",
        help="where partition sets are kept between runs",
    )
    parser.add_argument("--json", type=Path, help="write every measurement here")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    report = []
    for spec in args.graphs:
        start = time.perf_counter()
        graph = load_graph(spec)
        print(
            f"{spec}: {graph.num_nodes} nodes, {graph.num_edges} directed edges "
            f"(generated in {time.perf_counter() - start:.1f} s)",
            file=sys.stderr,
        )
        source = int(np.argmax(np.diff(graph.indptr)))
        entry = {"graph": spec, "nodes": graph.num_nodes, "edges": graph.num_edges, "networkit": {}}
        for threads in (1, 2):
            entry["networkit"][threads] = networkit_times(graph, source, args.repeats, threads, args.algos)
            print(f"  NetworKit, {threads} thread(s): {json.dumps(entry['networkit'][threads])}", file=sys.stderr)
        with tempfile.TemporaryDirectory() as scratch:
            for workers in (1, 2):
                partdir = partition_set(graph, workers, args.partition, args.cache)
                entry[f"commgraph_{workers}"] = commgraph_run(
                    partdir, workers, source, args.repeats, Path(scratch), args.algos
                )
                print(f"  commgraph, {workers} worker(s): {json.dumps(entry[f'commgraph_{workers}'])}", file=sys.stderr)
        report.append(entry)
        _print(entry, args.algos)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


def _print(entry: dict, algos: list[str]) -> None:
    print(f"\n{entry['graph']} ({entry['nodes']} nodes, {entry['edges']} directed edges); seconds: median (spread)")
    print(
        f"{'algo':9} {'NetworKit 1t':>22} {'NetworKit 2t':>22} {'commgraph 1w':>22} {'commgraph 2w':>22} "
        f"{'1w/nk2t':>8} {'1w/nk1t':>8} {'1w/2w':>6} {'iters':>5} {'MB 2w':>7} {'Medges/s 1w':>11} {'2w':>7}"
    )
    for k, algo in enumerate(algos):
        nk1, nk2 = entry["networkit"][1][algo], entry["networkit"][2][algo]
        one = entry["commgraph_1"]["results"][k]["runs"]
        two = entry["commgraph_2"]["results"][k]["runs"]
        s1, s2 = [r["seconds"] for r in one], [r["seconds"] for r in two]
        m1, m2 = statistics.median(s1), statistics.median(s2)
        eps = lambda runs, m: statistics.median(r["edges"] for r in runs) / m / 1e6  # noqa: E731
        print(
            f"{algo:9} {_median(nk1):>22} {_median(nk2):>22} {_median(s1):>22} {_median(s2):>22} "
            f"{m1 / statistics.median(nk2):8.2f} {m1 / statistics.median(nk1):8.2f} {m1 / m2:6.2f} "
            f"{one[0]['iterations']:5d} {two[0]['bytes'] / 1e6:7.1f} {eps(one, m1):11.1f} {eps(two, m2):7.1f}"
        )
    for workers in (1, 2):
        for rank, mem in enumerate(entry[f"commgraph_{workers}"]["memory"]):
            held = (mem["peak_kb"] - mem["baseline_kb"]) * 1024
            print(
                f"memory, {workers} worker(s), rank {rank}: peak {mem['peak_kb'] / 1024:.0f} MB, "
                f"{held / 1e6:.0f} MB above the imports = {held / mem['csr_bytes']:.2f}x its part's CSR "
                f"({mem['csr_bytes'] / 1e6:.0f} MB)"
            )


if __name__ == "__main__":
    main()
