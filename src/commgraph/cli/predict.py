"""``commgraph predict GRAPH|PARTDIR --checkpoint-dir DIR``: label every node with a trained model.

The model is the one ``commgraph train --checkpoint-dir DIR`` saved after its last epoch (with
``--best``, after the epoch with the best validation accuracy). It runs on the whole graph in this
one process (training computes the single-graph model, so no partition is needed), reports its
accuracy on each split the graph has, and with ``--out`` writes the predicted class of every node:
``.npy`` (one int64 per node) or ``.csv`` (``node,class``, in the graph's original node ids when its
loader kept them).

With ``--workers N`` and a partition set of N parts, N processes predict instead, each its own part
(layer-wise exchange of halo rows, as in training), for graphs whose activations do not fit in one
process; rank 0 reports and writes the file. Under torchrun it joins torchrun's world.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

from commgraph.cli import describe
from commgraph.cli.graph_args import add_graph_arguments
from commgraph.cli.ranks import run_rank
from commgraph.errors import TrainingError
from commgraph.graph import load_graph
from commgraph.partition import load_partition_set
from commgraph.runtime import in_torchrun, launch_local, pick_device
from commgraph.train.predict import (check_predictions_path, load_model, predict, predict_part, split_accuracy,
                                     split_counts, write_predictions)


def register(subparsers) -> None:
    parser = subparsers.add_parser("predict", help="label every node with a trained model",
                                   description=describe(__doc__))
    add_graph_arguments(parser)
    parser.add_argument("--checkpoint-dir", required=True, type=Path, metavar="DIR",
                        help="the --checkpoint-dir of a commgraph train run")
    parser.add_argument("--best", action="store_true",
                        help="the model of the epoch with the best validation accuracy, not the last one")
    parser.add_argument("--out", type=Path, metavar="FILE", help="write the predicted classes (.npy or .csv)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: the first GPU if there is one, else CPU")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--workers", type=int, help="predict with this many local processes, one per part of a "
                        "partition set given as GRAPH (default: one process, the whole graph)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="with --workers: seconds any exchange may wait before the job stops (default 120)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if in_torchrun():
        return run_rank(args, lambda: Path(args.graph), partial(_predict_rank, args))
    if args.out is not None:
        check_predictions_path(args.out)
        if args.out.exists() and not args.force:
            raise TrainingError(f"{str(args.out)!r} exists; pass --force to overwrite it")
    device = pick_device(args.device, args.workers or 1, say=lambda line: print(line, file=sys.stderr))
    model, trained = load_model(args.checkpoint_dir, best=args.best)
    is_set = (Path(args.graph) / "manifest.json").is_file()
    if args.workers is not None:
        if args.workers < 1 or args.timeout <= 0:
            raise TrainingError("need --workers >= 1 and a positive --timeout")
        if not is_set:
            raise TrainingError(f"--workers needs a partition set as GRAPH: make one with commgraph partition "
                                f"{args.graph} --parts {args.workers} --out DIR, then predict DIR")
        parts = load_partition_set(args.graph, verify=False).num_parts
        if parts != args.workers:
            raise TrainingError(f"{args.graph} has {parts} parts; pass --workers {parts} or another partition set")
        argv = ["predict", args.graph, "--checkpoint-dir", str(args.checkpoint_dir), "--device", args.device,
                "--timeout", str(args.timeout), *(["--best"] * args.best), *(["--json"] * args.json),
                *(["--debug"] * args.debug), *(["--out", str(args.out)] if args.out is not None else [])]
        return launch_local(argv, args.workers, grace=args.timeout + 15)
    if is_set:
        pset = load_partition_set(args.graph)
        graph, checksum = pset.graph(), pset.manifest["graph"]["checksum"]
    else:
        graph = load_graph(args.graph, format=args.format, name=args.name, split=args.split)
        checksum = graph.checksum()
    start = time.perf_counter()
    predicted = predict(model, graph, device).argmax(dim=1).cpu().numpy()
    seconds = time.perf_counter() - start
    if args.out is not None:
        write_predictions(args.out, predicted, graph.node_ids)
    _report(args, trained, graph.name, graph.num_nodes, checksum, split_accuracy(split_counts(graph, predicted)), seconds)
    return 0


def _predict_rank(args: argparse.Namespace, world, partition_dir: Path) -> None:
    start = time.perf_counter()
    predicted, accuracy, trained = predict_part(world, partition_dir, args.checkpoint_dir, args.best)
    seconds = time.perf_counter() - start
    if predicted is None:  # not rank 0
        return
    if args.out is not None:
        write_predictions(args.out, predicted)
    manifest = load_partition_set(partition_dir, verify=False).manifest
    _report(args, trained, manifest["graph"]["name"], predicted.shape[0], manifest["graph"]["checksum"], accuracy,
            seconds)


def _report(args: argparse.Namespace, trained: dict, name: str, num_nodes: int, checksum: str, accuracy: dict,
            seconds: float) -> None:
    report = {"graph": name, "num_nodes": num_nodes, "model": trained["model"], "layers": trained["layers"],
              "hidden": trained["hidden"], "epoch": trained["epoch"], "same_graph": checksum == trained["graph"],
              "accuracy": accuracy, "out": None if args.out is None else str(args.out), "seconds": seconds}
    if args.json:
        print(json.dumps(report), flush=True)
        return
    origin = "the graph it was trained on" if report["same_graph"] else "a graph it was not trained on"
    print(f"{trained['model']}, {trained['layers']} layers, hidden {trained['hidden']}, after epoch "
          f"{trained['epoch']}, on {origin}: {name}, {num_nodes:,} nodes in {seconds:.2f} s")
    for split, result in accuracy.items():
        print(f"{split:<5} accuracy {result['accuracy']:.4f} ({result['nodes']:,} nodes)")
    if args.out is not None:
        print(f"predicted classes -> {args.out}", flush=True)

