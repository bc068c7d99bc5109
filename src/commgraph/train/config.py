"""``TrainConfig``: every training option once, with its flag, help and check.

The CLI's flags (:func:`add_arguments`), the configuration built from them (:func:`from_args`)
and the argv handed to each worker (:meth:`TrainConfig.to_argv`) all come from the fields below,
and the options are validated once, when a ``TrainConfig`` is made.
"""

from __future__ import annotations

import argparse
import importlib.util
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from commgraph.errors import SamplingError, TrainingError
from commgraph.nn import MODELS, check_model_options
from commgraph.plan.allreduce import CHOICES as ALLREDUCE_CHOICES
from commgraph.plan.choose import PLAN_CHOICES
from commgraph.plan.features import MODES as FEATURE_MODES
from commgraph.runtime.exchange import ORDERINGS
from commgraph.sample import SAMPLERS, parse_fanouts
from commgraph.sample.dgs import EPSILON, FEATURE_RATE
from commgraph.sample.explain import ExplainerOptions
from commgraph.train.executor import EXCHANGES

BATCH_SIZE, FANOUT, LAYER_SIZE = 1024, 10, 512
# the samplers each sampler option applies to (batch size: every one)
SAMPLER_OPTIONS = {"fanout": ("neighbor", "dgs"), "layer_size": ("fastgcn", "ladies"),
                   "clusters": ("cluster",), "clusters_per_batch": ("cluster",), "feature_rate": ("dgs",),
                   "epsilon": ("dgs",), "explain_period": ("dgs",), "explain_epochs": ("dgs",),
                   "explain_loss_threshold": ("dgs",), "batch_size": SAMPLERS}


def option(help: str, *, type=None, choices=None, metavar=None, cli: bool = True, **default) -> field:
    """A field with its command-line flag (``--name-with-dashes``)."""
    return field(**default, metadata={"help": help, "type": type, "choices": choices, "metavar": metavar,
                                      "cli": cli})


