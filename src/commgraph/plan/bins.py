"""Splitting an all-gather plan into G3's pipeline bins.

G3 (thesis chapter 4.4) streams a layer's exchange bin by bin: the moment a worker has computed a
bin of its boundary rows, those rows leave. For that, every send of a plan is split by the bin its
rows belong to on their owner, and each piece carries that bin. A relayed send (SPST's second
stage) is split the same way, so a relay forwards bin ``b`` as soon as bin ``b`` has reached it.
The split is pure: given the same plan and the same bins, every worker derives the same sends in
the same order, which is what lets engines that match messages by issue order (NCCL) run it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from commgraph.errors import PlanError
from commgraph.plan.model import CommPlan


@dataclass(frozen=True)
class RowBins:
    """The bin of every row some owner sends: ``ids`` sorted global ids, ``bins`` their bins."""

    ids: np.ndarray
    bins: np.ndarray

    @classmethod
    def concat(cls, pieces: list[tuple[np.ndarray, np.ndarray]]) -> RowBins:
        """From each owner's (ids, bins) of its sent rows; a row owned twice is refused."""
        ids = np.concatenate([np.asarray(i, dtype=np.int64) for i, _ in pieces]) if pieces else np.empty(0, np.int64)
        bins = np.concatenate([np.asarray(b, dtype=np.int64) for _, b in pieces]) if pieces else np.empty(0, np.int64)
        order = np.argsort(ids, kind="stable")
        ids, bins = ids[order], bins[order]
        if ids.size > 1 and bool((ids[1:] == ids[:-1]).any()):
            raise PlanError("two workers claim to own the same row; the partition set is inconsistent")
        return cls(ids, bins)

    def of(self, ids: np.ndarray) -> np.ndarray:
        """The bin of each row of ``ids``; a row no owner listed is refused (:class:`PlanError`)."""
        at = np.minimum(np.searchsorted(self.ids, ids), max(self.ids.size - 1, 0))
        if ids.size and (self.ids.size == 0 or not np.array_equal(self.ids[at], ids)):
            raise PlanError("the plan sends rows that no worker's bins cover; was it made for this partition set?")
        return self.bins[at]


def split_by_bins(plan: CommPlan, rows: RowBins) -> CommPlan:
    """The same plan with every row-carrying send split into one send per bin of its rows (in bin
    order, rows in the send's order); sends of opaque bytes are kept as they are."""
    if plan.kind != "allgather":
        raise PlanError(f"only all-gather plans are split into bins, not {plan.kind!r}")
    split = CommPlan(
        plan.kind, plan.planner, plan.topology, row_bytes=plan.row_bytes, notes={**plan.notes, "bins": True}
    )
    for stage in plan.stages:
        sends = []
        for send in stage:
            if send.ids is None or send.ids.size == 0:
                sends.append(send)
                continue
            ids = np.asarray(send.ids, dtype=np.int64)
            bins = rows.of(ids)
            order = np.argsort(bins, kind="stable")
            values, starts = np.unique(bins[order], return_index=True)
            per_row = send.nbytes / ids.size
            for b, piece in zip(values, np.split(ids[order], starts[1:])):
                sends.append(replace(send, ids=piece, nbytes=float(piece.size * per_row), bin=int(b)))
        split.stages.append(sends)
    return split
