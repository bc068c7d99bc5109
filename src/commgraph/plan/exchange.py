"""``Exchange``: one rank's share of an all-gather ``CommPlan``, as table positions and a dataflow.

A rank keeps an *extended table*: its owned rows, then its halo rows, then the rows that only pass
through it (relayed by an SPST plan). Every send of the plan that involves the rank becomes a
``Message`` on one side: the rows it reads (a send) or fills (a receive), the peer, the bin (the
send's identity in the plan), and its place in the sequence of messages between the two ranks.

The plan's stages become data dependencies: a send that forwards rows this rank received waits for
exactly those receives (``relays``), not for a whole stage, so the same exchange can run layer-wise
(everything at once) or streamed bin by bin (:mod:`commgraph.runtime.stream`).

Devices that no rank runs on are host memory (a ``swap`` plan: GPU -> host -> GPU). A send into one
is a copy to the sending rank's host memory; a later send out of it is executed by the rank that
put the rows there, marked ``staged`` (its rows are copied to host memory first).

Message matching comes in two orderings. ``tagged``: every message carries a tag from its identity
and its place in its pair's sequence, so messages may be posted in any order (Gloo). ``ordered``:
one tag per (layer, direction), and both sides post a pair's messages in plan order; that is how
engines without tags (NCCL) match them, and on Gloo it exercises the same discipline.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from commgraph.errors import PlanError
from commgraph.plan.model import CommPlan

ORDERINGS = ("tagged", "ordered")
TAG_SPAN = 1 << 16  # one (layer, direction) uses tags [k * TAG_SPAN, (k + 1) * TAG_SPAN)
DIRECTIONS = ("forward", "backward")


@dataclass(frozen=True)
class MessageId:
    """Which exchange a message belongs to. Layer 0 is the input features; layer ``l > 0`` is the
    output of GNN layer ``l - 1``."""

    layer: int
    direction: str
    bin: int = 0

    def tag(self, order: int, ordering: str) -> int:
        """The message's tag: one per (layer, direction) when ``ordered``, else offset by its ``order``."""
        base = (2 * self.layer + DIRECTIONS.index(self.direction)) * TAG_SPAN
        return base if ordering == "ordered" else base + order

    def __str__(self) -> str:
        return f"layer {self.layer} {self.direction}, bin {self.bin}"


@dataclass
class Message:
    """One send or receive of an exchange: the peer rank, the bin, its place among the pair's
    messages, and the extended-table rows it reads or fills."""

    peer: int
    bin: int
    order: int  # place among the messages between this pair, in this direction, in plan order
    index: np.ndarray  # extended-table rows: read by a send, filled by a receive (the plan's row order)
    stage: int
    relays: tuple[int, ...] = ()  # a send's receives (numbers) whose rows it forwards
    staged: bool = False  # a send whose rows go through host memory first


@dataclass
class Exchange:
    """What one rank sends and receives for one all-gather."""

    sends: list[Message]
    recvs: list[Message]
    num_owned: int
    num_halo: int
    num_extra: int  # rows only relayed through this rank
    staged_rows: int = 0  # rows this rank copies into host memory (swap plans), counted as sent
    halo_source: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # receive of each halo row

    @property
    def num_rows(self) -> int:
        """Rows of the extended table: owned, then halo, then relayed."""
        return self.num_owned + self.num_halo + self.num_extra

    @cached_property
    def idle(self) -> bool:
        """Nothing to send or receive (one worker, or a part nobody reads from and that needs nothing)."""
        return not self.sends and not self.recvs

    def sent_rows(self) -> int:
        """Rows this rank sends in one execution of the plan, host copies included."""
        return int(sum(m.index.size for m in self.sends)) + self.staged_rows

    def receives_for(self, halo_rows: np.ndarray) -> list[int]:
        """The receives that deliver the given halo rows (counted from 0 within the halo)."""
        return np.unique(self.halo_source[halo_rows]).tolist()

    @classmethod
    def from_plan(cls, plan: CommPlan, rank: int, devices: list[str], owned: np.ndarray, halo: np.ndarray) -> Exchange:
        """``devices[r]`` is the plan device rank ``r`` runs on; ``owned`` and ``halo`` are the
        global ids of the rank's table rows. A plan that makes the rank send rows it does not
        hold, deliver a row twice or leave a halo row empty is refused."""
        if plan.kind != "allgather":
            raise PlanError(f"a halo exchange needs an all-gather plan, not {plan.kind!r}")
        if len(set(devices)) != len(devices):
            raise PlanError(f"two ranks run on one device: {devices}")
        return _Builder(plan, rank, devices, np.asarray(owned, np.int64), np.asarray(halo, np.int64)).build()


