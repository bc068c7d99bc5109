"""``commgraph predict GRAPH|PARTDIR --checkpoint-dir DIR``: label every node with a trained model.

The model is the one ``commgraph train --checkpoint-dir DIR`` saved after its last epoch (with
``--best``, after the epoch with the best validation accuracy). It runs on the whole graph in this
one process (training computes the single-graph model, so no partition is needed), reports its
accuracy on each split the graph has, and with ``--out`` writes the predicted class of every node:
``.npy`` (one int64 per node) or ``.csv`` (``node,class``, in the graph's original node ids when its
loader kept them).

With ``--workers N``, N processes predict instead, each its own part (layer-wise exchange of halo
rows, as in training), for graphs whose activations do not fit in one process; a GRAPH is
partitioned first (cached, as for training), a partition set is used as it is. Rank 0 reports and
writes the file. Under torchrun it joins torchrun's world.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from commgraph.atomic import check_output
from commgraph.cli import command_here, describe
from commgraph.cli.args import FORCE_HELP, add_json_alias, format_option, wrote
from commgraph.cli.graph_args import add_graph_arguments, graph_from_args
from commgraph.errors import TrainingError
from commgraph.launch import JobSpec, LaunchOptions, launch, received
from commgraph.options import Options, option
from commgraph.partition import is_partition_set, load_partition_set
from commgraph.plan.memory import JobShape, estimate_memory
from commgraph.render import render
from commgraph.render.runs import prediction_report
from commgraph.runtime.options import JobOptions, in_torchrun


@dataclass(frozen=True)
class PredictOptions(Options):
    """Which model, and what to report and write."""

    error = TrainingError
    checkpoint_dir: str = option("the --checkpoint-dir of a commgraph train run", metavar="DIR")
    best: bool = option(
        "the model of the epoch with the best validation accuracy, not the last one", type=bool, default=False
    )
    out: str | None = option("write the predicted classes (.npy or .csv)", metavar="FILE", default=None)
    force: bool = option(FORCE_HELP, type=bool, default=False)
    output: str = format_option()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.out is not None:
            from commgraph.train.predict import check_predictions_path

            check_predictions_path(Path(self.out))


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "predict", help="label every node with a trained model", description=describe(__doc__)
    )
    add_graph_arguments(parser)
    PredictOptions.add_arguments(parser)
    add_json_alias(parser)
    LaunchOptions.add_arguments(parser.add_argument_group("workers (with --workers: one process per part)"))
    JobOptions.add_arguments(parser.add_argument_group("topology and plans (with --workers)"))
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from commgraph.runtime import pick_device
    from commgraph.train.predict import load_model, predict, split_accuracy, split_counts, write_predictions

    launcher, options, job = _options(args)
    check_output(options.out, "--out", force=None if in_torchrun() else options.force)  # a worker: checked already
    if in_torchrun() or launcher.workers is not None:
        return _launch(args, launcher, options, job)
    device = pick_device(launcher.device, 1, say=None if launcher.quiet else partial(print, file=sys.stderr))
    model, trained = load_model(options.checkpoint_dir, best=options.best)
    if is_partition_set(args.graph):
        pset = load_partition_set(args.graph)
        pset.validate()
        graph, checksum = pset.graph(), pset.manifest["graph"]["checksum"]
    else:
        graph = graph_from_args(args)
        checksum = graph.checksum()
    start = time.perf_counter()
    predicted = predict(model, graph, device).argmax(dim=1).cpu().numpy()
    seconds = time.perf_counter() - start
    if options.out is not None:
        write_predictions(Path(options.out), predicted, graph.node_ids)
        wrote(options.out)
    _report(
        options, trained, graph.name, graph.num_nodes, checksum, split_accuracy(split_counts(graph, predicted)), seconds
    )
    return 0


def _options(args: argparse.Namespace) -> tuple[LaunchOptions, PredictOptions, JobOptions]:
    """The launcher's, the command's and the job's options: in a worker our launcher started, as it
    handed them over (resolved; nothing parsed); else from the flags."""
    given = received()
    if given is not None:
        return given.launch, PredictOptions(**given.options), given.job
    return LaunchOptions.from_args(args), PredictOptions.from_args(args), JobOptions.from_args(args)


def _launch(args: argparse.Namespace, launcher: LaunchOptions, options: PredictOptions, job: JobOptions) -> int:
    """Predict with one worker process per part (``--workers``, or under torchrun)."""
    from commgraph.train.predict import load_model

    model, _ = load_model(options.checkpoint_dir, best=options.best)  # a bad checkpoint: said once, here
    shape = partial(JobShape, hidden=model.widths[1], layers=len(model.widths) - 1, train=False)
    spec = JobSpec(
        "predict",
        args.graph,
        partial(graph_from_args, args),
        launcher,
        job,
        row_bytes=4 * model.widths[1],
        data=asdict(options),
        memory=lambda pset, workers: estimate_memory(pset, shape(workers, workers)),
        output=options.output,
        debug=args.debug,
        entry=command_here if args.ends_process else None,
    )
    return launch(spec, partial(_predict_rank, options, job))


def _predict_rank(options: PredictOptions, job: JobOptions, world, partition_dir: Path) -> None:
    from commgraph.train.predict import predict_part, write_predictions

    start = time.perf_counter()
    predicted, accuracy, trained = predict_part(world, partition_dir, options.checkpoint_dir, options.best, job)
    seconds = time.perf_counter() - start
    if predicted is None:  # not rank 0
        return
    if options.out is not None:
        write_predictions(Path(options.out), predicted)
        wrote(options.out)
    manifest = load_partition_set(partition_dir, verify=False).manifest
    _report(
        options,
        trained,
        manifest["graph"]["name"],
        predicted.shape[0],
        manifest["graph"]["checksum"],
        accuracy,
        seconds,
    )


def _report(
    options: PredictOptions, trained: dict, name: str, num_nodes: int, checksum: str, accuracy: dict, seconds: float
) -> None:
    report = {
        "graph": name,
        "num_nodes": num_nodes,
        "model": trained["model"],
        "layers": trained["layers"],
        "hidden": trained["hidden"],
        "epoch": trained["epoch"],
        "same_graph": checksum == trained["graph"],
        "accuracy": accuracy,
        "out": options.out,
        "seconds": seconds,
    }
    print(render(prediction_report(report), options.output), flush=True)
