"""``TrainConfig``: every training option once, with its flag, help, default and check, in
sections: the model (:class:`ModelOptions`), the optimiser (:class:`OptimOptions`), communication
(:class:`CommOptions`, and the job's topology and plans: :class:`~commgraph.runtime.job.JobOptions`),
sampling (:class:`SamplingOptions`) and logging (:class:`LogOptions`).

The CLI's flags (:meth:`TrainConfig.add_arguments`, one help group per section) and the
configuration built from them (:meth:`TrainConfig.from_args`, each flag's text parsed there, once:
``--fanout 10,5`` is ``fanouts == (10, 5)``) come from the fields below (see
:mod:`commgraph.options`), and the options are validated once, when a ``TrainConfig`` is made.
What is left to the job is resolved once, on the launcher (:meth:`TrainConfig.resolved`, and
every ``auto``: :mod:`commgraph.train.resolve`), and the workers receive that configuration as
data (:meth:`TrainConfig.to_dict`, through the job's store), not as flags to parse again. The plan's view of a run is
:mod:`commgraph.train.shape`.
"""

from __future__ import annotations

import argparse
import importlib.util
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from commgraph.atomic import FORCE_HELP, check_output
from commgraph.errors import SamplingError, TrainingError
from commgraph.nn.options import HETERO_MODELS, LINEAR_FIRST, TRAIN_MODELS, check_model_options
from commgraph.options import Options, option
from commgraph.plan.allreduce import CHOICES as ALLREDUCE_CHOICES
from commgraph.plan.features import MODES as FEATURE_MODES
from commgraph.plan.first_layer import FIRST_LAYERS
from commgraph.runtime.options import JobOptions, in_torchrun
from commgraph.sample.options import check_fanouts
from commgraph.sizes import check_count
from commgraph.train.sampling_options import FANOUT, SAMPLER_OPTIONS, SamplingOptions
from commgraph.units import size

EXCHANGES = ("pipelined", "barrier", "replicate")  # how a full-graph layer exchanges rows (train.executor)
# DGS's options that R-GCN's draws do not read: its explainer's and masks' (no explainer explains
# R-GCN) and the feature rate (its input rows cross hidden wide, computed by their owners)
EXPLAINER_OPTIONS = (
    "feature_rate",
    "dgs_masks",
    "dgs_masks_out",
    "dgs_wait",
    "explain_cpu",
    "explain_in",
    "explain_period",
    "explain_epochs",
    "explain_loss_threshold",
)