class _Builder:
    def __init__(self, plan: CommPlan, rank: int, devices: list[str], owned: np.ndarray, halo: np.ndarray):
        self.plan, self.rank, self.devices = plan, rank, devices
        self.rank_of = {device: r for r, device in enumerate(devices)}
        me = devices[rank]
        known = np.concatenate([owned, halo])
        delivered = [
            np.asarray(s.ids, np.int64) for stage in plan.stages for s in stage if s.ids is not None and s.dst == me
        ]
        extra = np.setdiff1d(np.concatenate(delivered), known) if delivered else known[:0]
        self.table = np.concatenate([known, extra])
        self.sorter = np.argsort(self.table, kind="stable")
        self.num_owned, self.num_halo, self.num_extra = owned.size, halo.size, extra.size
        self.held = np.zeros(self.table.size, dtype=bool)
        self.held[: owned.size] = True
        self.filled_by = np.full(self.table.size, -1, dtype=np.int64)
        self.hosted: dict[str, list[tuple[int, np.ndarray]]] = defaultdict(list)  # rows waiting in host memory
        self.next_order: dict[tuple[int, int], int] = defaultdict(int)
        self.sends: list[Message] = []
        self.recvs: list[Message] = []
        self.staged_rows = 0

    def positions(self, ids: np.ndarray) -> np.ndarray:
        at = self.sorter[np.minimum(np.searchsorted(self.table, ids, sorter=self.sorter), self.table.size - 1)]
        if ids.size and (self.table.size == 0 or not np.array_equal(self.table[at], ids)):
            raise PlanError(
                f"plan {self.plan.planner!r} moves rows rank {self.rank} does not know; "
                "was it made for this partition set?"
            )
        return at

    def build(self) -> Exchange:
        for s, stage in enumerate(self.plan.stages):
            arrived = []
            for send in stage:
                if send.ids is None:
                    raise PlanError(
                        f"plan {self.plan.planner!r} has a send of bare bytes ({send.src} -> {send.dst}); "
                        "an all-gather executes sends of rows"
                    )
                for src, ids, staged in self._pieces(send):
                    arrived += self._message(s, send.bin, src, self.rank_of[send.dst], ids, staged)
            for at, j in arrived:
                self.held[at] = True
                self.filled_by[at] = j
        n_known = self.num_owned + self.num_halo
        if not self.held[:n_known].all():
            missing = int((~self.held[:n_known]).sum())
            raise PlanError(
                f"plan {self.plan.planner!r} leaves {missing} halo row(s) of rank {self.rank} empty; "
                "it was made for another partition set or placement"
            )
        return Exchange(
            self.sends,
            self.recvs,
            self.num_owned,
            self.num_halo,
            self.num_extra,
            self.staged_rows,
            self.filled_by[self.num_owned : n_known].copy(),
        )

    def _pieces(self, send) -> list[tuple[int, np.ndarray, bool]]:
        """(sending rank, rows, staged) of a send whose destination is a rank; sends into host
        memory are recorded and produce no message."""
        ids = np.asarray(send.ids, dtype=np.int64)
        src = self.rank_of.get(send.src)
        pieces = [(src, ids, False)] if src is not None else self._from_host(send.src, ids)
        if send.dst not in self.rank_of:
            for holder, rows, _ in pieces:
                self.hosted[send.dst].append((holder, np.sort(rows)))
                self.staged_rows += rows.size if holder == self.rank else 0
            return []
        return pieces

    def _from_host(self, host: str, ids: np.ndarray) -> list[tuple[int, np.ndarray, bool]]:
        """Rows read from host memory, grouped by the rank that put them there (lowest rank first
        when two did)."""
        entries = sorted(self.hosted.get(host, []), key=lambda e: e[0])
        holder = np.full(ids.size, -1, dtype=np.int64)
        for rank, rows in reversed(entries):
            at = np.minimum(np.searchsorted(rows, ids), max(rows.size - 1, 0))
            holder[(rows.size > 0) & (rows[at] == ids)] = rank
        if (holder < 0).any():
            raise PlanError(f"plan {self.plan.planner!r} reads rows from {host} that never reached it")
        return [(int(r), ids[holder == r], True) for r in np.unique(holder)]

    def _message(
        self, stage: int, bin_: int, src: int, dst: int, ids: np.ndarray, staged: bool
    ) -> list[tuple[np.ndarray, int]]:
        if src == dst or ids.size == 0:
            return []
        order = self.next_order[(src, dst)]
        self.next_order[(src, dst)] += 1
        if src == self.rank:
            at = self.positions(ids)
            if not self.held[at].all():
                raise PlanError(
                    f"plan {self.plan.planner!r}: rank {self.rank} must send rows it does not hold at stage {stage}"
                )
            relays = np.unique(self.filled_by[at][self.filled_by[at] >= 0])
            self.sends.append(Message(dst, bin_, order, at, stage, tuple(int(j) for j in relays), staged))
            return []
        if dst == self.rank:
            at = self.positions(ids)
            if self.held[at].any():
                raise PlanError(
                    f"plan {self.plan.planner!r} delivers rows rank {self.rank} already holds at stage {stage}"
                )
            self.recvs.append(Message(src, bin_, order, at, stage))
            return [(at, len(self.recvs) - 1)]
        return []
