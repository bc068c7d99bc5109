"""``commgraph train GRAPH|PARTDIR --workers N``: full-graph GNN training, one part per worker.

Given a graph, it is partitioned first (g3 by default) into a cached partition set; given a
partition set directory, that set is used. Without torchrun the command starts ``--workers`` local
processes itself; under torchrun (``torchrun --nnodes ... -m commgraph train ...``) each process
joins torchrun's world instead, so several machines need nothing else.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial
from pathlib import Path

from commgraph.cli import describe
from commgraph.cli.graph_args import add_graph_arguments
from commgraph.cli.ranks import run_rank
from commgraph.errors import CommgraphError, TrainingError
from commgraph.graph import load_graph
from commgraph.nn import MODELS, check_model_options
from commgraph.partition import (METHODS, check_parts, load_partition_set, partition_graph, partition_metrics,
                                 write_partition_set)
from commgraph.runtime import pick_device
from commgraph.train import EXCHANGES, TrainConfig
from commgraph.train.predict import check_predictions_path

CACHE = Path(os.environ.get("COMMGRAPH_CACHE", Path.home() / ".cache" / "commgraph")) / "partitions"


def register(subparsers) -> None:
    parser = subparsers.add_parser("train", help="train a GNN on the whole graph across workers",
                                   description=describe(__doc__))
    add_graph_arguments(parser)
    parser.add_argument("--workers", type=int, help="local worker processes (default: the partition set's "
                        "parts, else 1); ignored under torchrun, which sets the world size")
    parser.add_argument("--model", choices=MODELS, default="sage")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--heads", type=int, default=4, help="attention heads of GAT's hidden layers")
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--partition", choices=METHODS, default="g3", help="how to split a GRAPH (default g3)")
    parser.add_argument("--partition-dir", type=Path, metavar="DIR",
                        help=f"where to keep the partition set of a GRAPH (default: a cache under {CACHE})")
    parser.add_argument("--exchange", choices=EXCHANGES, default="pipelined",
                        help="pipelined (G3 bins, default), barrier (layer-wise) or replicate (L-hop halo)")
    parser.add_argument("--bin-size", type=int, help="rows per bin (default: half the free memory's worth)")
    parser.add_argument("--eval-every", type=int, default=1, metavar="N",
                        help="accuracies every N epochs and after the last (default 1); the others log null")
    parser.add_argument("--metrics-out", type=Path, metavar="FILE", help="one JSON line per epoch")
    parser.add_argument("--checkpoint-dir", type=Path, metavar="DIR", help="checkpoint after every epoch")
    parser.add_argument("--predictions-out", type=Path, metavar="FILE",
                        help="the last epoch's predicted class of every node (.npy or .csv), computed by the workers")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint-dir's checkpoint")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds any exchange may wait before the job stops (default 120)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: one GPU per worker with NCCL if there are GPUs, else CPU with Gloo")
    parser.add_argument("--threads", type=int, help="compute threads per worker (default: cores / local workers)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or epoch lines; only the final result")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from commgraph.runtime import in_torchrun

    if in_torchrun():
        return _worker(args)
    if args.workers is not None and args.workers < 1:
        raise TrainingError("--workers must be >= 1")
    _check_options(args)
    partition_dir = _partition_set(args, args.workers)
    pset = load_partition_set(partition_dir, verify=False)
    _check_trainable(str(partition_dir), pset.part(0))
    workers = pset.num_parts
    if args.workers is not None and args.workers != workers:
        raise TrainingError(f"{partition_dir} has {workers} parts; pass --workers {workers} or another partition set")
    pick_device(args.device, workers, say=None if args.quiet else lambda line: print(line, file=sys.stderr))
    if not args.quiet:
        print(f"training {args.model} on {partition_dir} with {workers} worker(s), exchange {args.exchange}",
              file=sys.stderr)
    from commgraph.runtime import launch_local

    return launch_local(_worker_argv(args, partition_dir), workers, grace=args.timeout + 15,
                        threads_per_worker=args.threads)


def _check_options(args: argparse.Namespace) -> None:
    if args.epochs < 1:
        raise TrainingError("--epochs must be >= 1")
    check_model_options(args.layers, args.hidden, args.heads, args.dropout)
    if not args.lr > 0 or args.weight_decay < 0:
        raise TrainingError(f"need --lr > 0 and --weight-decay >= 0, got {args.lr} and {args.weight_decay}")
    if args.timeout <= 0:
        raise TrainingError("--timeout must be positive")
    if args.resume and not args.checkpoint_dir:
        raise TrainingError("--resume needs --checkpoint-dir")
    if args.predictions_out is not None:
        check_predictions_path(args.predictions_out)
    if args.bin_size is not None and args.bin_size < 1:
        raise TrainingError("--bin-size must be >= 1")
    if args.eval_every < 1:
        raise TrainingError("--eval-every must be >= 1")
    if args.threads is not None and args.threads < 1:
        raise TrainingError("--threads must be >= 1")
    pick_device(args.device, args.workers or 1)


def _partition_set(args: argparse.Namespace, workers: int | None) -> Path:
    """The partition set to train on: GRAPH itself if it is one, else a (cached) fresh one."""
    given = Path(args.graph)
    if (given / "manifest.json").is_file():
        return given
    graph = load_graph(args.graph, format=args.format, name=args.name, split=args.split)
    _check_trainable(graph.name, graph)  # before minutes of partitioning
    parts = workers or 1
    check_parts(parts, graph.num_nodes)
    target = args.partition_dir or CACHE / f"{graph.name}-{graph.checksum()[:16]}-{args.partition}-k{parts}-s{args.seed}"
    if (target / "manifest.json").is_file():
        try:
            load_partition_set(target, graph, verify=True)
            return target
        except CommgraphError:
            pass  # stale or damaged: make it again
    if not args.quiet:
        print(f"partitioning {graph.name} into {parts} parts with {args.partition} -> {target}", file=sys.stderr)
    start = time.perf_counter()
    assignment, details = partition_graph(graph, parts, args.partition, args.seed,
                                          log=None if args.quiet else lambda line: print(line, file=sys.stderr))
    write_partition_set(graph, assignment, parts, target, method=args.partition, seed=args.seed,
                        seconds=time.perf_counter() - start,
                        metrics={**partition_metrics(graph, assignment, parts), **details}, force=True)
    return target


def _check_trainable(name: str, data) -> None:
    """Refuse, once and in the launcher, a graph (or partition set) that node classification
    cannot train on."""
    missing = [what for what, value in (("features", data.features), ("labels", data.labels),
                                        ("train mask", data.train_mask)) if value is None]
    if missing:
        raise TrainingError(f"{name} has no node {', '.join(missing)} to train on: use a dataset that has them "
                            "(cora, an OGB or Planetoid folder, an .npz with them) or a synthetic graph that "
                            "makes them, e.g. rmat:nodes=100000,edges=1000000,features=64,classes=8 or "
                            "sbm:nodes=100000,classes=8,features=64")


def _worker_argv(args: argparse.Namespace, partition_dir: Path) -> list[str]:
    argv = ["train", str(partition_dir), "--model", args.model, "--epochs", str(args.epochs),
            "--layers", str(args.layers), "--hidden", str(args.hidden), "--heads", str(args.heads),
            "--dropout", str(args.dropout), "--lr", str(args.lr), "--weight-decay", str(args.weight_decay),
            "--seed", str(args.seed), "--exchange", args.exchange, "--timeout", str(args.timeout),
            "--device", args.device, "--eval-every", str(args.eval_every)]
    for flag, value in (("--bin-size", args.bin_size), ("--metrics-out", args.metrics_out),
                        ("--checkpoint-dir", args.checkpoint_dir), ("--predictions-out", args.predictions_out)):
        if value is not None:
            argv += [flag, str(value)]
    argv += ["--resume"] * args.resume + ["--quiet"] * args.quiet + ["--debug"] * args.debug
    return argv


def _worker(args: argparse.Namespace) -> int:
    """One rank of the job (started by our launcher or by torchrun)."""
    _check_options(args)
    if args.threads is not None:  # under torchrun; our launcher passes it as COMMGRAPH_THREADS
        os.environ["COMMGRAPH_THREADS"] = str(args.threads)
    return run_rank(args, lambda: _shared_partition_set(args), partial(_train, args))


def _train(args: argparse.Namespace, world, partition_dir: Path) -> None:
    from commgraph.train import train_worker

    config = TrainConfig(model=args.model, epochs=args.epochs, layers=args.layers, hidden=args.hidden,
                         heads=args.heads, dropout=args.dropout, lr=args.lr, weight_decay=args.weight_decay,
                         seed=args.seed, exchange=args.exchange, bin_size=args.bin_size, eval_every=args.eval_every,
                         metrics_out=str(args.metrics_out) if args.metrics_out else None,
                         checkpoint_dir=str(args.checkpoint_dir) if args.checkpoint_dir else None,
                         predictions_out=str(args.predictions_out) if args.predictions_out else None,
                         resume=args.resume, progress=not args.quiet)
    result = train_worker(world, partition_dir, config)
    if world.is_leader and result.history:
        last, best = result.history[-1], result.best
        print(f"done: {last['epoch']} epochs, loss {last['loss']:.4f}, test accuracy {last['test_acc']:.4f}"
              + (f"; best validation accuracy {best['val_acc']:.4f} at epoch {best['epoch']} "
                 f"(test {best['test_acc']:.4f})" if best else ""), file=sys.stderr)


def _shared_partition_set(args: argparse.Namespace) -> Path:
    """Under torchrun with a GRAPH, each machine's local rank 0 partitions (deterministically, so
    every machine gets the same set) and the other local ranks wait for it."""
    given = Path(args.graph)
    if (given / "manifest.json").is_file():
        return given
    workers = int(os.environ["WORLD_SIZE"])
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        return _partition_set(args, workers)
    graph = load_graph(args.graph, format=args.format, name=args.name, split=args.split)
    target = args.partition_dir or CACHE / f"{graph.name}-{graph.checksum()[:16]}-{args.partition}-k{workers}-s{args.seed}"
    deadline = time.monotonic() + max(args.timeout, 600)
    while not (target / "manifest.json").is_file():
        if time.monotonic() > deadline:
            raise TrainingError(f"local rank 0 did not produce the partition set {target} in time")
        time.sleep(0.5)
    return target

