"""``TrainConfig``: every training option once, with its flag, help, default and check, in
sections: the model (:class:`ModelOptions`), the optimiser (:class:`OptimOptions`), communication
(:class:`CommOptions`, and the job's topology and plans: :class:`~commgraph.runtime.job.JobOptions`),
sampling (:class:`SamplingOptions`) and logging (:class:`LogOptions`).

The CLI's flags (:meth:`TrainConfig.add_arguments`, one help group per section) and the
configuration built from them (:meth:`TrainConfig.from_args`, each flag's text parsed there, once:
``--fanout 10,5`` is ``fanouts == (10, 5)``) come from the fields below (see
:mod:`commgraph.options`), and the options are validated once, when a ``TrainConfig`` is made.
What is left to the job is resolved once, on the launcher (:meth:`TrainConfig.resolved`), and the
workers receive that configuration as data (:meth:`TrainConfig.to_dict`, through the job's store),
not as flags to parse again. The plan's view of a run is :mod:`commgraph.train.shape`.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from commgraph.atomic import FORCE_HELP, check_output
from commgraph.errors import SamplingError, TrainingError
from commgraph.nn.options import HETERO_MODELS, TRAIN_MODELS, check_model_options
from commgraph.options import Options, option
from commgraph.plan.allreduce import CHOICES as ALLREDUCE_CHOICES
from commgraph.plan.features import MODES as FEATURE_MODES
from commgraph.plan.first_layer import FIRST_LAYERS
from commgraph.runtime.options import JobOptions, in_torchrun
from commgraph.sample.options import (
    EPSILON,
    EXPLAIN_IN,
    FEATURE_RATE,
    RULES,
    SAMPLERS,
    STRUCTURES,
    ExplainerOptions,
    check_fanouts,
    parse_eval_fanouts,
    parse_fanouts,
)
from commgraph.sizes import check_count
from commgraph.train import checks
from commgraph.units import size

BATCH_SIZE, FANOUT, LAYER_SIZE = 1024, 10, 512
EXCHANGES = ("pipelined", "barrier", "replicate")  # how a full-graph layer exchanges rows (train.executor)
PEER_ROWS = ("map", "network")
# the samplers each sampler option applies to (batch size: every one)
SAMPLER_OPTIONS = {
    "fanouts": ("neighbor", "dgs"),
    "layer_size": ("fastgcn", "ladies"),
    "clusters": ("cluster",),
    "clusters_per_batch": ("cluster",),
    "feature_rate": ("dgs",),
    "epsilon": ("dgs",),
    "dgs_rule": ("dgs",),
    "dgs_masks": ("dgs",),
    "dgs_masks_out": ("dgs",),
    "dgs_wait": ("dgs",),
    "explain_cpu": ("dgs",),
    "explain_in": ("dgs",),
    "explain_period": ("dgs",),
    "explain_epochs": ("dgs",),
    "explain_loss_threshold": ("dgs",),
    "batch_size": SAMPLERS,
    "eval_fanouts": tuple(name for name in SAMPLERS if name != "dgs"),
    "steps_per_epoch": SAMPLERS,
    "peer_rows": SAMPLERS,
    "structure": ("neighbor",),
}


@dataclass
class ModelOptions(Options):
    """The GNN: its kind and shape."""

    error = TrainingError
    model: str = option(
        "GNN model (rgcn: R-GCN, for a heterogeneous graph or a typed partition set)",
        choices=TRAIN_MODELS,
        default="sage",
    )
    layers: int = option("GNN layers", type=int, default=2)
    hidden: int = option("hidden width", type=int, default=16)
    heads: int = option("attention heads of GAT's hidden layers", type=int, default=4)
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
        "that GPU threads read directly, zero-copy) or auto (the GPU when the table fits in half "
        "its free memory, else the host); on a CPU device they are host memory whatever is asked",
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


@dataclass
class SamplingOptions(Options):
    """Mini-batch training: the sampler and its options (none: full-graph training). ``fanouts``
    of the neighbor and dgs samplers defaults to :data:`FANOUT` per layer (:class:`TrainConfig`
    fills it in), and ``structure`` None is resolved by :meth:`TrainConfig.resolved`."""

    error = TrainingError
    sampler: str | None = option(
        "train on mini-batches drawn by this sampler, each worker from its own training "
        "nodes (default: full-graph training)",
        choices=SAMPLERS,
        default=None,
    )
    fanouts: tuple[int, ...] | None = option(
        f"neighbours drawn per node at each hop, the seeds' hop first; -1 takes all "
        f"(neighbor, dgs; default {FANOUT} per layer)",
        metavar="K,K,...",
        parse=parse_fanouts,
        name="fanout",
        default=None,
    )
    batch_size: int = option(
        "seed nodes per batch on the worker with the most training nodes; the others split theirs into as many batches",
        type=int,
        default=BATCH_SIZE,
    )
    eval_fanouts: tuple[int, ...] | None = option(
        "under --memory-budget, validation and test accuracies come from sampled inference, a "
        "batch of evaluated nodes at a time, drawing this many neighbours per node at each hop; "
        "-1 takes all (the full-graph pass's accuracies) (every sampler but dgs; default: --fanout, "
        f"or {FANOUT} per layer)",
        metavar="K,K,...",
        parse=parse_eval_fanouts,
        name="eval_fanout",
        default=None,
    )
    steps_per_epoch: int | None = option(
        "at most N steps per epoch: the first N batches of each epoch's shuffled "
        "seeds, as Lightning's limit_train_batches (every sampler; default: "
        "every batch)",
        type=int,
        metavar="N",
        default=None,
    )
    peer_rows: str = option(
        "rows owned by workers on the same machine: map reads them from the partition "
        "set's shared files (counted as local_bytes), network fetches them as from "
        "another machine (counted as feature_bytes; what the thesis's counts assume) "
        "(every sampler)",
        choices=PEER_ROWS,
        default="map",
    )
    structure: str | None = option(
        "the graph's in-edges on each machine: replicated (the whole graph's, mapped once "
        "per machine) or partitioned (the machine's parts' only; hops through other "
        "machines' nodes are drawn by their owners, counted as structure_bytes) (neighbor; "
        "default: partitioned when the job spans machines, else replicated)",
        choices=STRUCTURES,
        default=None,
    )
    layer_size: int = option("nodes drawn per layer (fastgcn, ladies)", type=int, default=LAYER_SIZE)
    clusters: int | None = option(
        "METIS clusters of each worker's nodes (cluster; default: its nodes / --batch-size)", type=int, default=None
    )
    clusters_per_batch: int = option("clusters joined into one batch (cluster)", type=int, default=1)
    feature_rate: float = option(
        "DGS's N_f: the share of feature columns remote nodes send (dgs)", type=float, default=FEATURE_RATE
    )
    epsilon: float = option(
        "DGS's epsilon: draws moved from remote to local neighbours, a share of the fanout (dgs)",
        type=float,
        default=EPSILON,
    )
    dgs_rule: str = option(
        "DGS's local neighbours: keep-local keeps them all (the thesis), split draws "
        "fanout minus the remote draws of them (dgs)",
        choices=RULES,
        default=RULES[0],
    )
    dgs_masks: str | None = option(
        "DGS's masks from this file (written by --dgs-masks-out) from the first step (dgs)",
        metavar="FILE",
        default=None,
    )
    dgs_masks_out: str | None = option(
        "after training, explain the final model on every worker and write the masks here, for --dgs-masks (dgs)",
        metavar="FILE",
        default=None,
    )
    dgs_wait: bool = option(
        "wait for the first explanation before the first step, the wait reported as dgs_wait_seconds (dgs)",
        type=bool,
        default=False,
    )
    explain_cpu: float | None = option(
        "the online explainer's CPU budget in cores (0.5: half a core, 2: two "
        "threads); 0: no online explainer (masks only from --dgs-masks) (dgs; "
        "default: one thread on the cycles training leaves idle)",
        type=float,
        metavar="CORES",
        default=None,
    )
    explain_in: str = option(
        "where the online explainer runs: process (beside training, in an interpreter of its own) or "
        "worker (in the training process at the end of each T_ex window: no second interpreter, "
        "training waits for it) (dgs)",
        choices=EXPLAIN_IN,
        default=EXPLAIN_IN[0],
    )
    explain_period: int = option(
        "DGS's T_ex: explain every N iterations (dgs)", type=int, metavar="N", default=ExplainerOptions.period
    )
    explain_epochs: int = option("GNNExplainer epochs per explanation (dgs)", type=int, default=ExplainerOptions.epochs)
    explain_loss_threshold: float = option(
        "stop explaining at this loss (dgs)", type=float, default=ExplainerOptions.loss_threshold
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.fanouts is not None:  # a tuple however given (a list from the launcher's data)
            self.fanouts = check_fanouts(self.fanouts)
        self._check_samplers()
        if self.sampler is None:
            return
        for name in ("batch_size", "steps_per_epoch", "layer_size", "clusters", "clusters_per_batch"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                self.refuse(f"{name} must be >= 1; got {getattr(self, name)}", name)
        if self.clusters is not None and self.clusters_per_batch > self.clusters:
            self.refuse(
                f"clusters_per_batch ({self.clusters_per_batch}) exceeds clusters ({self.clusters})",
                "clusters_per_batch",
                "clusters",
            )
        if not 0 < self.feature_rate <= 1:
            self.refuse(f"feature_rate (N_f) must lie in (0, 1]; got {self.feature_rate}", "feature_rate")
        if not 0 <= self.epsilon <= 1:
            self.refuse(f"epsilon must lie in [0, 1]; got {self.epsilon}", "epsilon")
        if self.explain_cpu is not None and not (self.explain_cpu >= 0 and math.isfinite(self.explain_cpu)):
            self.refuse(f"explain_cpu must be >= 0 cores, a finite number; got {self.explain_cpu}", "explain_cpu")
        if self.dgs_wait and self.explain_cpu == 0 and self.dgs_masks is None:
            self.refuse(
                "dgs_wait waits for the online explainer, which explain_cpu 0 turns off: give dgs_masks FILE or a "
                "CPU budget",
                "dgs_wait",
                "explain_cpu",
                "dgs_masks",
            )
        if self.dgs_masks is not None and not Path(self.dgs_masks).is_file():
            self.refuse(f"dgs_masks {self.dgs_masks}: no such file", "dgs_masks")
        self.explainer_options()

    def _check_samplers(self) -> None:
        """Refuse an option given (not its default) that the sampler does not use."""
        defaults = {f.name: f.default for f in fields(self)}
        for name, samplers in SAMPLER_OPTIONS.items():
            if getattr(self, name) != defaults[name] and self.sampler not in samplers:
                self.refuse(
                    f"{name} is an option of sampler {'|'.join(samplers)}; "
                    + (
                        "this is full-graph training"
                        if self.sampler is None
                        else f"sampler {self.sampler} does not use it"
                    ),
                    name,
                    "sampler",
                )

    def explainer_options(self) -> ExplainerOptions:
        """DGS's explainer options (checked when made)."""
        try:
            return ExplainerOptions(
                period=self.explain_period, epochs=self.explain_epochs, loss_threshold=self.explain_loss_threshold
            )
        except SamplingError as exc:  # its fields are ours without the prefix
            names = tuple(f"explain_{name}" for name in exc.parameters)
            raise TrainingError(f"explain_{exc}", parameters=names) from None


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
        elif sampling.sampler in SAMPLER_OPTIONS["fanouts"]:
            self.sampling = replace(sampling, fanouts=(FANOUT,) * layers)
        if self.sampling.eval_fanouts is not None:
            checks.check_eval_fanout(self)
        if checks.sampled_evaluation(self):
            fanouts = self.sampling.eval_fanouts or self.sampling.fanouts or (FANOUT,) * layers
            self.sampling = replace(self.sampling, eval_fanouts=fanouts)
        if self.task.task == "link":
            checks.check_link_task(self)
        elif self.gnn.model in HETERO_MODELS:
            checks.check_hetero_model(self)
        elif self.comm.first_layer == "owner":
            checks.check_owner_first_layer(self)
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
