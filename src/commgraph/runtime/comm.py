"""``Communicator``: the one object that moves tensors between workers, counts every byte, and
measures how long its worker sat blocked waiting for messages (``wait_seconds``).

What moves is described elsewhere: an all-gather plan's share for this rank is an ``Exchange``
(:mod:`commgraph.plan.exchange`), executed by :mod:`commgraph.runtime.stream`.
"""

from __future__ import annotations

import pickle
import time
from collections import defaultdict
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from commgraph.runtime.traffic import Traffic
from commgraph.runtime.world import World


def match_ordering(choice: str, backend: str) -> str:
    """The message ordering an exchange runs with on ``backend``.

    Args:
        choice: ``auto``, or an ordering of :data:`commgraph.plan.exchange.ORDERINGS`, kept as given.
        backend: the torch.distributed backend (``nccl``, ``gloo``).

    Returns:
        ``choice``, or for ``auto``: ``ordered`` on NCCL (which matches a pair's messages in the order
        they are posted), ``tagged`` elsewhere.
    """
    if choice != "auto":
        return choice
    return "ordered" if backend == "nccl" else "tagged"


@dataclass
class Communicator:
    """Asynchronous sends and receives with byte accounting and failure naming."""

    world: World
    bytes: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # by label, read as ``traffic``
    wait_seconds: float = 0.0  # time blocked in ``wait``, since creation
    _label: str = "other"

    @property
    def traffic(self) -> Traffic:
        """Every byte sent since creation, by label, as named counters."""
        return Traffic.from_counts(self.bytes)

    def count_as(self, label: str) -> None:
        """Charge the bytes sent from now on to ``label`` (``halo_forward``, ``allreduce``, ...)."""
        self._label = label

    def isend(self, tensor: torch.Tensor, peer: int, tag: int):
        self.bytes[self._label] += tensor.numel() * tensor.element_size()
        return dist.isend(tensor, peer, group=self.world.halo_group, tag=tag)

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int):
        return dist.irecv(tensor, peer, group=self.world.halo_group, tag=tag)

    def wait(self, work, peer: int | None = None, what: object = None) -> None:
        """Block until ``work`` completes; a failure names the rank responsible (and ``what`` was
        awaited, e.g. a ``MessageId``)."""
        started = time.perf_counter()
        try:
            work.wait()
        except Exception as exc:  # noqa: BLE001 - Gloo/NCCL raise RuntimeError subclasses
            error = self.world.explain(exc, waiting_for=peer)
            raise type(error)(f"{error} (waiting for {what})" if what is not None else str(error)) from None
        finally:
            self.wait_seconds += time.perf_counter() - started

    # -- small collectives --------------------------------------------------------------------

    def all_reduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum over workers, in place."""
        try:
            dist.all_reduce(tensor, group=self.world.grad_group)
        except Exception as exc:  # noqa: BLE001
            raise self.world.explain(exc) from None
        return tensor

    def global_sum(self, values: list[float]) -> list[float]:
        """Each value summed over the workers (counts, losses): one small all-reduce."""
        tensor = torch.tensor(values, dtype=torch.float64, device=self.world.device)
        if self.world.size > 1:
            self.all_reduce_(tensor)
        return tensor.tolist()

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        try:
            dist.broadcast(tensor, src, group=self.world.grad_group)
        except Exception as exc:  # noqa: BLE001
            raise self.world.explain(exc) from None
        return tensor

    def all_gather_object(self, obj) -> list:
        """Every worker's ``obj`` (pickled through a byte tensor; used at setup and checkpoints)."""
        device = self.world.device  # NCCL collectives need GPU tensors
        payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8).to(device)
        sizes = torch.zeros(self.world.size, dtype=torch.int64, device=device)
        sizes[self.world.rank] = payload.numel()
        self.all_reduce_(sizes)
        padded = torch.zeros(int(sizes.max()), dtype=torch.uint8, device=device)
        padded[: payload.numel()] = payload
        gathered = [torch.empty_like(padded) for _ in range(self.world.size)]
        try:
            dist.all_gather(gathered, padded, group=self.world.grad_group)
        except Exception as exc:  # noqa: BLE001
            raise self.world.explain(exc) from None
        return [pickle.loads(g[: int(n)].cpu().numpy().tobytes()) for g, n in zip(gathered, sizes)]

    def barrier(self) -> None:
        self.all_reduce_(torch.zeros(1, device=self.world.device))
