"""Gradient all-reduce, bucketed and started during the backward pass.

Parameters are grouped into buckets in reverse order of creation (the order backward produces their
gradients). A bucket's all-reduce starts asynchronously the moment its last gradient is accumulated,
so it overlaps the backward of earlier layers; ``finish`` waits for all of them. Gradients are
summed, not averaged: the trainer normalises the loss by the global number of training nodes, so the
sum is exactly the single-worker gradient.

The all-reduce is torch's own (``schedule=None``) or a planned schedule (ring, trees) executed on
point-to-point operations by :class:`~commgraph.runtime.allreduce.ScheduledAllReduce`; either sums
the same values, up to the order of float32 additions.
"""

from __future__ import annotations

import torch

from commgraph.plan.allreduce import AllReduceSchedule
from commgraph.runtime.allreduce import NativeAllReduce, ScheduledAllReduce
from commgraph.runtime.comm import Communicator

BUCKET_BYTES = 4 << 20


class GradientSync:
    """Sums the gradients of ``params`` over the ranks. With a ``schedule``, rank ``r`` runs on
    ``devices[r]`` (the schedule's devices in order unless given), in chunks of ``chunk_bytes``
    (the backend's default unless given); a schedule whose devices are not the job's is refused
    with PlanError. Made on every rank at the same point."""

    def __init__(
        self,
        params: list[torch.nn.Parameter],
        comm: Communicator,
        schedule: AllReduceSchedule | None = None,
        *,
        devices: list[str] | None = None,
        bucket_bytes: int = BUCKET_BYTES,
        chunk_bytes: int | None = None,
    ):
        self.comm = comm
        self.buckets: list[list[torch.nn.Parameter]] = []
        size = bucket_bytes
        for param in reversed([p for p in params if p.requires_grad]):
            if size + param.numel() * param.element_size() > bucket_bytes and size > 0:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(param)
            size += param.numel() * param.element_size()
        self._bucket_of = {id(p): b for b, bucket in enumerate(self.buckets) for p in bucket}
        self._pending = [len(b) for b in self.buckets]
        self._works: list = [None] * len(self.buckets)
        if schedule is not None:
            self.allreduce = ScheduledAllReduce(schedule, list(devices or schedule.devices), comm, chunk_bytes)
        else:
            self.allreduce = NativeAllReduce(comm)
        if comm.world.size > 1:
            for param in params:
                if param.requires_grad:
                    param.register_post_accumulate_grad_hook(self._ready)

    def _ready(self, param: torch.Tensor) -> None:
        bucket = self._bucket_of[id(param)]
        self._pending[bucket] -= 1
        if self._pending[bucket] == 0:
            self._launch(bucket)

    def _launch(self, bucket: int) -> None:
        params = self.buckets[bucket]
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
        self._works[bucket] = (self.allreduce.start(flat), flat)

    def finish(self) -> None:
        """Wait for every bucket (launching any whose gradients never all arrived) and write the
        summed gradients back."""
        if self.comm.world.size == 1:
            return
        for bucket in range(len(self.buckets)):
            if self._works[bucket] is None:
                self._launch(bucket)
        for bucket, (work, flat) in enumerate(self._works):
            work.wait()
            offset = 0
            for param in self.buckets[bucket]:
                n = param.numel()
                if param.grad is None:
                    param.grad = torch.zeros_like(param)
                param.grad.copy_(flat[offset : offset + n].view_as(param))
                offset += n
        self._pending = [len(b) for b in self.buckets]
        self._works = [None] * len(self.buckets)
