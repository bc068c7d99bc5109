"""What ``--metrics-out`` holds: one :class:`EpochRecord` per epoch, summed over the workers."""

from __future__ import annotations

from dataclasses import dataclass

from commgraph.train.predict import SPLITS


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
    # DGS only (None otherwise), all workers: steps that sampled a batch, those sampled with masks
    # (the others sampled as neighbor does), rank 0's mask age at the epoch's end in steps (-1: none
    # yet), its wait for the first masks (--dgs-wait), explanations finished, their wall and CPU seconds
    dgs_steps: int | None = None
    dgs_masked_steps: int | None = None
    dgs_masks_age_steps: int | None = None
    dgs_wait_seconds: float | None = None
    dgs_explanations: int | None = None
    dgs_explain_seconds: float | None = None
    dgs_explain_cpu_seconds: float | None = None
    # under --memory-budget (None otherwise), all workers: rows served by the feature cache's hot rows and
    # read from the feature files, those rows' bytes, the bytes the coalesced reads asked for, and what
    # the workers read from storage (/proc/self/io read_bytes: page-cache hits read nothing)
    cache_hits: int | None = None
    cache_misses: int | None = None
    cache_missed_bytes: int | None = None
    cache_requested_bytes: int | None = None
    cache_disk_bytes: int | None = None

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
        if self.dgs_steps is None:
            return ""
        share = self.dgs_masked_steps / self.dgs_steps if self.dgs_steps else 0.0
        note = f"  masks {share:.0%} of steps" + (
            "" if self.dgs_masks_age_steps < 0 else f" (age {self.dgs_masks_age_steps})"
        )
        return note + (f", waited {self.dgs_wait_seconds:.1f} s" if self.dgs_wait_seconds else "")
