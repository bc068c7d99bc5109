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
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np

from commgraph.analytics import Analysis, AnalyzeOptions, analyze, symmetrized
from commgraph.analytics.job import analyze_part, check_partition_set, options_for_graph
from commgraph.atomic import check_output
from commgraph.cli import describe
from commgraph.cli.args import FORCE_HELP, add_json_alias, format_option, wrote
from commgraph.cli.graph_args import add_graph_arguments, graph_from_args
from commgraph.errors import AnalyticsError
from commgraph.graph.nodefile import check_node_file, write_node_values
from commgraph.launch import JobSpec, LaunchOptions, launch, received
from commgraph.options import Options, option
from commgraph.partition import PartitionSet, is_partition_set, load_partition_set
from commgraph.plan.memory import JobShape, MemoryEstimate, estimate_memory
from commgraph.render import render
from commgraph.render.runs import analysis_report
from commgraph.runtime.options import JobOptions, in_torchrun

ROW_BYTES = 8  # one float64 per boundary row


@dataclass(frozen=True)
class Report(Options):
    """What rank 0 (or the one process) reports and writes."""

    error = AnalyticsError
    out: str | None = option("per-node results (.npy or .csv)", metavar="FILE", default=None)
    force: bool = option(FORCE_HELP, type=bool, default=False)
    output: str = format_option()
    node_ids: str | None = option("the launcher's original ids, to the workers", cli=False, default=None)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.out is not None:
            check_node_file(self.out, AnalyticsError)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "analyze", help="BFS, SSSP, PageRank or connected components across workers", description=describe(__doc__)
    )
    add_graph_arguments(parser)
    AnalyzeOptions.add_arguments(parser)
    parser.add_argument(
        "--directed",
        action="store_true",
        help="keep a SNAP file's edges one-way (default: symmetrised, as for training)",
    )
    Report.add_arguments(parser)
    add_json_alias(parser)
    workers = parser.add_argument_group("workers")
    LaunchOptions.add_arguments(workers, skip=("device",))  # the kernels run on the CPU; workers exchange over Gloo
    JobOptions.add_arguments(parser.add_argument_group("topology and plans"), skip=("ordering",))
    workers.add_argument(
        "--device", choices=("cpu",), default="cpu", help="the kernels run on the CPU and workers exchange over Gloo"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    launcher, options, report, job = _options(args)
    check_output(report.out, "--out", force=None if in_torchrun() else report.force)  # a worker: checked already
    options.check(None)  # algorithm options, before the graph loads
    if in_torchrun():
        spec = JobSpec("analyze", args.graph, _needs_partition_set, launcher, job, row_bytes=ROW_BYTES)
        return launch(spec, partial(_rank, options, job, report))
    if is_partition_set(args.graph):
        return _run_partition_set(args.graph, options, launcher, job, report, args.debug)
    graph = graph_from_args(args, directed=args.directed)
    options = options_for_graph(options, graph)
    if (launcher.workers or 1) == 1:
        _report(report, analyze(graph, options), graph.node_ids)
        return 0
    if options.algo == "cc":
        graph = symmetrized(graph)
    with tempfile.TemporaryDirectory(prefix="commgraph-analyze-ids-") as scratch:
        if graph.node_ids is not None:
            report = replace(report, node_ids=str(Path(scratch) / "node_ids.npy"))
            np.save(report.node_ids, graph.node_ids)
        spec = JobSpec(
            "analyze",
            args.graph,
            lambda: graph,
            launcher,
            job,
            row_bytes=ROW_BYTES,
            data=_data(options, report),
            debug=args.debug,
            memory=_memory,
            output=report.output,
        )
        return launch(spec, partial(_rank, options, job, report), describe=_describe)


def _memory(pset: PartitionSet, workers: int) -> MemoryEstimate:
    """What an analysis holds: its part's structure and a value or two per node, no features."""
    return estimate_memory(
        pset, JobShape(workers, workers, hidden=ROW_BYTES // 4, layers=1, train=False, features=False)
    )


def _run_partition_set(
    partdir: str, options: AnalyzeOptions, launcher: LaunchOptions, job: JobOptions, report: Report, debug: bool
) -> int:
    pset = load_partition_set(partdir, verify=True)
    pset.validate()
    pset.verify_all()
    check_partition_set(options, pset)
    if pset.num_parts == 1 and launcher.workers in (None, 1):
        _report(report, analyze_part(pset.part(0), int(pset.manifest["graph"]["num_nodes"]), options), None)
        return 0
    spec = JobSpec(
        "analyze",
        partdir,
        _needs_partition_set,
        launcher,
        job,
        row_bytes=ROW_BYTES,
        data=_data(options, report),
        debug=debug,
        memory=_memory,
        output=report.output,
    )
    return launch(spec, partial(_rank, options, job, report), describe=_describe)


def _options(args: argparse.Namespace) -> tuple[LaunchOptions, AnalyzeOptions, Report, JobOptions]:
    """The launcher's, the analysis', the report's and the job's options: in a worker our launcher
    started, as it handed them over (:func:`_data`; nothing parsed); else from the flags."""
    given = received()
    if given is not None:
        data = given.options
        return given.launch, AnalyzeOptions(**data["analyze"]), Report(**data["report"]), given.job
    launcher = LaunchOptions.from_args(args, device="cpu", quiet=args.quiet or args.output != "text")
    report = Report.from_args(args)
    return launcher, AnalyzeOptions.from_args(args), report, JobOptions.from_args(args)


def _data(options: AnalyzeOptions, report: Report) -> dict:
    """What the workers receive besides the launcher's and the job's options (:func:`_options`)."""
    return {"analyze": asdict(options), "report": asdict(report)}


def _describe(partdir: Path, workers: int) -> str:
    return f"analyzing {partdir} with {workers} workers"


def _needs_partition_set():
    raise AnalyticsError("under torchrun, analyze takes a partition set (make one with commgraph partition)")


def _rank(options: AnalyzeOptions, job: JobOptions, report: Report, world, partdir: Path) -> None:
    from commgraph.analytics.worker import run_worker

    result = run_worker(world, partdir, options, job)
    if result is not None:
        _report(report, result, None if report.node_ids is None else np.load(report.node_ids))


def _report(report: Report, result: Analysis, node_ids: np.ndarray | None) -> None:
    """Write --out and print the figures (rank 0 or the one process)."""
    if report.out is not None:
        values = node_ids[result.values] if result.algo == "cc" and node_ids is not None else result.values
        write_node_values(report.out, values, node_ids)
        wrote(report.out)
    if not result.converged:
        print(f"commgraph: warning: {result.algo} did not converge in {result.iterations} iterations", file=sys.stderr)
    print(render(analysis_report(result.summary()), report.output))
