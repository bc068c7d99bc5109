"""The checks of a :class:`~commgraph.train.config.TrainConfig` that look across its sections:
which options a model, a task or a budget can use together, each refused in one line naming the
parameters (the CLI spells them as flags)."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

from commgraph.errors import SamplingError, TrainingError
from commgraph.nn.options import HETERO_MODELS, LINEAR_FIRST
from commgraph.sample.options import check_fanouts

if TYPE_CHECKING:
    from commgraph.train.config import TrainConfig

LINK_MODELS = ("gcn", "sage", "gat", "gin")
# node classification's options that link prediction (commgraph.pyg.link_training) has no use for: section -> fields
NODE_ONLY = {
    "sampling": ("sampler",),
    "comm": ("exchange", "features", "bin_size", "first_layer"),
    "job": ("speeds", "placement", "ordering"),
    "log": ("predictions_out", "checkpoint_dir", "resume", "tensorboard"),
}


def sampled_evaluation(config: TrainConfig) -> bool:
    """Whether validation and test accuracies come from sampled inference
    (:mod:`commgraph.train.sampled_eval`): sampled training under ``memory_budget`` with a
    homogeneous model whose fetch reads whole feature rows (not DGS, whose remote rows cross cut to
    its columns, nor the owner-computed first layer); elsewhere the full-graph pass evaluates."""
    return not (
        config.comm.memory_budget is None
        or config.sampling.sampler in (None, "dgs")
        or config.gnn.model in HETERO_MODELS
        or config.comm.first_layer == "owner"
    )


def check_eval_fanout(config: TrainConfig) -> None:
    """``eval_fanouts`` sets the sampled evaluation's fanouts: one per layer, for a run that
    evaluates by sampling (:func:`sampled_evaluation`)."""
    try:
        check_fanouts(config.sampling.eval_fanouts, config.gnn.layers, "eval_fanouts")
    except SamplingError as exc:
        raise TrainingError(str(exc), parameters=exc.parameters) from None
    if not sampled_evaluation(config):
        raise TrainingError(
            "eval_fanouts sets the sampled evaluation's fanouts, which runs under memory_budget "
            "(a homogeneous model, not sampler dgs nor first_layer owner): add memory_budget "
            "or drop eval_fanouts",
            parameters=("eval_fanouts", "memory_budget", "sampler", "first_layer"),
        )


def check_owner_first_layer(config: TrainConfig) -> None:
    """``--first-layer owner`` is exact only where layer 0 transforms each source row before
    aggregating, and needs a per-step exchange to replace."""
    model = config.gnn.model
    if model not in LINEAR_FIRST:
        raise TrainingError(
            f"first_layer owner needs a first layer that is linear before aggregation "
            f"({', '.join(LINEAR_FIRST)}); model {model}'s is not, so its owner cannot compute "
            f"it: use first_layer features",
            parameters=("first_layer", "model"),
        )
    if config.sampling.sampler is None and config.comm.exchange == "replicate":
        raise TrainingError(
            "first_layer owner replaces the halo rows of layer 0, and exchange replicate "
            "has none: use exchange pipelined or barrier",
            parameters=("first_layer", "exchange"),
        )


def check_hetero_model(config: TrainConfig) -> None:
    """``--model rgcn`` trains full-graph with the layer-wise exchange, or sampled with ``--sampler
    neighbor`` on the whole graph's relations: refuse what it does not do."""
    sampling = config.sampling
    refused = [
        (config.task.task == "link", "task", " link"),
        (sampling.sampler not in (None, "neighbor"), "sampler", f" {sampling.sampler}"),
        (sampling.structure == "partitioned", "structure", " partitioned"),
        (config.comm.exchange == "replicate", "exchange", " replicate"),
        (config.comm.first_layer == "owner", "first_layer", " owner"),
        (config.log.checkpoint_dir is not None, "checkpoint_dir", ""),
    ]
    what = next(((name, value) for bad, name, value in refused if bad), None)
    if what is not None:
        raise TrainingError(
            "model rgcn trains full-graph, exchanging layer-wise, or sampled with sampler neighbor on the "
            f"whole graph's relations, without checkpoints: drop {''.join(what)}",
            parameters=("model", "sampler", what[0]),
        )


def check_link_task(config: TrainConfig) -> None:
    """``--task link`` trains PyG's own convs full-graph through ``commgraph.pyg``: refuse a model it
    does not build and node classification's options it does not use."""
    if config.gnn.model not in LINK_MODELS:
        raise TrainingError(
            f"task link builds PyG's {', '.join(LINK_MODELS)}; model {config.gnn.model} is not one",
            parameters=("task", "model"),
        )
    for section, names in NODE_ONLY.items():
        options = getattr(config, section)
        for f in fields(options):
            if f.name in names and getattr(options, f.name) != f.default:
                raise TrainingError(
                    f"{f.name} is node classification's; task link trains full-graph "
                    "through commgraph.pyg and has no use for it",
                    parameters=(f.name, "task"),
                )
