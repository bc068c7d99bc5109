"""``TrainConfig``: every training option once, with its flag, help and check, in sections:
the model (:class:`ModelOptions`), the optimiser (:class:`OptimOptions`), communication
(:class:`CommOptions`, and the job's topology and plans: :class:`~commgraph.runtime.job.JobOptions`),
sampling (:class:`SamplingOptions`) and logging (:class:`LogOptions`).

The CLI's flags (:meth:`TrainConfig.add_arguments`, one help group per section), the
configuration built from them (:meth:`TrainConfig.from_args`) and the argv handed to each worker
(:meth:`TrainConfig.to_argv`) all come from the fields below (see :mod:`commgraph.options`), and
the options are validated once, when a ``TrainConfig`` is made.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from commgraph.atomic import FORCE_HELP, check_output
from commgraph.errors import SamplingError, TrainingError
from commgraph.nn.options import HETERO_MODELS, LINEAR_FIRST, TRAIN_MODELS, check_model_options
from commgraph.options import Options, flag, option
from commgraph.plan.allreduce import CHOICES as ALLREDUCE_CHOICES
from commgraph.plan.choose import choose_job_allreduce
from commgraph.plan.features import MODES as FEATURE_MODES
from commgraph.plan.first_layer import FIRST_LAYERS, FirstLayerChoice, choose_first_layer, evaluation_passes
from commgraph.plan.memory import JobShape, label_classes, model_parameters
from commgraph.plan.steptime import SampledHops, predict_job
from commgraph.runtime.options import JobOptions, in_torchrun
from commgraph.sample.options import (
    EPSILON,
    EXPLAIN_IN,
    FEATURE_RATE,
    RULES,
    SAMPLERS,
    STRUCTURES,
    ExplainerOptions,
    parse_fanouts,
)
from commgraph.sim.steptime import StepTime, compute_model, other_machine
from commgraph.sizes import check_count
from commgraph.topology import read_yaml
from commgraph.topology.compute import MODELS as COMPUTE_MODELS
from commgraph.units import size

if TYPE_CHECKING:
    from commgraph.partition import PartitionSet
    from commgraph.topology.model import Topology

BATCH_SIZE, FANOUT, LAYER_SIZE = 1024, 10, 512
EXCHANGES = ("pipelined", "barrier", "replicate")  # how a full-graph layer exchanges rows (train.executor)
PEER_ROWS = ("map", "network")
# the samplers each sampler option applies to (batch size: every one)
SAMPLER_OPTIONS = {
    "fanout": ("neighbor", "dgs"),
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
            raise TrainingError(f"--bases is rgcn's and must be >= 1, got --bases {self.bases} --model {self.model}")


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
            raise TrainingError("--epochs must be >= 1")
        check_count("--epochs", self.epochs, TrainingError)
        if not self.lr > 0 or self.weight_decay < 0:
            raise TrainingError(f"need --lr > 0 and --weight-decay >= 0, got {self.lr} and {self.weight_decay}")


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
            raise TrainingError("--bin-size must be >= 1")
        if self.memory_budget is not None and self.memory_budget < 1:
            raise TrainingError("--memory-budget must be a size > 0, such as 8G")


@dataclass
class SamplingOptions(Options):
    """Mini-batch training: the sampler and its options (none: full-graph training)."""

    error = TrainingError
    sampler: str | None = option(
        "train on mini-batches drawn by this sampler, each worker from its own training "
        "nodes (default: full-graph training)",
        choices=SAMPLERS,
        default=None,
    )
    fanout: str | None = option(
        f"neighbours drawn per node at each hop, the seeds' hop first; -1 takes all "
        f"(neighbor, dgs; default {FANOUT} per layer)",
        metavar="K,K,...",
        default=None,
    )
    batch_size: int | None = option(
        f"seed nodes per batch on the worker with the most training nodes; the others "
        f"split theirs into as many batches (default: {BATCH_SIZE})",
        type=int,
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
    peer_rows: str | None = option(
        "rows owned by workers on the same machine: map reads them from the partition "
        "set's shared files (counted as local_bytes), network fetches them as from "
        "another machine (counted as feature_bytes; what the thesis's counts assume) "
        "(every sampler; default map)",
        choices=PEER_ROWS,
        default=None,
    )
    structure: str | None = option(
        "the graph's in-edges on each machine: replicated (the whole graph's, mapped once "
        "per machine) or partitioned (the machine's parts' only; hops through other "
        "machines' nodes are drawn by their owners, counted as structure_bytes) (neighbor; "
        "default: partitioned when the job spans machines, else replicated)",
        choices=STRUCTURES,
        default=None,
    )
    layer_size: int | None = option(
        f"nodes drawn per layer (fastgcn, ladies; default {LAYER_SIZE})", type=int, default=None
    )
    clusters: int | None = option(
        "METIS clusters of each worker's nodes (cluster; default: its nodes / --batch-size)", type=int, default=None
    )
    clusters_per_batch: int | None = option(
        "clusters joined into one batch (cluster; default 1)", type=int, default=None
    )
    feature_rate: float | None = option(
        f"DGS's N_f: the share of feature columns remote nodes send (dgs; default {FEATURE_RATE})",
        type=float,
        default=None,
    )
    epsilon: float | None = option(
        f"DGS's epsilon: draws moved from remote to local neighbours, a share of the fanout (dgs; default {EPSILON})",
        type=float,
        default=None,
    )
    dgs_rule: str | None = option(
        f"DGS's local neighbours: keep-local keeps them all (the thesis), split draws "
        f"fanout minus the remote draws of them (dgs; default {RULES[0]})",
        choices=RULES,
        default=None,
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
    explain_in: str | None = option(
        "where the online explainer runs: process (beside training, in an interpreter of its own) or "
        "worker (in the training process at the end of each T_ex window: no second interpreter, "
        "training waits for it) (dgs; default process)",
        choices=EXPLAIN_IN,
        default=None,
    )
    explain_period: int | None = option(
        f"DGS's T_ex: explain every N iterations (dgs; default {ExplainerOptions.period})",
        type=int,
        metavar="N",
        default=None,
    )
    explain_epochs: int | None = option(
        f"GNNExplainer epochs per explanation (dgs; default {ExplainerOptions.epochs})", type=int, default=None
    )
    explain_loss_threshold: float | None = option(
        f"stop explaining at this loss (dgs; default {ExplainerOptions.loss_threshold})", type=float, default=None
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, samplers in SAMPLER_OPTIONS.items():
            if getattr(self, name) not in (None, False) and self.sampler not in samplers:
                users = "--sampler " + "|".join(samplers)
                raise TrainingError(
                    f"--{flag(name)} is a sampler option for {users}; "
                    + (
                        "this is full-graph training"
                        if self.sampler is None
                        else f"--sampler {self.sampler} does not use it"
                    )
                )
        if self.sampler is None:
            return
        for name in ("batch_size", "steps_per_epoch", "layer_size", "clusters", "clusters_per_batch"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise TrainingError(f"--{flag(name)} must be >= 1; got {getattr(self, name)}")
        if (
            self.clusters is not None
            and self.clusters_per_batch is not None
            and self.clusters_per_batch > self.clusters
        ):
            raise TrainingError(
                f"--clusters-per-batch ({self.clusters_per_batch}) exceeds --clusters ({self.clusters})"
            )
        if self.feature_rate is not None and not 0 < self.feature_rate <= 1:
            raise TrainingError(f"--feature-rate (N_f) must lie in (0, 1]; got {self.feature_rate}")
        if self.epsilon is not None and not 0 <= self.epsilon <= 1:
            raise TrainingError(f"--epsilon must lie in [0, 1]; got {self.epsilon}")
        if self.explain_cpu is not None and not (self.explain_cpu >= 0 and math.isfinite(self.explain_cpu)):
            raise TrainingError(f"--explain-cpu must be >= 0 cores, a finite number; got {self.explain_cpu}")
        if self.dgs_wait and self.explain_cpu == 0 and self.dgs_masks is None:
            raise TrainingError(
                "--dgs-wait waits for the online explainer, which --explain-cpu 0 turns off: "
                "give --dgs-masks FILE or a CPU budget"
            )
        if self.dgs_masks is not None and not Path(self.dgs_masks).is_file():
            raise TrainingError(f"--dgs-masks {self.dgs_masks}: no such file")
        self.explainer_options()

    def explainer_options(self) -> ExplainerOptions:
        """DGS's explainer options, the thesis's defaults where not given (checked when made)."""
        given = {
            "period": self.explain_period,
            "epochs": self.explain_epochs,
            "loss_threshold": self.explain_loss_threshold,
        }
        try:
            return ExplainerOptions(**{k: v for k, v in given.items() if v is not None})
        except SamplingError as exc:
            raise TrainingError(str(exc)) from None


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
            raise TrainingError("--eval-every must be >= 1")
        if self.tensorboard is not None and importlib.util.find_spec("tensorboard") is None:
            raise TrainingError("--tensorboard needs the tensorboard package: pip install 'commgraph[tensorboard]'")
        if self.resume and not self.checkpoint_dir:
            raise TrainingError("--resume needs --checkpoint-dir")
        if self.predictions_out is not None:
            from commgraph.train.predict import check_predictions_path

            check_predictions_path(Path(self.predictions_out))


TASKS = ("node", "link")
LINK_MODELS = ("gcn", "sage", "gat", "gin")
# node classification's options that link prediction (commgraph.train.link) has no use for: section -> fields
NODE_ONLY = {
    "sampling": ("sampler",),
    "comm": ("exchange", "features", "bin_size", "first_layer"),
    "job": ("speeds", "placement", "ordering"),
    "log": ("predictions_out", "checkpoint_dir", "resume", "tensorboard"),
}


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
                    raise TrainingError(f"--{flag(name)} splits edges for --task link; this is --task {self.task}")
            return
        if not (0 <= self.val_edges < 1 and 0 <= self.test_edges < 1 and self.val_edges + self.test_edges < 1):
            raise TrainingError(
                f"--val-edges and --test-edges are shares of the edges, each in [0, 1) and summing "
                f"below 1; got {self.val_edges} and {self.test_edges}"
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
        if self.sampling.fanout is not None:
            parse_fanouts(self.sampling.fanout, self.gnn.layers)
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
        values = {}
        for kind, _ in SECTIONS.values():
            values.update(kind.values(args))
        return cls.build(**{**values, **overrides})

    def sections(self, job: bool = False) -> list[Options]:
        """The sections (the job's options only with ``job``: a launcher hands them over resolved)."""
        return [getattr(self, attribute) for attribute in SECTIONS if job or attribute != "job"]

    def to_argv(self) -> list[str]:
        """The flags that give this configuration (defaults left out)."""
        return [arg for section in self.sections(job=True) for arg in section.to_argv()]

    def replace_job(self, **changes) -> TrainConfig:
        """The same configuration with some of the job's options changed (checked again)."""
        return replace(self, job=replace(self.job, **changes))

    def first_layer_choice(self, width: int, workers: int, streamed: bool = False) -> FirstLayerChoice:
        """How layer 0's remote rows cross in this run's full-graph pass, for input features
        ``width`` wide, ``workers`` workers, rows ``streamed`` from a host feature table
        (:func:`~commgraph.plan.first_layer.choose_first_layer`)."""
        return choose_first_layer(
            self.comm.first_layer,
            model=self.gnn.model,
            width=width,
            hidden=self.gnn.hidden,
            epochs=self.optim.epochs,
            evaluations=evaluation_passes(self.optim.epochs, self.log.eval_every),
            sampled=bool(self.sampling.sampler),
            replicate=self.comm.exchange == "replicate",
            workers=workers,
            streamed=streamed,
        )

    def job_shape(self, pset: PartitionSet, workers: int) -> JobShape:
        """The shape of this run's job on ``pset`` with ``workers`` workers, all on this machine
        (what its memory estimate and step time read)."""
        sampling, gnn = self.sampling, self.gnn
        return JobShape(
            workers,
            workers,
            gnn.hidden,
            gnn.layers,
            sampling.sampler,
            sampling.batch_size or BATCH_SIZE,
            tuple(self.fanouts or ()),
            sampling.peer_rows or "map",
            sampling.structure or "replicated",
            model=gnn.model,
            explainer=sampling.sampler == "dgs" and (sampling.explain_cpu != 0 or sampling.dgs_masks_out is not None),
            explainer_process=sampling.explain_in != "worker",
            first_layer=self._first_layer_mode(pset, workers),
            memory_budget=self.comm.memory_budget,
        )

    def _first_layer_mode(self, pset: PartitionSet, workers: int) -> str:
        """How the full-graph pass's layer 0 reads its halo rows (R-GCN: its projected rows, hidden wide)."""
        features = pset.part(0, check=False).features
        if self.gnn.model in HETERO_MODELS or features is None:
            return "features"
        return self.first_layer_choice(int(features.shape[1]), workers).mode

    @property
    def predicts_step_time(self) -> bool:
        """Whether the step's cost model knows this model (:data:`~commgraph.topology.compute.MODELS`)."""
        return self.gnn.model in COMPUTE_MODELS

    def step_time(
        self,
        pset: PartitionSet,
        topology: Topology,
        devices: list[str],
        plan_seconds: float,
        allreduce_seconds: float | None = None,
        *,
        threads: int | None = None,
        warn: bool = True,
    ) -> StepTime:
        """This run's step priced (:func:`~commgraph.plan.steptime.predict_job`) on ``topology``
        with the cost model of ``--cost-model`` or the topology's calibration; ``allreduce_seconds``
        None: the gradients' all-reduce priced here (``--allreduce`` on the topology); ``threads``
        a worker's compute threads (None: the cores shared by the machine's workers). A cost model
        from another kind of machine is warned about on stderr (where ``warn``)."""
        shape = self.job_shape(pset, len(devices))
        cost = None if self.log.cost_model is None else read_yaml(self.log.cost_model)
        model = compute_model(topology, cost)
        warning = other_machine(model)
        if warning is not None and warn:
            print(f"commgraph: {warning}", file=sys.stderr)
        if allreduce_seconds is None:
            classes = label_classes(pset)
            width = int(pset.part(0, check=False).features.shape[1])
            nbytes = 4 * model_parameters(width, shape.hidden, shape.layers, classes)
            allreduce_seconds = choose_job_allreduce(self.comm.allreduce, topology, devices, nbytes).modeled_seconds
        return predict_job(
            pset,
            shape,
            model,
            topology,
            devices,
            plan_seconds,
            allreduce_seconds,
            heads=self.gnn.heads,
            threads=threads,
            steps_cap=self.sampling.steps_per_epoch,
            hops=None if shape.sampler is None else sampled_hops(pset, shape.fanouts, shape.batch_size),
        )

    @property
    def fanouts(self) -> list[int]:
        """The sampler's fanout per hop (the default where not given)."""
        layers = self.gnn.layers
        return parse_fanouts(self.sampling.fanout, layers) if self.sampling.fanout else [FANOUT] * layers


def check_owner_first_layer(config: TrainConfig) -> None:
    """``--first-layer owner`` is exact only where layer 0 transforms each source row before
    aggregating, and needs a per-step exchange to replace."""
    model = config.gnn.model
    if model not in LINEAR_FIRST:
        raise TrainingError(
            f"--first-layer owner needs a first layer that is linear before aggregation "
            f"({', '.join(LINEAR_FIRST)}); --model {model}'s is not, so its owner cannot compute "
            f"it: use --first-layer features"
        )
    if config.sampling.sampler is None and config.comm.exchange == "replicate":
        raise TrainingError(
            "--first-layer owner replaces the halo exchange of layer 0, and --exchange replicate "
            "has none: use --exchange pipelined or barrier"
        )


def check_hetero_model(config: TrainConfig) -> None:
    """``--model rgcn`` trains full-graph with the layer-wise exchange, or sampled with ``--sampler
    neighbor`` on the whole graph's relations: refuse what it does not do."""
    sampling = config.sampling
    refused = [
        (config.task.task == "link", "--task link"),
        (sampling.sampler not in (None, "neighbor"), f"--sampler {sampling.sampler}"),
        (sampling.structure == "partitioned", "--structure partitioned"),
        (config.comm.exchange == "replicate", "--exchange replicate"),
        (config.comm.first_layer == "owner", "--first-layer owner"),
        (config.log.checkpoint_dir is not None, "--checkpoint-dir"),
    ]
    what = next((name for bad, name in refused if bad), None)
    if what is not None:
        raise TrainingError(
            "--model rgcn trains full-graph, exchanging layer-wise, or sampled with --sampler neighbor on the "
            f"whole graph's relations, without checkpoints: drop {what}"
        )


def check_link_task(config: TrainConfig) -> None:
    """``--task link`` trains PyG's own convs full-graph through ``commgraph.pyg``: refuse a model it
    does not build and node classification's options it does not use."""
    if config.gnn.model not in LINK_MODELS:
        raise TrainingError(f"--task link builds PyG's {', '.join(LINK_MODELS)}; --model {config.gnn.model} is not one")
    for section, names in NODE_ONLY.items():
        options = getattr(config, section)
        for f in fields(options):
            if f.name in names and getattr(options, f.name) != f.default:
                raise TrainingError(
                    f"--{flag(f.name)} is node classification's; --task link trains full-graph "
                    "through commgraph.pyg and has no use for it"
                )


HOP_BATCHES = 4  # batches drawn before launch to measure a sampled batch's size


def sampled_hops(
    pset: PartitionSet, fanouts: tuple[int, ...], batch_size: int, batches: int = HOP_BATCHES, seed: int = 0
) -> SampledHops:
    """A sampled batch's mean sizes by hop (:class:`~commgraph.plan.steptime.SampledHops`) over
    ``batches`` batches that a neighbour sampler draws with ``fanouts`` from ``batch_size`` training
    nodes of the part with the most of them, on the set's whole structure as a worker samples it."""
    from commgraph.sample.base import SamplingGraph
    from commgraph.sample.neighbor import NeighborSampler

    parts = [pset.part(k, check=False) for k in range(pset.num_parts)]
    busiest = max(range(len(parts)), key=lambda k: int(np.count_nonzero(parts[k].train_mask)))
    owned = np.asarray(parts[busiest].owned)
    train = owned[np.asarray(parts[busiest].train_mask, dtype=bool)]
    seeds_from = train if train.size else owned
    sampler = NeighborSampler(SamplingGraph.from_partition(pset, busiest), fanouts)
    rng = np.random.default_rng(seed)
    sizes = np.array(
        [
            [
                (layer.dst.shape[0], layer.src.shape[0], layer.num_edges)
                for layer in sampler.sample(
                    rng.choice(seeds_from, min(batch_size, seeds_from.size), replace=False), rng
                ).layers[::-1]
            ]
            for _ in range(batches)
        ],
        dtype=float,
    ).mean(axis=0)
    return SampledHops(*(tuple(float(v) for v in column) for column in sizes.T))
