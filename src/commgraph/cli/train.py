"""``commgraph train GRAPH|PARTDIR --workers N``: GNN training, one part per worker, on the whole
graph or (``--sampler``) on sampled mini-batches.

Given a graph, it is partitioned first (g3 by default) into a cached partition set; given a
partition set directory, that set is used. Without torchrun the command starts ``--workers`` local
processes itself; under torchrun (``torchrun --nnodes ... -m commgraph train ...``) each process
joins torchrun's world instead, so several machines need nothing else.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

from commgraph.cli import describe
from commgraph.cli.graph_args import add_graph_arguments
from commgraph.cli.ranks import run_rank
from commgraph.errors import CommgraphError, TrainingError
from commgraph.graph import load_graph
from commgraph.partition import (METHODS, check_parts, load_partition_set, partition_graph, partition_metrics,
                                 write_partition_set)
from commgraph.plan.allgather import placement
from commgraph.plan.choose import check_allreduce, choose_allgather, job_topology, parse_placement
from commgraph.runtime import pick_device
from commgraph.topology.files import write_yaml
from commgraph.train import TrainConfig, checkpoint
from commgraph.train.config import add_arguments, from_args

CACHE = Path(os.environ.get("COMMGRAPH_CACHE", Path.home() / ".cache" / "commgraph")) / "partitions"


def register(subparsers) -> None:
    parser = subparsers.add_parser("train", help="train a GNN across workers, full-graph or on sampled mini-batches",
                                   description=describe(__doc__))
    add_graph_arguments(parser)
    parser.add_argument("--workers", type=int, help="local worker processes (default: the partition set's "
                        "parts, else 1); ignored under torchrun, which sets the world size")
    parser.add_argument("--partition", choices=METHODS, default="g3", help="how to split a GRAPH (default g3)")
    parser.add_argument("--partition-dir", type=Path, metavar="DIR",
                        help=f"where to keep the partition set of a GRAPH (default: a cache under {CACHE})")
    add_arguments(parser)
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
    config = _check_options(args)
    partition_dir = _partition_set(args, args.workers)
    pset = load_partition_set(partition_dir, verify=False)
    pset.verify_all()  # a damaged set: one message from here, not one from every worker
    _check_trainable(str(partition_dir), pset.part(0))
    workers = pset.num_parts
    if args.workers is not None and args.workers != workers:
        raise TrainingError(f"{partition_dir} has {workers} parts; pass --workers {workers} or another partition set")
    device = pick_device(args.device, workers, say=None if args.quiet else lambda line: print(line, file=sys.stderr))
    if config.resume:  # every worker would find the same missing or mismatched checkpoint
        checkpoint.load(Path(config.checkpoint_dir), checkpoint.identity(pset.manifest["graph"]["checksum"], workers,
                                                                         config))
    from commgraph.runtime import launch_local

    with tempfile.TemporaryDirectory(prefix="commgraph-train-") as scratch:
        config = _resolve_plan(config, pset, workers, device, Path(scratch), quiet=args.quiet)
        if not args.quiet:
            how = f"exchange {config.exchange}" if config.sampler is None else \
                f"sampler {config.sampler}, evaluated by the full-graph pass (exchange {config.exchange})"
            print(f"training {config.model} on {partition_dir} with {workers} worker(s), {how}", file=sys.stderr)
        return launch_local(_worker_argv(args, partition_dir, config), workers, grace=args.timeout + 15,
                            threads_per_worker=args.threads)


def _resolve_plan(config: TrainConfig, pset, workers: int, device: str, scratch: Path, *, quiet: bool) -> TrainConfig:
    """Choose (or check) the all-gather plan once, before any worker starts, and hand the workers
    the plan itself and the topology it was made on."""
    topology = job_topology(config.topology, workers, device)
    devices = placement(pset, topology, parse_placement(config.placement))
    check_allreduce(config.allreduce, topology, devices)
    if config.exchange == "replicate":
        return config
    choice = choose_allgather(config.plan, pset, topology, 4 * config.hidden, devices)
    if not quiet:
        print(f"commgraph: {choice.describe()}", file=sys.stderr)
    plan_file, topology_file = scratch / "plan.npz", scratch / "topology.yaml"
    choice.plan.save(plan_file)
    write_yaml(topology, topology_file)
    return replace(config, plan=str(plan_file), topology=str(topology_file), placement=",".join(choice.devices))


def _check_options(args: argparse.Namespace) -> TrainConfig:
    """The launcher's own options, and the training configuration (which checks itself)."""
    if args.timeout <= 0:
        raise TrainingError("--timeout must be positive")
    if args.threads is not None and args.threads < 1:
        raise TrainingError("--threads must be >= 1")
    pick_device(args.device, args.workers or 1)
    return from_args(args, progress=not args.quiet)


def _partition_set(args: argparse.Namespace, workers: int | None) -> Path:
    """The partition set to train on: GRAPH itself if it is one, else a (cached) fresh one."""
    given = Path(args.graph)
    if (given / "manifest.json").is_file():
        return given
    graph = load_graph(args.graph, format=args.format, name=args.name, split=args.split)
    _check_trainable(graph.name, graph)  # before minutes of partitioning
    return cached_partition_set(graph, workers or 1, args.partition, args.seed, args.partition_dir, quiet=args.quiet)


def cached_partition_set(graph, parts: int, method: str, seed: int, folder: Path | None, *, quiet: bool) -> Path:
    """A partition set of ``graph`` into ``parts``: ``folder`` (default: a cache entry named by the
    graph's checksum) if it holds a sound one, else made there now."""
    check_parts(parts, graph.num_nodes)
    target = folder or CACHE / f"{graph.name}-{graph.checksum()[:16]}-{method}-k{parts}-s{seed}"
    if (target / "manifest.json").is_file():
        try:
            load_partition_set(target, graph, verify=True).verify_all()
            return target
        except CommgraphError:
            pass  # stale or damaged: make it again
    if not quiet:
        print(f"partitioning {graph.name} into {parts} parts with {method} -> {target}", file=sys.stderr)
    start = time.perf_counter()
    assignment, details = partition_graph(graph, parts, method, seed,
                                          log=None if quiet else lambda line: print(line, file=sys.stderr))
    write_partition_set(graph, assignment, parts, target, method=method, seed=seed,
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


def _worker_argv(args: argparse.Namespace, partition_dir: Path, config: TrainConfig) -> list[str]:
    argv = ["train", str(partition_dir), "--timeout", str(args.timeout), "--device", args.device, *config.to_argv()]
    return argv + ["--quiet"] * args.quiet + ["--debug"] * args.debug


def _worker(args: argparse.Namespace) -> int:
    """One rank of the job (started by our launcher or by torchrun)."""
    _check_options(args)
    if args.threads is not None:  # under torchrun; our launcher passes it as COMMGRAPH_THREADS
        os.environ["COMMGRAPH_THREADS"] = str(args.threads)
    return run_rank(args, lambda: _shared_partition_set(args), partial(_train, args))


def _train(args: argparse.Namespace, world, partition_dir: Path) -> None:
    from commgraph.train import train_worker

    config = from_args(args, progress=not args.quiet)
    result = train_worker(world, partition_dir, config)
    if world.is_leader and result.history:
        last, best = result.history[-1], result.best
        test = "-" if last["test_acc"] is None else f"{last['test_acc']:.4f}"
        print(f"done: {last['epoch']} epochs, loss {last['loss']:.4f}, test accuracy {test}"
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

