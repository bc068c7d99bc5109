"""``Communicator``: the one object that moves tensors between workers, and counts every byte.

An ``Exchange`` is one rank's share of an all-gather ``CommPlan``: the messages it sends (rows of its
table, by position) and receives (into positions of its table), stage by stage. The same exchange
runs forward (fill the halo) and in reverse (send the halo's gradients back to the owners and add
them up), which is what the autograd halo op needs. Messages are tagged, so on Gloo they can be
sent and received in any order; a plan's relay stages (SPST) are executed too, with the relayed
rows kept in extra table rows.
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch
import torch.distributed as dist

from commgraph.errors import PlanError
from commgraph.plan.model import CommPlan
from commgraph.runtime.world import World

TAG_SPAN = 1 << 16  # one exchange (a layer, a direction) uses tags [k * TAG_SPAN, (k + 1) * TAG_SPAN)


@dataclass
class Message:
    peer: int
    tag: int
    index: torch.Tensor  # sender: table rows to send; receiver: table rows to fill


@dataclass
class Exchange:
    """What one rank sends and receives for one all-gather, as table positions."""

    stages: list[tuple[list[Message], list[Message]]]  # per stage: (sends, recvs)
    num_table_rows: int  # owned + halo + relayed rows
    num_owned: int
    num_halo: int

    @cached_property
    def idle(self) -> bool:
        """Nothing to send or receive (one worker, or a part no other part reads from or needs)."""
        return not any(sends or recvs for sends, recvs in self.stages)

    @cached_property
    def direct(self) -> bool:
        """Every row sent is an owned row and every row received is a halo row (a plan without
        relays, as every point-to-point plan is): the exchange then reads the owned rows where they
        are and fills the halo alone, instead of copying both into one table."""
        return self.num_table_rows == self.num_owned + self.num_halo and all(
            bool((m.index < self.num_owned).all()) for sends, _ in self.stages for m in sends)

    @classmethod
    def from_plan(cls, plan: CommPlan, rank: int, devices: list[str], owned: np.ndarray,
                  halo: np.ndarray) -> Exchange:
        """``devices[r]`` is the plan device rank ``r`` runs on; ``owned``/``halo`` are the global
        ids of the rank's table rows. A plan that asks this rank to send a row it never holds is
        refused."""
        if plan.kind != "allgather":
            raise PlanError(f"a halo exchange needs an all-gather plan, not {plan.kind!r}")
        rank_of = {device: r for r, device in enumerate(devices)}
        me = devices[rank]
        incoming = [s.ids for stage in plan.stages for s in stage if s.dst == me and s.ids is not None]
        known = np.concatenate([owned, halo]).astype(np.int64)
        extra = np.setdiff1d(np.concatenate(incoming) if incoming else known[:0], known)
        table = np.concatenate([known, extra])
        order = np.argsort(table, kind="stable")
        held = np.zeros(table.shape[0], dtype=bool)
        held[: owned.shape[0]] = True

        def positions(ids: np.ndarray) -> np.ndarray:
            at = np.searchsorted(table, ids, sorter=order)
            at = order[np.minimum(at, table.shape[0] - 1)]
            if ids.size and not np.array_equal(table[at], ids):
                raise PlanError(f"plan {plan.planner!r} moves rows rank {rank} does not know")
            return at

        stages = []
        for s, stage in enumerate(plan.stages):
            sends, recvs, arrived = [], [], []
            for send in stage:
                if send.ids is None or me not in (send.src, send.dst):
                    continue
                # equal tags between one pair match first-in first-out, and both sides walk the
                # plan in the same order; the priority (G3's bin) tells bins apart when they are
                # sent out of order
                tag = send.priority % TAG_SPAN
                at = positions(np.asarray(send.ids, dtype=np.int64))
                if send.src == me:
                    if not held[at].all():
                        raise PlanError(f"plan {plan.planner!r}: rank {rank} must send rows it does not hold "
                                        f"at stage {s}")
                    sends.append(Message(rank_of[send.dst], tag, torch.from_numpy(at)))
                else:
                    recvs.append(Message(rank_of[send.src], tag, torch.from_numpy(at)))
                    arrived.append(at)
            for at in arrived:
                held[at] = True
            stages.append((sends, recvs))
        return cls(stages, int(table.shape[0]), int(owned.shape[0]), int(halo.shape[0]))


@dataclass
class Communicator:
    """Asynchronous sends and receives with byte accounting and failure naming."""

    world: World
    bytes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    _label: str = "other"

    def count_as(self, label: str) -> None:
        """Charge the bytes sent from now on to ``label`` (``halo_forward``, ``allreduce``, ...)."""
        self._label = label

    def isend(self, tensor: torch.Tensor, peer: int, tag: int):
        self.bytes[self._label] += tensor.numel() * tensor.element_size()
        return dist.isend(tensor, peer, group=self.world.halo_group, tag=tag)

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int):
        return dist.irecv(tensor, peer, group=self.world.halo_group, tag=tag)

    def wait(self, work, peer: int | None = None) -> None:
        try:
            work.wait()
        except Exception as exc:  # noqa: BLE001 - Gloo/NCCL raise RuntimeError subclasses
            raise self.world.explain(exc, waiting_for=peer) from None

    # -- plan execution -----------------------------------------------------------------------

    def gather(self, exchange: Exchange, owned: torch.Tensor, tag_base: int = 0) -> torch.Tensor:
        """Forward: the table's rows after the owned ones (halo, then relayed), filled as the plan says."""
        n, width = exchange.num_owned, owned.shape[1:]
        if exchange.direct:  # send the owned rows from where they are, fill the halo alone
            source, target, start = owned, owned.new_zeros((exchange.num_table_rows - n, *width)), n
        else:  # relayed rows are received and sent again: one table of everything
            source = target = owned.new_zeros((exchange.num_table_rows, *width))
            source[:n], start = owned, 0
        for sends, recvs in exchange.stages:
            self._stage(source, 0, target, start, sends, recvs, tag_base, reverse=False)
        return target if exchange.direct else target[n:]

    def scatter_back(self, exchange: Exchange, grad_halo: torch.Tensor, tag_base: int = 0) -> torch.Tensor:
        """Reverse: send every halo row's gradient back where it came from and add up what comes
        back; returns the gradient of the owned rows."""
        n, width = exchange.num_owned, grad_halo.shape[1:]
        if exchange.direct:
            source, start, target = grad_halo, n, grad_halo.new_zeros((n, *width))
        else:
            source = target = grad_halo.new_zeros((exchange.num_table_rows, *width))
            source[n : n + exchange.num_halo], start = grad_halo, 0
        for sends, recvs in reversed(exchange.stages):
            self._stage(source, start, target, 0, recvs, sends, tag_base, reverse=True)
        return target[:n]

    def _stage(self, source: torch.Tensor, source_start: int, target: torch.Tensor, target_start: int,
               sends: list[Message], recvs: list[Message], tag_base: int, *, reverse: bool) -> None:
        """Send rows ``m.index - source_start`` of ``source`` and receive into rows ``m.index -
        target_start`` of ``target`` (copied forward, added in reverse)."""
        if not sends and not recvs:
            return
        width = source.shape[1:]
        buffers = [target.new_empty((m.index.numel(), *width)) for m in recvs]
        outgoing = [source.index_select(0, (m.index - source_start).to(source.device)) for m in sends]
        if reverse and source is target:  # a row's gradient leaves with it; earlier stages must not see it again
            for m in sends:
                source.index_fill_(0, m.index.to(source.device), 0)
        if self.world.backend == "nccl":  # NCCL matches by order, not tag: post the stage as one group
            ops = [dist.P2POp(dist.irecv, buf, m.peer, self.world.halo_group) for buf, m in zip(buffers, recvs)]
            for rows, m in zip(outgoing, sends):
                self.bytes[self._label] += rows.numel() * rows.element_size()
                ops.append(dist.P2POp(dist.isend, rows, m.peer, self.world.halo_group))
            works = [(work, None) for work in (dist.batch_isend_irecv(ops) if ops else [])]
        else:
            works = [(self.irecv(buf, m.peer, tag_base + m.tag), m.peer) for buf, m in zip(buffers, recvs)]
            works += [(self.isend(rows, m.peer, tag_base + m.tag), m.peer) for rows, m in zip(outgoing, sends)]
        for work, peer in works:
            self.wait(work, peer)
        for buf, m in zip(buffers, recvs):
            index = (m.index - target_start).to(target.device)
            if reverse:
                target.index_add_(0, index, buf)
            else:
                target.index_copy_(0, index, buf)

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
