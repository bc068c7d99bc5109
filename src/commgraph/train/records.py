"""What ``--metrics-out`` holds: one :class:`EpochRecord` per epoch, summed over the workers, made
from each worker's :class:`EpochStep`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, ClassVar

from commgraph.runtime.traffic import Traffic
from commgraph.train.predict import SPLITS

if TYPE_CHECKING:
    from commgraph.runtime.feature_cache import CacheCounts


@dataclass(frozen=True)
class DGSStats:
    """What DGS's masks did in an epoch: on one worker (:attr:`EpochStep.dgs`), or over every
    worker (:attr:`EpochRecord.dgs`: the :attr:`SUMMED` counts summed, the mask age and the wait
    rank 0's). In the metrics file each is a key of its own, ``dgs_<name>``."""

    steps: int  # steps that sampled a batch
    masked_steps: int  # of those, steps sampled with masks (the others sampled as neighbor does)
    masks_age_steps: int  # at the epoch's end: steps since the explained snapshot (-1: no masks yet)
    wait_seconds: float  # blocked on the first explanation (--dgs-wait)
    explanations: int  # explanations finished during the epoch
    explain_seconds: float  # their wall time
    explain_cpu_seconds: float  # their CPU time (in the explainer's process)

    SUMMED: ClassVar[tuple[str, ...]] = (
        "steps",
        "masked_steps",
        "explanations",
        "explain_seconds",
        "explain_cpu_seconds",
    )


@dataclass
class StepPhases:
    """Where a worker's sampled steps spent their time in an epoch, in seconds summed over the steps,
    by the host's clock (on a GPU a phase ends when its kernels are queued). Drawing the batches is
    ``sample_seconds`` beside these."""

    fetch: float = 0.0  # the input rows asked for and the other workers' rows received
    gather: float = 0.0  # the input rows read from the feature store and mapped files, wherever a layer reads them
    forward: float = 0.0  # the layers and the loss, the gather apart
    backward: float = 0.0  # the backward pass, the gather apart
    optimizer: float = 0.0  # the gradients' sum finished and the optimiser's step


def phase_seconds(phases: StepPhases | None) -> dict[str, float | None]:
    """``phases`` as :class:`EpochRecord`'s ``<phase>_seconds`` fields (None each without them)."""
    return {f"{f.name}_seconds": None if phases is None else getattr(phases, f.name) for f in fields(StepPhases)}


@dataclass
class EpochStep:
    """One worker's training in an epoch: its full-graph step, or its sampled batches' steps
    (bytes are what this worker sent, by label)."""

    loss: float  # the worker's share of the global loss (sampled: the mean over its steps)
    seconds: float
    wait_seconds: float  # blocked on halo, feature, request or gradient messages
    moved: Traffic = field(default_factory=Traffic)
    steps: int = 1
    sample_seconds: float = 0.0
    sync_bytes: int = 0  # LADIES's probability synchronisation, as the sampler counts it
    dgs: DGSStats | None = None  # DGS only: its masks and explainer in this epoch
    cache: CacheCounts | None = None  # under a memory budget: what the feature cache served and read
    step_seconds: float | None = None  # the steps' own seconds where the epoch holds more (None: ``seconds``)
    phases: StepPhases | None = None  # sampled training: where the steps' time went


@dataclass
class EpochRecord:
    """One epoch, summed over the workers (what ``--metrics-out`` holds, one JSON line each)."""

    epoch: int
    loss: float
    train_acc: float | None  # None: not evaluated this epoch (--eval-every), or no node in the split
    val_acc: float | None
    test_acc: float | None
    epoch_seconds: float  # the training step on rank 0
    comm_wait_seconds: float  # rank 0's time blocked on halo or gradient messages during the step
    comm_bytes: int  # halo bytes, forward and backward, all workers
    halo_forward_bytes: list[int]  # per exchanged layer
    halo_backward_bytes: int
    allreduce_bytes: int
    plan: str  # the all-gather plan's planner
    plan_modeled_seconds: float  # one layer's exchange as the simulator prices it
    allreduce: str  # native, or the planned schedule the gradients run
    allreduce_modeled_seconds: float | None  # the gradient all-reduce as the simulator prices it
    steps: int = 1  # training steps in the epoch (sampled batches; 1 for full-graph training)
    steps_cap: int | None = None  # --steps-per-epoch: the cap on an epoch's steps (None: every batch)
    sample_seconds: float = 0.0  # rank 0's time drawing batches
    # sampled training, rank 0's steps (StepPhases; None for full-graph training)
    fetch_seconds: float | None = None
    gather_seconds: float | None = None
    forward_seconds: float | None = None
    backward_seconds: float | None = None
    optimizer_seconds: float | None = None
    feature_bytes: int = 0  # sampled batches' remote feature rows over the network, all workers
    local_bytes: int = 0  # their rows read from the shared files of the same machine's workers, all workers
    structure_bytes: int = 0  # their requests (node ids, DGS's column lists) and sampling_bytes, all workers
    sampling_bytes: int = 0  # --structure partitioned: remote hops' ids asked of owners and drawn by them, all workers
    sync_bytes: int = 0  # LADIES's probability synchronisation as its sampler counts it (computed locally)
    activation_bytes: int = 0  # --first-layer owner: first-layer rows its owners sent, hidden wide, all workers
    activation_grad_bytes: int = 0  # their gradients sent back to the owners, all workers
    total_bytes: int = 0  # what the thesis counts: comm_bytes plus the gradients' all-reduce bytes, all workers
    # the step as predicted before it ran (commgraph.plan.steptime) and as measured on rank 0 (the
    # steps' own seconds over the steps: a sampled epoch's seed draw and memory release are not a step's)
    predicted_step_seconds: float | None = None
    predicted_epoch_seconds: float | None = None
    measured_step_seconds: float | None = None
    dgs: DGSStats | None = None  # DGS only, over every worker
    # under --memory-budget (None otherwise), all workers: rows served by the feature cache's hot rows and
    # read from the feature files, those rows' bytes, the bytes the coalesced reads asked for, and what
    # the workers read from storage (/proc/self/io read_bytes: page-cache hits read nothing)
    cache_hits: int | None = None
    cache_misses: int | None = None
    cache_missed_bytes: int | None = None
    cache_requested_bytes: int | None = None
    cache_disk_bytes: int | None = None

    def to_dict(self) -> dict:
        """The record as ``--metrics-out`` writes it: flat, :attr:`dgs` as ``dgs_<name>`` keys
        (None each without DGS), in the fields' order."""
        flat = {}
        for name, value in asdict(self).items():
            if name == "dgs":
                flat.update({f"dgs_{f.name}": None if value is None else value[f.name] for f in fields(DGSStats)})
            else:
                flat[name] = value
        return flat

    def line(self) -> str:
        acc = {
            name: "  -  " if getattr(self, f"{name}_acc") is None else f"{getattr(self, f'{name}_acc'):.3f}"
            for name in SPLITS
        }
        return (
            f"epoch {self.epoch:4d}  loss {self.loss:.4f}  train {acc['train']}  val {acc['val']}  "
            f"test {acc['test']}  {self.epoch_seconds * 1e3:8.1f} ms  (waiting {self.comm_wait_seconds * 1e3:6.1f} "
            f"ms)  {self.comm_bytes / 1e6:8.3f} MB" + self._masks_note()
        )

    def _masks_note(self) -> str:
        dgs = self.dgs
        if dgs is None:
            return ""
        share = dgs.masked_steps / dgs.steps if dgs.steps else 0.0
        note = f"  masks {share:.0%} of steps" + ("" if dgs.masks_age_steps < 0 else f" (age {dgs.masks_age_steps})")
        return note + (f", waited {dgs.wait_seconds:.1f} s" if dgs.wait_seconds else "")