@dataclass
class TrainConfig:
    model: str = option("GNN model", choices=MODELS, default="sage")
    epochs: int = option("epochs to train", type=int, default=200)
    layers: int = option("GNN layers", type=int, default=2)
    hidden: int = option("hidden width", type=int, default=16)
    heads: int = option("attention heads of GAT's hidden layers", type=int, default=4)
    dropout: float = option("dropout probability", type=float, default=0.5)
    lr: float = option("Adam's learning rate", type=float, default=0.01)
    weight_decay: float = option("Adam's weight decay", type=float, default=5e-4)
    seed: int = option("seed of the weights, dropout and partitioning", type=int, default=0)
    exchange: str = option("pipelined (G3 bins), barrier (layer-wise) or replicate (L-hop halo)",
                           choices=EXCHANGES, default="pipelined")
    features: str = option("where the input features live on a GPU: gpu (GPU memory), host (pinned host memory "
                           "that GPU threads read directly, zero-copy) or auto (the GPU when the table fits in half "
                           "its free memory, else the host); on a CPU device they are host memory whatever is asked",
                           choices=FEATURE_MODES, default="auto")
    bin_size: int | None = option("rows per bin (default: half the free memory's worth)", type=int, default=None)
    topology: str = option("detect (this machine: its GPUs, else one CPU worker per rank), a preset such as "
                           "dgx1-v100, or a topology YAML (e.g. from `commgraph topo calibrate`)",
                           metavar="detect|PRESET|FILE.yaml", default="detect")
    plan: str = option("the halo exchange's all-gather plan: auto (the one the simulator prices fastest), a "
                       "planner, or a plan file from `commgraph plan`",
                       metavar="|".join(PLAN_CHOICES) + "|FILE.json", default="auto")
    placement: str | None = option("the topology device of each worker, comma-separated (default: its worker "
                                   "devices in order)", metavar="DEV,DEV,...", default=None)
    allreduce: str = option("gradient all-reduce: native (torch's), a planned schedule run with point-to-point "
                            "messages, or auto (the fastest by the simulator's price)",
                            choices=ALLREDUCE_CHOICES, default="auto")
    ordering: str = option("how messages are matched: tagged (any order; Gloo), ordered (in plan order, as "
                           "NCCL needs), or auto (ordered on NCCL, else tagged)",
                           choices=("auto", *ORDERINGS), default="auto")
    sampler: str | None = option("train on mini-batches drawn by this sampler, each worker from its own training "
                                 "nodes (default: full-graph training)", choices=SAMPLERS, default=None)
    fanout: str | None = option(f"neighbours drawn per node at each hop, the seeds' hop first; -1 takes all "
                                f"(neighbor, dgs; default {FANOUT} per layer)", metavar="K,K,...", default=None)
    batch_size: int | None = option(f"seed nodes per batch on the worker with the most training nodes; the others "
                                    f"split theirs into as many batches (default {BATCH_SIZE})", type=int,
                                    default=None)
    layer_size: int | None = option(f"nodes drawn per layer (fastgcn, ladies; default {LAYER_SIZE})", type=int,
                                    default=None)
    clusters: int | None = option("METIS clusters of each worker's nodes (cluster; default: its nodes / "
                                  "--batch-size)", type=int, default=None)
    clusters_per_batch: int | None = option("clusters joined into one batch (cluster; default 1)", type=int,
                                            default=None)
    feature_rate: float | None = option(f"DGS's N_f: the share of feature columns remote nodes send (dgs; default "
                                        f"{FEATURE_RATE})", type=float, default=None)
    epsilon: float | None = option(f"DGS's epsilon: draws moved from remote to local neighbours, a share of the "
                                   f"fanout (dgs; default {EPSILON})", type=float, default=None)
    explain_period: int | None = option(f"DGS's T_ex: explain every N iterations (dgs; default "
                                        f"{ExplainerOptions.period})", type=int, metavar="N", default=None)
    explain_epochs: int | None = option(f"GNNExplainer epochs per explanation (dgs; default "
                                        f"{ExplainerOptions.epochs})", type=int, default=None)
    explain_loss_threshold: float | None = option(f"stop explaining at this loss (dgs; default "
                                                  f"{ExplainerOptions.loss_threshold})", type=float, default=None)
    eval_every: int = option("accuracies every N epochs and after the last; the others log null", type=int,
                             metavar="N", default=1)
    metrics_out: str | None = option("one JSON line per epoch", metavar="FILE", default=None)
    tensorboard: str | None = option("TensorBoard event files here: loss, accuracies, epoch and waiting seconds, "
                                     "bytes (needs the tensorboard package)", metavar="DIR", default=None)
    checkpoint_dir: str | None = option("checkpoint after every epoch", metavar="DIR", default=None)
    predictions_out: str | None = option("the last epoch's predicted class of every node (.npy or .csv)",
                                         metavar="FILE", default=None)
    resume: bool = option("continue from --checkpoint-dir's checkpoint", type=bool, default=False)
    progress: bool = option("progress bar and epoch lines", cli=False, default=True)

    def __post_init__(self) -> None:
        for f in fields(self):
            choices = f.metadata["choices"]
            if choices and getattr(self, f.name) is not None and getattr(self, f.name) not in choices:
                raise TrainingError(f"unknown --{_flag(f.name)} {getattr(self, f.name)!r}; choose one of "
                                    f"{', '.join(choices)}")
        if self.epochs < 1:
            raise TrainingError("--epochs must be >= 1")
        check_model_options(self.layers, self.hidden, self.heads, self.dropout)
        if not self.lr > 0 or self.weight_decay < 0:
            raise TrainingError(f"need --lr > 0 and --weight-decay >= 0, got {self.lr} and {self.weight_decay}")
        if self.bin_size is not None and self.bin_size < 1:
            raise TrainingError("--bin-size must be >= 1")
        if self.eval_every < 1:
            raise TrainingError("--eval-every must be >= 1")
        if self.tensorboard is not None and importlib.util.find_spec("tensorboard") is None:
            raise TrainingError("--tensorboard needs the tensorboard package: pip install 'commgraph[tensorboard]'")
        if self.resume and not self.checkpoint_dir:
            raise TrainingError("--resume needs --checkpoint-dir")
        if self.predictions_out is not None:
            from commgraph.train.predict import check_predictions_path

            check_predictions_path(Path(self.predictions_out))
        self._check_sampling()
        if self.plan not in PLAN_CHOICES and Path(self.plan).suffix not in (".json", ".npz"):
            raise TrainingError(f"--plan {self.plan!r}: choose one of {', '.join(PLAN_CHOICES)} or a plan file "
                                "(.json or .npz) written by `commgraph plan`")

    def _check_sampling(self) -> None:
        for name, samplers in SAMPLER_OPTIONS.items():
            if getattr(self, name) is not None and self.sampler not in samplers:
                users = "--sampler " + "|".join(samplers)
                raise TrainingError(f"--{_flag(name)} is a sampler option for {users}; "
                                    + ("this is full-graph training" if self.sampler is None
                                       else f"--sampler {self.sampler} does not use it"))
        if self.sampler is None:
            return
        if self.batch_size is not None and self.batch_size < 1:
            raise TrainingError(f"--batch-size must be >= 1; got {self.batch_size}")
        if self.fanout is not None:
            parse_fanouts(self.fanout, self.layers)
        if self.layer_size is not None and self.layer_size < 1:
            raise TrainingError(f"--layer-size must be >= 1; got {self.layer_size}")
        for name in ("clusters", "clusters_per_batch"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise TrainingError(f"--{_flag(name)} must be >= 1; got {getattr(self, name)}")
        if self.clusters is not None and self.clusters_per_batch is not None and self.clusters_per_batch > self.clusters:
            raise TrainingError(f"--clusters-per-batch ({self.clusters_per_batch}) exceeds --clusters ({self.clusters})")
        if self.feature_rate is not None and not 0 < self.feature_rate <= 1:
            raise TrainingError(f"--feature-rate (N_f) must lie in (0, 1]; got {self.feature_rate}")
        if self.epsilon is not None and not 0 <= self.epsilon <= 1:
            raise TrainingError(f"--epsilon must lie in [0, 1]; got {self.epsilon}")
        self.explainer_options()

    @property
    def fanouts(self) -> list[int]:
        """The sampler's fanout per hop (the default where not given)."""
        return parse_fanouts(self.fanout, self.layers) if self.fanout else [FANOUT] * self.layers

    def explainer_options(self) -> ExplainerOptions:
        """DGS's explainer options, the thesis's defaults where not given (checked when made)."""
        given = {"period": self.explain_period, "epochs": self.explain_epochs,
                 "loss_threshold": self.explain_loss_threshold}
        try:
            return ExplainerOptions(**{k: v for k, v in given.items() if v is not None})
        except SamplingError as exc:
            raise TrainingError(str(exc)) from None

    def to_argv(self) -> list[str]:
        """The flags that give this configuration (defaults left out)."""
        argv = []
        for f in fields(self):
            value = getattr(self, f.name)
            if not f.metadata["cli"] or value == f.default:
                continue
            argv += [f"--{_flag(f.name)}"] if f.metadata["type"] is bool else [f"--{_flag(f.name)}", str(value)]
        return argv


def _flag(name: str) -> str:
    return name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for f in fields(TrainConfig):
        if not f.metadata["cli"]:
            continue
        meta = f.metadata
        default = None if f.default is MISSING else f.default
        shown = "" if default is None or default is False else f" (default {default})"
        if meta["type"] is bool:
            parser.add_argument(f"--{_flag(f.name)}", action="store_true", help=meta["help"])
            continue
        parser.add_argument(f"--{_flag(f.name)}", type=meta["type"] or str, choices=meta["choices"],
                            metavar=meta["metavar"], default=default, help=meta["help"] + shown)


def from_args(args: argparse.Namespace, **overrides) -> TrainConfig:
    values = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if f.metadata["cli"]}
    values = {k: str(v) if isinstance(v, Path) else v for k, v in values.items()}
    return TrainConfig(**{**values, **overrides})
