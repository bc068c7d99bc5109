"""``train``'s sampling section (:class:`SamplingOptions`): the sampler and its options, each with
its flag, help, default and check, and the samplers each option applies to
(:data:`SAMPLER_OPTIONS`). Part of :class:`~commgraph.train.config.TrainConfig`."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

from commgraph.errors import SamplingError, TrainingError
from commgraph.options import Options, option
from commgraph.sample.options import (
    EPSILON,
    EXPLAIN_IN,
    FEATURE_RATE,
    RULES,
    STRUCTURES,
    ExplainerOptions,
    Fanouts,
    check_fanouts,
    parse_eval_fanouts,
    parse_fanouts,
)
from commgraph.sample.registry import SAMPLERS

BATCH_SIZE, FANOUT, LAYER_SIZE = 1024, 10, 512
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
    fanouts: Fanouts | None = option(
        f"neighbours drawn per node at each hop, the seeds' hop first; -1 takes all "
        f"(neighbor, dgs; default {FANOUT} per layer). --model rgcn: one list for every relation, or a "
        f"list per relation, each relation of the graph named once as partition info prints it: "
        f"'author__writes__paper=10,5;paper__cites__paper=15,10;...'",
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
