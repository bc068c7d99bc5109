"""How a model is split over GPUs (Megatron-LM's PTD-P, Narayanan et al. SC'21) and the order a
pipeline stage runs its micro-batches in.

Ranks are numbered tensor-parallel fastest, then data-parallel, then pipeline stage:
``rank = t + tp (d + dp s)``; rank r runs on the topology's r-th GPU. Expert parallelism splits the
``tp x dp`` ranks of a stage into groups of ``ep``, data-parallel replicas fastest, so with
``ep <= dp`` an EP group is one tensor-parallel rank across ``ep`` replicas (one rail).

1F1B (PipeDream-Flush): stage ``s`` of ``p`` runs ``min(p - s - 1, m)`` warm-up forwards, then
alternates one forward and one backward, then drains the backwards. Interleaved 1F1B gives each
device ``v`` model chunks; its k-th forward is chunk ``(k mod pv) // p`` of micro-batch
``(k // pv) p + k mod p``, and it warms up with ``2(p - s - 1) + (v - 1) p`` forwards. With free
communication and equal stages the pipeline idles a fraction ``(p - 1) / (v m + p - 1)`` of the time.
"""

from __future__ import annotations

from dataclasses import dataclass

from commgraph.errors import SimulationError
from commgraph.workload.models import ModelSpec

SCHEDULES = ("1f1b", "interleaved")


@dataclass(frozen=True)
class Op:
    """One pass of one micro-batch through one model chunk on a stage."""

    backward: bool
    chunk: int
    microbatch: int


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int
    ep: int = 1
    microbatches: int = 8
    schedule: str = "1f1b"
    chunks: int = 1

    def __post_init__(self) -> None:
        for field in ("tp", "pp", "dp", "ep", "microbatches", "chunks"):
            if getattr(self, field) < 1:
                raise SimulationError(f"layout: {field} must be >= 1, got {getattr(self, field)}")
        if self.schedule not in SCHEDULES:
            raise SimulationError(f"layout: schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.schedule == "1f1b" and self.chunks != 1:
            raise SimulationError("layout: model chunks > 1 need --schedule interleaved")
        if self.schedule == "interleaved" and (self.chunks < 2 or self.microbatches % self.pp):
            raise SimulationError("layout: interleaved 1F1B needs chunks >= 2 and micro-batches a multiple of pp")
        if (self.tp * self.dp) % self.ep:
            raise SimulationError(f"layout: ep={self.ep} must divide tp x dp = {self.tp * self.dp}")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def check(self, model: ModelSpec) -> None:
        if model.layers % (self.pp * self.chunks):
            raise SimulationError(
                f"{model.name}: {model.layers} layers do not split into "
                f"pp x chunks = {self.pp * self.chunks} equal stages"
            )
        if model.moe and model.experts % self.ep:
            raise SimulationError(f"{model.name}: {model.experts} experts do not split over ep={self.ep}")
        if not model.moe and self.ep != 1:
            raise SimulationError(f"{model.name} is dense: ep must be 1")

    def rank(self, stage: int, replica: int, tp_rank: int) -> int:
        return tp_rank + self.tp * (replica + self.dp * stage)

    def ep_member(self, replica: int, tp_rank: int) -> tuple[int, int]:
        """(EP group, position in it) of a stage's rank."""
        q = tp_rank * self.dp + replica
        return q // self.ep, q % self.ep

    def ep_rank(self, group: int, position: int) -> tuple[int, int]:
        """(replica, tp rank) of an EP group's member."""
        q = group * self.ep + position
        return q % self.dp, q // self.dp

    def stage_ops(self, stage: int) -> list[Op]:
        """The order stage ``stage`` runs its forward and backward passes in."""
        p, v, m = self.pp, self.chunks, self.microbatches
        total = m * v
        warmup = min((p - stage - 1) * 2 + (v - 1) * p if v > 1 else p - stage - 1, total)

        def op(k: int, backward: bool) -> Op:
            within = k % (p * v)
            chunk = within // p if v > 1 else 0
            microbatch = (k // (p * v)) * p + within % p if v > 1 else k
            return Op(backward, v - 1 - chunk if backward else chunk, microbatch)

        order = [op(k, False) for k in range(warmup)]
        for i in range(total - warmup):
            order += [op(warmup + i, False), op(i, True)]
        order += [op(k, True) for k in range(total - warmup, total)]
        return order
