"""``commgraph train GRAPH|PARTDIR --workers N``: GNN training, one part per worker, on the whole
graph or (``--sampler``) on sampled mini-batches.

Given a graph, it is partitioned first (g3 by default) into a cached partition set; given a
partition set directory, that set is used. Without torchrun the command starts ``--workers`` local
processes itself; under torchrun (``torchrun --nnodes ... -m commgraph train ...``) each process
joins torchrun's world instead, so several machines need nothing else.
"""

from __future__ import annotations

import argparse
import tempfile
from functools import partial
from pathlib import Path

from commgraph.cli import command_here, describe
from commgraph.cli.args import add_format, wrote
from commgraph.cli.graph_args import add_graph_arguments, graph_from_args
from commgraph.errors import TrainingError
from commgraph.graph import HeteroGraph
from commgraph.launch import JobSpec, LaunchOptions, launch, received
from commgraph.nn.options import HETERO_MODELS
from commgraph.partition import PartitionSet, is_partition_set, load_partition_set
from commgraph.partition.store import Part
from commgraph.plan.memory import MemoryEstimate, estimate_memory
from commgraph.render.units import count
from commgraph.runtime.options import in_torchrun
from commgraph.sample.options import format_fanouts, relation_fanouts
from commgraph.train.config import TrainConfig
from commgraph.train.shape import job_shape, predicts_step_time, step_time


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train", help="train a GNN across workers, full-graph or on sampled mini-batches", description=describe(__doc__)
    )
    add_graph_arguments(parser)
    LaunchOptions.add_arguments(parser.add_argument_group("workers"))
    TrainConfig.add_arguments(parser)
    add_format(parser)
    parser.add_argument(
        "--link-edges",
        metavar="FILE",
        help="with --task link: the held-out edges, a file the launcher hands its workers",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    launcher, config = _options(args)
    if config.task.task == "link":
        return _run_link(args, launcher, config)
    if args.link_edges is not None:
        raise TrainingError("--link-edges is --task link's")
    replicate = config.comm.exchange == "replicate"  # nothing is exchanged per layer: no plan to choose
    spec = JobSpec(
        "train",
        args.graph,
        partial(graph_from_args, args, hetero=True),
        launcher,
        config.job,
        row_bytes=None if replicate else 4 * config.gnn.hidden,
        resolve=partial(_resolved_data, config),
        allreduce=config.comm.allreduce,
        check=partial(check_trainable, config.gnn.model),
        prepare=partial(_prepare, config),
        memory=partial(_memory, config),
        step_time=partial(step_time, config, threads=launcher.threads) if predicts_step_time(config) else None,
        memory_budget=config.comm.memory_budget,
        output=args.output,
        debug=args.debug,
        entry=command_here if args.ends_process else None,
    )
    return launch(spec, partial(_train, config), describe=partial(_describe, config))


def _options(args: argparse.Namespace) -> tuple[LaunchOptions, TrainConfig]:
    """The launcher's options and the run's configuration: in a worker our launcher started, as it
    handed them over (resolved; nothing parsed); else from the flags, parsed once here, and resolved
    here for a job on this machine (under torchrun each rank's trainer resolves what needs the world)."""
    given = received()
    if given is not None:
        return given.launch, TrainConfig.from_dict(given.options, job=given.job)
    launcher = LaunchOptions.from_args(args)
    config = TrainConfig.from_args(args, progress=not launcher.quiet)
    return launcher, config if in_torchrun() else config.resolved(spans_machines=False)


def _resolved_data(config: TrainConfig, site) -> dict:
    """What the workers receive: ``config`` with its ``auto`` values decided for the job ``site``."""
    from commgraph.train.resolve import resolved_data

    return resolved_data(config, site)


def _run_link(args: argparse.Namespace, launcher: LaunchOptions, config: TrainConfig) -> int:
    """``--task link``: the launcher partitions the training graph (the held-out edges removed and
    written to a file the workers get), and each worker runs :mod:`commgraph.pyg.link_training`."""
    from commgraph.pyg.link_training import check_link_trainable, resolved_link_data, training_graph

    if launcher.dry_run:
        raise TrainingError("--dry-run estimates node classification's memory; --task link has no estimate")
    given = Path(args.link_edges) if args.link_edges else None
    if given is None and is_partition_set(args.graph):
        raise TrainingError(
            f"{args.graph} is a partition set, which holds no held-out edges: --task link splits a graph's "
            "edges before partitioning it, so give the graph (e.g. cora) instead"
        )
    with tempfile.TemporaryDirectory(prefix="commgraph-link-") as scratch:
        held_out = given or Path(scratch) / "held-out.npz"
        spec = JobSpec(
            "train",
            args.graph,
            partial(training_graph, partial(graph_from_args, args), config, held_out),
            launcher,
            config.job,
            resolve=partial(resolved_link_data, config),
            extra_argv=["--link-edges", str(held_out)],
            allreduce=config.comm.allreduce,
            check=check_link_trainable,
            debug=args.debug,
            entry=command_here if args.ends_process else None,
        )
        return launch(spec, partial(_train_link, config, held_out), describe=partial(_describe, config))


def _train_link(config: TrainConfig, held_out: Path, world, partition_dir: Path) -> None:
    from commgraph.pyg.link_training import done_line, train_link_worker

    history = train_link_worker(world, partition_dir, config, held_out)
    if world.is_leader and history:
        print(done_line(history), flush=True)
        if config.log.metrics_out is not None and Path(config.log.metrics_out).exists():
            wrote(config.log.metrics_out)


def _memory(config: TrainConfig, pset: PartitionSet, workers: int) -> MemoryEstimate:
    """What this training run will hold (every worker on this machine)."""
    return estimate_memory(pset, job_shape(config, pset, workers))


def _prepare(config: TrainConfig, pset: PartitionSet) -> None:
    """Every worker would find the same missing or mismatched checkpoint or mask file, or relations
    ``--fanout`` misses or the set lacks: say it once, here, before any worker starts (torch is
    imported only where a file is to be read: a plain dry run stays without it)."""
    typed = pset.manifest.get("typed")
    if typed is not None and config.sampling.sampler is not None:  # --fanout per relation names the set's
        relation_fanouts(config.sampling.fanouts, [tuple(r) for r in typed["relations"]])
    if config.sampling.dgs_masks is not None:
        from commgraph.sample.maskfile import load_masks

        load_masks(config.sampling.dgs_masks, pset, pset.part(0).features.shape[1])
    if config.log.resume:
        from commgraph.train import checkpoint

        checkpoint.load(
            Path(config.log.checkpoint_dir),
            checkpoint.identity(pset.manifest["graph"]["checksum"], pset.num_parts, config),
        )


def _describe(config: TrainConfig, partition_dir: Path, workers: int) -> str:
    if config.task.task == "link":
        return f"training {config.gnn.model} for link prediction on {partition_dir} with {workers} worker(s)"
    if config.gnn.model in HETERO_MODELS:
        how = (
            "exchange layer-wise"
            if config.sampling.sampler is None
            else f"sampler {config.sampling.sampler} (fanouts {format_fanouts(config.sampling.fanouts)}), input "
            "rows from their owners, evaluated by the full-graph pass (exchange layer-wise)"
        )
        return f"training {config.gnn.model} on {partition_dir} with {workers} worker(s), {how}"
    sampling = config.sampling.sampler
    how = (
        f"exchange {config.comm.exchange}"
        if sampling is None
        else f"sampler {sampling}, evaluated by the full-graph pass (exchange {config.comm.exchange})"
    )
    return f"training {config.gnn.model} on {partition_dir} with {workers} worker(s), {how}"


def _train(config: TrainConfig, world, partition_dir: Path) -> None:
    from commgraph.train import train_worker

    result = train_worker(world, partition_dir, config)
    if world.is_leader and result.history:
        last, best = result.history[-1], result.best
        test = "-" if last["test_acc"] is None else f"{last['test_acc']:.4f}"
        print(
            f"done: {count(last['epoch'], 'epoch')}, loss {last['loss']:.4f}, test accuracy {test}"
            + (
                f"; best validation accuracy {best['val_acc']:.4f} at epoch {best['epoch']} "
                f"(test {best['test_acc']:.4f})"
                if best
                else ""
            ),
            flush=True,
        )
        log = config.log
        for path in (
            log.metrics_out,
            log.predictions_out,
            config.sampling.dgs_masks_out,
            log.checkpoint_dir,
            log.tensorboard,
        ):
            if path is not None and Path(path).exists():
                wrote(path)


def check_trainable(model: str, name: str, data) -> None:
    """Refuse a graph (or partition set) that node classification with ``model`` cannot train on:
    R-GCN takes a heterogeneous graph (or its typed set) with labels on its target type, the other
    models a graph of one node type with features and labels."""
    typed = _typed_manifest(name) if isinstance(data, Part) else None
    hetero = isinstance(data, HeteroGraph) or typed is not None
    if hetero != (model in HETERO_MODELS):
        raise TrainingError(
            f"{name} is a heterogeneous graph: train it with --model rgcn or hgt (or through the PyG bridge, "
            "docs/heterogeneous.md)"
            if hetero
            else f"--model {model} trains a heterogeneous graph (mag-shaped:scale=F, or its typed partition set) "
            f"and {name} has one node type: use --model sage, gcn, gat, gin or commnet"
        )
    if hetero:
        target = data.target if isinstance(data, HeteroGraph) else typed["target"]
        if target is None or data.labels is None:
            raise TrainingError(
                f"{name} has no labelled target node type to classify: --model {model} needs labels on one node "
                "type, e.g. mag-shaped:scale=0.01 (papers)"
            )
        return
    missing = [
        what
        for what, value in (("features", data.features), ("labels", data.labels), ("train mask", data.train_mask))
        if value is None
    ]
    if missing:
        raise TrainingError(
            f"{name} has no node {', '.join(missing)} to train on: use a dataset that has them "
            "(cora, an OGB or Planetoid folder, an .npz with them) or a synthetic graph that "
            "makes them, e.g. rmat:nodes=100000,edges=1000000,features=64,classes=8 or "
            "sbm:nodes=100000,classes=8,features=64"
        )


def _typed_manifest(path: str) -> dict | None:
    """The ``typed`` record of the partition set at ``path`` (None: an untyped set)."""
    return load_partition_set(path, verify=False).manifest.get("typed")