@dataclass
class ModelOptions(Options):
    """The GNN: its kind and shape."""

    error = TrainingError
    model: str = option(
        "GNN model (rgcn: R-GCN, hgt: the heterogeneous graph transformer, full-graph; both for a "
        "heterogeneous graph or a typed partition set)",
        choices=TRAIN_MODELS,
        default="sage",
    )
    layers: int = option("GNN layers", type=int, default=2)
    hidden: int = option("hidden width", type=int, default=16)
    heads: int = option("attention heads of GAT's hidden layers and of HGT's layers", type=int, default=4)
    dropout: float = option("dropout probability", type=float, default=0.5)
    bases: int | None = option(
        "rgcn: basis matrices each layer's relation weights combine (default: a weight per relation)",
        type=int,
        default=None,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_model_options(self.layers, self.hidden, self.heads, self.dropout)
        if self.bases is not None and (self.model != "rgcn" or self.bases < 1):
            self.refuse(
                f"bases is rgcn's and must be >= 1, got bases {self.bases} model {self.model}", "bases", "model"
            )


@dataclass
class OptimOptions(Options):
    """Adam, the epochs and the seed."""

    error = TrainingError
    epochs: int = option("epochs to train", type=int, default=200)
    lr: float = option("Adam's learning rate", type=float, default=0.01)
    weight_decay: float = option("Adam's weight decay", type=float, default=5e-4)
    seed: int = option(
        "seed of the weights, dropout and sampling (the partition's is --partition-seed)", type=int, default=0
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.epochs < 1:
            self.refuse("epochs must be >= 1", "epochs")
        check_count("--epochs", self.epochs, TrainingError)
        if not self.lr > 0 or self.weight_decay < 0:
            self.refuse(
                f"need lr > 0 and weight_decay >= 0, got {self.lr} and {self.weight_decay}", "lr", "weight_decay"
            )


@dataclass
class CommOptions(Options):
    """How the workers exchange embeddings, features and gradients (the plans and the topology
    they are made for are the job's: :class:`~commgraph.runtime.job.JobOptions`)."""

    error = TrainingError
    exchange: str = option(
        "pipelined (G3 bins), barrier (layer-wise) or replicate (L-hop halo)", choices=EXCHANGES, default="pipelined"
    )
    features: str = option(
        "where the input features live on a GPU: gpu (GPU memory), host (pinned host memory "
        "that GPU threads read directly, zero-copy) or auto (decided once, before the workers start: "
        "the GPU when the largest part's table fits in half the least free GPU memory, else the host); "
        "on a CPU device they are host memory whatever is asked",
        choices=FEATURE_MODES,
        default="auto",
    )
    bin_size: int | None = option("rows per bin (default: half the free memory's worth)", type=int, default=None)
    allreduce: str = option(
        "gradient all-reduce: native (torch's), a planned schedule run with point-to-point "
        "messages, or auto (the fastest by the simulator's price)",
        choices=ALLREDUCE_CHOICES,
        default="auto",
    )
    first_layer: str = option(
        "a remote input row crosses as its features (features), or as the first layer's "
        "transform of it computed by its owner, hidden wide, with the gradient rows coming "
        "back (owner, P3's idea; gcn and sage only, whose first layer is linear before "
        "aggregation); auto: the owner's in a full-graph pass where that moves fewer bytes "
        "than the halo's features (it also keeps no halo feature table), features otherwise",
        choices=FIRST_LAYERS,
        default="auto",
    )
    evaluation_first_layer: str | None = option(
        "sampled training's full-graph evaluation pass: its first layer (features or owner), as the "
        "launcher decided it for first_layer auto, whose steps ship features (None: as first_layer asks)",
        cli=False,
        default=None,
    )
    memory_budget: int | None = option(
        "bytes the whole job may hold on this machine, page cache included (K/M/G suffixes: 8G, 512M): sampled "
        "training reads its features from the partition set's files through a cache of the hottest "
        "rows sized to fit, and the job runs in a memory cgroup where the machine allows one "
        "(docs/out-of-core.md)",
        type=size,
        metavar="SIZE",
        default=None,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.bin_size is not None and self.bin_size < 1:
            self.refuse("bin_size must be >= 1", "bin_size")
        if self.memory_budget is not None and self.memory_budget < 1:
            self.refuse("memory_budget must be a size > 0, such as 8G", "memory_budget")
        if self.evaluation_first_layer not in (None, "features", "owner"):
            self.refuse(
                f"evaluation_first_layer is features or owner, got {self.evaluation_first_layer!r}",
                "evaluation_first_layer",
            )


@dataclass
class LogOptions(Options):
    """What a run reports and keeps: evaluation, metrics, checkpoints, predictions."""

    error = TrainingError
    eval_every: int = option(
        "accuracies every N epochs and after the last; the others log null", type=int, metavar="N", default=1
    )
    metrics_out: str | None = option("one JSON line per epoch", metavar="FILE", default=None)
    tensorboard: str | None = option(
        "TensorBoard event files here: loss, accuracies, epoch and waiting seconds, "
        "bytes (needs the tensorboard package)",
        metavar="DIR",
        default=None,
    )
    checkpoint_dir: str | None = option("checkpoint after every epoch", metavar="DIR", default=None)
    predictions_out: str | None = option(
        "the last epoch's predicted class of every node (.npy or .csv)", metavar="FILE", default=None
    )
    resume: bool = option("continue from --checkpoint-dir's checkpoint", type=bool, default=False)
    cost_model: str | None = option(
        "a calibrated topology YAML (commgraph topo calibrate --out) whose compute cost model prices the "
        "predicted step time (default: --topology's calibration, else documented defaults)",
        metavar="FILE.yaml",
        default=None,
    )
    force: bool = option(FORCE_HELP, type=bool, default=False)
    progress: bool = option("progress bar and epoch lines", cli=False, default=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.eval_every < 1:
            self.refuse("eval_every must be >= 1", "eval_every")
        if self.tensorboard is not None and importlib.util.find_spec("tensorboard") is None:
            self.refuse(
                "tensorboard needs the TensorBoard package: pip install 'commgraph[tensorboard]'", "tensorboard"
            )
        if self.resume and not self.checkpoint_dir:
            self.refuse("resume needs checkpoint_dir", "resume", "checkpoint_dir")
        if self.predictions_out is not None:
            from commgraph.train.predict import check_predictions_path

            check_predictions_path(Path(self.predictions_out))


TASKS = ("node", "link")


@dataclass
class TaskOptions(Options):
    """What is learnt: node classes, or links (the graph's edges split before partitioning)."""

    error = TrainingError
    task: str = option(
        "node (classify nodes) or link (predict edges: the graph's edges are split into "
        "training, validation and test edges before it is partitioned, and the model, PyG's own "
        "convs trained through commgraph.pyg, scores pairs by the inner product of their embeddings)",
        choices=TASKS,
        default="node",
    )
    val_edges: float = option(
        "the share of the undirected edges held out for validation (--task link)", type=float, default=0.05
    )
    test_edges: float = option(
        "the share of the undirected edges held out for testing (--task link)", type=float, default=0.1
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task != "link":
            for name in ("val_edges", "test_edges"):
                if getattr(self, name) != next(f.default for f in fields(self) if f.name == name):
                    self.refuse(f"{name} splits edges for task link; this is task {self.task}", name, "task")
            return
        if not (0 <= self.val_edges < 1 and 0 <= self.test_edges < 1 and self.val_edges + self.test_edges < 1):
            self.refuse(
                f"val_edges and test_edges are shares of the edges, each in [0, 1) and summing "
                f"below 1; got {self.val_edges} and {self.test_edges}",
                "val_edges",
                "test_edges",
            )


# the sections of a TrainConfig: attribute -> (options class, --help group title)
SECTIONS = {
    "task": (TaskOptions, "task"),
    "gnn": (ModelOptions, "model"),
    "optim": (OptimOptions, "optimiser"),
    "comm": (CommOptions, "communication"),
    "job": (JobOptions, "topology and plans"),
    "sampling": (SamplingOptions, "sampling (mini-batch training)"),
    "log": (LogOptions, "logging and checkpoints"),
}


@dataclass
class TrainConfig:
    """A training run's options, by section (see the module docstring). ``TrainConfig.build``
    makes one from flat options (``TrainConfig.build(model="gat", hidden=32)``)."""

    task: TaskOptions = field(default_factory=TaskOptions)
    gnn: ModelOptions = field(default_factory=ModelOptions)
    optim: OptimOptions = field(default_factory=OptimOptions)
    comm: CommOptions = field(default_factory=CommOptions)
    job: JobOptions = field(default_factory=JobOptions)
    sampling: SamplingOptions = field(default_factory=SamplingOptions)
    log: LogOptions = field(default_factory=LogOptions)

    def __post_init__(self) -> None:
        sampling, layers = self.sampling, self.gnn.layers
        if sampling.fanouts is not None:
            check_fanouts(sampling.fanouts, layers)
            if isinstance(sampling.fanouts, dict) and self.gnn.model not in HETERO_MODELS:
                raise SamplingError(
                    f"fanouts per relation are for a heterogeneous graph's model rgcn; model {self.gnn.model} "
                    "draws over one relation: give one list, such as 10,5",
                    parameters=("fanouts", "model"),
                )
        elif sampling.sampler in SAMPLER_OPTIONS["fanouts"]:
            self.sampling = replace(sampling, fanouts=(FANOUT,) * layers)
        if self.sampling.eval_fanouts is not None:
            check_eval_fanout(self)
        if sampled_evaluation(self):
            fanouts = self.sampling.eval_fanouts or self.sampling.fanouts or (FANOUT,) * layers
            self.sampling = replace(self.sampling, eval_fanouts=fanouts)
        if self.task.task == "link":
            check_link_task(self)
        elif self.gnn.model in HETERO_MODELS:
            check_hetero_model(self)
        elif self.comm.first_layer == "owner":
            check_owner_first_layer(self)
        self.check_outputs()

    def check_outputs(self) -> None:
        """Refuse, before any work, an output that cannot be written or exists without ``--force``
        (``--resume`` continues its own files; a worker's were checked by its launcher)."""
        log = self.log
        force = None if in_torchrun() else log.force or log.resume
        for path, what, folder in (
            (log.predictions_out, "--predictions-out", False),
            (log.metrics_out, "--metrics-out", False),
            (self.sampling.dgs_masks_out, "--dgs-masks-out", False),
            (log.tensorboard, "--tensorboard", True),
            (log.checkpoint_dir, "--checkpoint-dir", True),
        ):
            check_output(path, what, force=force, folder=folder)

    def resolved(self, spans_machines: bool) -> TrainConfig:
        """This configuration with what it left to the job decided, once: the neighbor sampler's
        ``structure``, partitioned when the job ``spans_machines`` and replicated otherwise (R-GCN's
        replicated: it samples the whole graph's relations)."""
        if not self.unresolved:
            return self
        partitioned = spans_machines and self.gnn.model not in HETERO_MODELS
        return replace(self, sampling=replace(self.sampling, structure="partitioned" if partitioned else "replicated"))

    @property
    def unresolved(self) -> bool:
        """Whether :meth:`resolved` has something left to decide."""
        return self.sampling.sampler == "neighbor" and self.sampling.structure is None

    @classmethod
    def build(cls, **flat) -> TrainConfig:
        """A configuration from flat options, each by its field name; unknown names are refused."""
        sections = {}
        for attribute, (kind, _) in SECTIONS.items():
            names = {f.name for f in fields(kind)}
            sections[attribute] = kind(**{k: flat.pop(k) for k in list(flat) if k in names})
        if flat:
            raise TrainingError(f"unknown training option(s): {', '.join(sorted(flat))}")
        return cls(**sections)

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """Every section's flags, each section a group of ``--help``."""
        for kind, title in SECTIONS.values():
            kind.add_arguments(parser.add_argument_group(title))

    @classmethod
    def from_args(cls, args: argparse.Namespace, **overrides) -> TrainConfig:
        """The configuration the parsed flags ``args`` give, each flag's text parsed here (once)."""
        values = {}
        for kind, _ in SECTIONS.values():
            values.update(kind.values(args))
        return cls.build(**{**values, **overrides})

    def to_dict(self) -> dict:
        """The configuration as JSON-ready data, by section (:meth:`from_dict` makes it again)."""
        return {attribute: asdict(getattr(self, attribute)) for attribute in SECTIONS}

    @classmethod
    def from_dict(cls, data: dict, **given: Options) -> TrainConfig:
        """The configuration :meth:`to_dict` gave (checked again, nothing parsed), with the sections
        in ``given`` (the launcher's resolved ``job``) in place of those in ``data``."""
        return cls(
            **{name: given[name] if name in given else kind(**data[name]) for name, (kind, _) in SECTIONS.items()}
        )


LINK_MODELS = ("gcn", "sage", "gat", "gin")
# node classification's options that link prediction (commgraph.pyg.link_training) has no use for: section -> fields
# (the job's message ordering is not one: the launcher decides it for every job it starts)
NODE_ONLY = {
    "sampling": ("sampler",),
    "comm": ("exchange", "features", "bin_size", "first_layer"),
    "job": ("speeds", "placement"),
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
    neighbor`` or ``dgs`` (DGS's count rule, without its explainer) on the whole graph's relations:
    refuse what it does not do."""
    sampling = config.sampling
    if config.gnn.model == "hgt":
        check_hgt(config)
        return
    defaults = {f.name: f.default for f in fields(sampling)}
    refused = [
        (config.task.task == "link", "task", " link"),
        (sampling.sampler not in (None, "neighbor", "dgs"), "sampler", f" {sampling.sampler}"),
        (sampling.structure == "partitioned", "structure", " partitioned"),
        (config.comm.exchange == "replicate", "exchange", " replicate"),
        (config.comm.first_layer == "owner", "first_layer", " owner"),
        (config.log.checkpoint_dir is not None, "checkpoint_dir", ""),
        *((getattr(sampling, name) != defaults[name], name, "") for name in EXPLAINER_OPTIONS),
    ]
    what = next(((name, value) for bad, name, value in refused if bad), None)
    if what is not None:
        raise TrainingError(
            "model rgcn trains full-graph, exchanging layer-wise, or sampled with sampler neighbor or dgs "
            "(epsilon, dgs_rule; no explainer: its input rows cross hidden wide) on the whole graph's relations, "
            f"without checkpoints: drop {''.join(what)}",
            parameters=("model", "sampler", "epsilon", "dgs_rule", what[0]),
        )


def check_hgt(config: TrainConfig) -> None:
    """``--model hgt`` trains full-graph with the layer-wise exchange, its heads dividing the hidden
    width: refuse what it does not do."""
    gnn = config.gnn
    if gnn.hidden % gnn.heads:
        raise TrainingError(
            f"model hgt splits hidden {gnn.hidden} into heads {gnn.heads}: give heads that divide it",
            parameters=("model", "hidden", "heads"),
        )
    refused = [
        (config.task.task == "link", "task", " link"),
        (config.sampling.sampler is not None, "sampler", f" {config.sampling.sampler}"),
        (config.comm.exchange == "replicate", "exchange", " replicate"),
        (config.comm.first_layer == "owner", "first_layer", " owner"),
        (config.log.checkpoint_dir is not None, "checkpoint_dir", ""),
    ]
    what = next(((name, value) for bad, name, value in refused if bad), None)
    if what is not None:
        raise TrainingError(
            f"model hgt trains full-graph, exchanging layer-wise, without checkpoints: drop {''.join(what)}",
            parameters=("model", what[0]),
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
