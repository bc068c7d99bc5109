"""``commgraph analyze GRAPH|PARTDIR --algo bfs|sssp|pagerank|cc``: graph analytics as vertex programs.

BFS levels, SSSP distances (frontier Bellman-Ford over the file's non-negative weights, 1 per edge
without weights, or seeded weights with --weight-seed), PageRank (networkx's semantics) and
connected components (weak components of a directed graph). One worker runs in this process on the
whole graph; with --workers N the graph is partitioned (cached, as for training) and N processes
run one part each, exchanging boundary values through the job's all-gather plan; a partition set
directory runs as it is. Under torchrun each process joins torchrun's world (PARTDIR only).

It reports iterations, seconds, bytes exchanged and edges traversed per second, and with --out writes
the value of every node: .npy (one per node, in load order) or .csv (node,value in the graph's
original ids). --source is an original id too. Unreached nodes are -1 (BFS levels) or inf (SSSP);
component labels are the smallest original id in the component.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from functools import partial
from pathlib import Path

import numpy as np

from commgraph.analytics import ALGORITHMS, Analysis, AnalyzeOptions, analyze, symmetrized
from commgraph.analytics.job import analyze_part
from commgraph.analytics.algorithms import check_weights
from commgraph.atomic import atomic_write
from commgraph.cli import describe
from commgraph.cli.graph_args import add_graph_arguments
from commgraph.cli.ranks import run_rank
from commgraph.cli.train import cached_partition_set
from commgraph.errors import AnalyticsError
from commgraph.graph import load_graph
from commgraph.partition import METHODS, load_partition_set
from commgraph.plan.choose import PLAN_CHOICES
from commgraph.runtime import in_torchrun, launch_local

SUFFIXES = (".npy", ".csv")
CSV_CHUNK = 1 << 16


def register(subparsers) -> None:
    parser = subparsers.add_parser("analyze", help="BFS, SSSP, PageRank or connected components across workers",
                                   description=describe(__doc__))
    add_graph_arguments(parser)
    parser.add_argument("--algo", choices=ALGORITHMS, required=True, help="the analysis to run")
    parser.add_argument("--source", type=int, help="BFS and SSSP: the source node, an original id")
    parser.add_argument("--directed", action="store_true", help="keep a SNAP file's edges one-way "
                        "(default: symmetrised, as for training)")
    parser.add_argument("--weight-seed", type=int, metavar="S", help="SSSP: seeded weights in [1, 100) instead of "
                        "the graph's own")
    parser.add_argument("--damping", type=float, default=0.85, help="PageRank's damping (default 0.85)")
    parser.add_argument("--tol", type=float, default=1e-6, help="PageRank stops when the L1 change is below "
                        "N * tol (default 1e-6)")
    parser.add_argument("--max-iterations", type=int, default=100, help="PageRank's iteration cap (default 100)")
    parser.add_argument("--workers", type=int, help="worker processes, one per part (default: the partition "
                        "set's parts, else 1); ignored under torchrun")
    parser.add_argument("--partition", choices=METHODS, default="g3", help="how to split a GRAPH (default g3)")
    parser.add_argument("--partition-dir", type=Path, metavar="DIR", help="where to keep the partition set of a "
                        "GRAPH (default: the cache training uses)")
    parser.add_argument("--seed", type=int, default=0, help="partitioning seed (default 0)")
    parser.add_argument("--plan", default="auto", metavar="|".join(PLAN_CHOICES) + "|FILE",
                        help="the boundary exchange's all-gather plan (default auto)")
    parser.add_argument("--topology", default="detect", help="topology the plan is made for (default detect)")
    parser.add_argument("--placement", metavar="DEV,DEV,...", help="the topology device of each worker")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds any exchange may wait before the job stops (default 120)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="per-node results (.npy or .csv)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--node-ids", type=Path, help=argparse.SUPPRESS)  # the launcher's original ids, to workers
    parser.set_defaults(run=run, device="cpu")  # the kernels run on the CPU; workers exchange over Gloo


def run(args: argparse.Namespace) -> int:
    if in_torchrun():
        return run_rank(args, partial(_partition_dir, args), partial(_rank, args))
    _check_args(args)
    given = Path(args.graph)
    if (given / "manifest.json").is_file():
        return _run_partition_set(args, given)
    graph = load_graph(args.graph, format=args.format, name=args.name, split=args.split, directed=args.directed)
    options = _options(args, _internal_source(args.source, graph.node_ids, graph.num_nodes))
    options.check(graph.num_nodes)
    if options.algo == "sssp" and options.weight_seed is None:
        check_weights(graph.edge_weights)
    if (args.workers or 1) == 1:
        _report(args, analyze(graph, options), graph.node_ids)
        return 0
    if options.algo == "cc":
        graph = symmetrized(graph)
    partdir = cached_partition_set(graph, args.workers, args.partition, args.seed, args.partition_dir,
                                   quiet=args.quiet or args.json)
    return _launch(args, partdir, options, args.workers, graph.node_ids)


def _check_args(args: argparse.Namespace) -> None:
    """Options refused before any work (and before anything is written)."""
    if args.workers is not None and args.workers < 1:
        raise AnalyticsError("--workers must be >= 1")
    if args.timeout <= 0:
        raise AnalyticsError("--timeout must be positive")
    if args.out is not None:
        if args.out.suffix not in SUFFIXES:
            raise AnalyticsError(f"--out must end in .npy or .csv, got {str(args.out)!r}")
        if args.out.exists() and not args.force:
            raise AnalyticsError(f"{args.out} exists; pass --force to overwrite it")
    _options(args, args.source).check(None)  # algorithm options, before the graph loads


def _options(args: argparse.Namespace, source: int | None) -> AnalyzeOptions:
    return AnalyzeOptions(args.algo, source, args.damping, args.tol, args.max_iterations, args.weight_seed)


def _internal_source(source: int | None, node_ids: np.ndarray | None, num_nodes: int) -> int | None:
    """The node index of original id ``source``."""
    if source is None or node_ids is None:
        return source
    at = int(np.searchsorted(node_ids, source))
    if at >= num_nodes or node_ids[at] != source:
        raise AnalyticsError(f"source {source} is not a node of the graph (its ids run {node_ids[0]}..{node_ids[-1]} "
                             f"with gaps)")
    return at


def _run_partition_set(args: argparse.Namespace, partdir: Path) -> int:
    pset = load_partition_set(partdir, verify=True)
    pset.verify_all()
    num_nodes = int(pset.manifest["graph"]["num_nodes"])
    options = _options(args, args.source)
    options.check(num_nodes)
    parts = [pset.part(k) for k in range(pset.num_parts)]
    if options.algo == "sssp" and options.weight_seed is None:
        for part in parts:
            check_weights(None if part.weights is None else np.asarray(part.weights))
    if options.algo == "cc":
        _check_symmetric(pset)
    workers = pset.num_parts
    if args.workers is not None and args.workers != workers:
        raise AnalyticsError(f"{partdir} has {workers} parts; pass --workers {workers} or another partition set")
    if workers == 1:
        _report(args, analyze_part(parts[0], num_nodes, options), None)
        return 0
    return _launch(args, partdir, options, workers, None)


def _check_symmetric(pset) -> None:
    from scipy.sparse import csr_matrix

    indptr, indices = pset.in_edges()
    n = indptr.shape[0] - 1
    matrix = csr_matrix((np.ones(indices.shape[0], dtype=np.int8), indices, indptr), shape=(n, n))
    if (matrix != matrix.T).nnz:
        raise AnalyticsError(f"{pset.path} holds a directed graph; connected components need both directions: pass "
                             "the GRAPH itself (analyze symmetrises it) or partition a symmetrised graph")


def _launch(args: argparse.Namespace, partdir: Path, options: AnalyzeOptions, workers: int,
            node_ids: np.ndarray | None) -> int:
    with tempfile.TemporaryDirectory(prefix="commgraph-analyze-") as scratch:
        argv = ["analyze", str(partdir), "--algo", options.algo, "--damping", str(options.damping), "--tol",
                str(options.tol), "--max-iterations", str(options.max_iterations), "--plan", args.plan,
                "--topology", args.topology, "--timeout", str(args.timeout)]
        for flag, value in (("--source", options.source), ("--weight-seed", options.weight_seed),
                            ("--placement", args.placement), ("--out", args.out)):
            if value is not None:
                argv += [flag, str(value)]
        if node_ids is not None:
            np.save(Path(scratch) / "node_ids.npy", node_ids)
            argv += ["--node-ids", str(Path(scratch) / "node_ids.npy")]
        argv += ["--json"] * args.json + ["--force"] * args.force + ["--debug"] * args.debug
        if not (args.quiet or args.json):
            print(f"analyzing {partdir} with {workers} workers", file=sys.stderr)
        return launch_local(argv, workers, grace=args.timeout + 15, threads_per_worker=1)


def _partition_dir(args: argparse.Namespace) -> Path:
    given = Path(args.graph)
    if not (given / "manifest.json").is_file():
        raise AnalyticsError("under torchrun, analyze takes a partition set (make one with commgraph partition)")
    return given


def _rank(args: argparse.Namespace, world, partdir: Path) -> None:
    from commgraph.analytics.worker import run_worker

    options = _options(args, args.source)
    result = run_worker(world, partdir, options, plan=args.plan, topology=args.topology, placement=args.placement)
    if result is not None:
        _report(args, result, None if args.node_ids is None else np.load(args.node_ids))


def _report(args: argparse.Namespace, result: Analysis, node_ids: np.ndarray | None) -> None:
    """Write --out and print the figures (rank 0 or the one process)."""
    if args.out is not None:
        write_values(args.out, _in_original_ids(result, node_ids), node_ids)
    if not result.converged:
        print(f"commgraph: warning: {result.algo} did not converge in {result.iterations} iterations",
              file=sys.stderr)
    if args.json:
        print(json.dumps(result.summary()))
        return
    print(f"{result.algo}: {result.iterations} iterations, {result.seconds:.3f} s, {result.bytes} bytes exchanged, "
          f"{result.edges_per_second:.3g} edges/s")


def _in_original_ids(result: Analysis, node_ids: np.ndarray | None) -> np.ndarray:
    if result.algo == "cc" and node_ids is not None:
        return node_ids[result.values]
    return result.values


def write_values(path: Path, values: np.ndarray, node_ids: np.ndarray | None) -> None:
    """Every node's value, atomically: ``.npy`` (one per node, in load order) or ``.csv``
    (``node,value`` under the original ids)."""
    with atomic_write(path) as handle:
        if path.suffix == ".npy":
            np.save(handle, values, allow_pickle=False)
            return
        ids = node_ids if node_ids is not None else np.arange(values.shape[0])
        handle.write(b"node,value\n")
        for start in range(0, values.shape[0], CSV_CHUNK):
            rows = slice(start, start + CSV_CHUNK)
            handle.write("".join(map("{},{}\n".format, ids[rows].tolist(), values[rows].tolist())).encode())
