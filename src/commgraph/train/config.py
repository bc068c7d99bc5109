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

from commgraph.errors import TrainingError
from commgraph.nn import MODELS, check_model_options
from commgraph.plan.allreduce import CHOICES as ALLREDUCE_CHOICES
from commgraph.plan.choose import PLAN_CHOICES
from commgraph.plan.features import MODES as FEATURE_MODES
from commgraph.runtime.exchange import ORDERINGS
from commgraph.train.executor import EXCHANGES


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
            if choices and getattr(self, f.name) not in choices:
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
        if self.plan not in PLAN_CHOICES and Path(self.plan).suffix not in (".json", ".npz"):
            raise TrainingError(f"--plan {self.plan!r}: choose one of {', '.join(PLAN_CHOICES)} or a plan file "
                                "(.json or .npz) written by `commgraph plan`")

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
