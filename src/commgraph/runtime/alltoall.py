"""All-to-all by matchings (thesis-dgs-g3-hermod-leo, §5.3.2): the send-count matrix, known to every
rank, is decomposed into matchings (:mod:`commgraph.plan.matching`, ``bvn`` or ``alg3``); in each
sub-phase a rank sends one piece to at most one rank and receives one piece from at most one, with
point-to-point operations, so no receiver sees incast. The result is exactly
``torch.distributed.all_to_all_single``'s.

Shapes: ``input`` is ``(sum_j counts[rank, j], ...)`` rows, the block for rank j in rank order;
``output`` is ``(sum_i counts[i, rank], ...)`` rows, the block from rank i in rank order.
"""

from __future__ import annotations

import numpy as np
import torch

from commgraph.errors import PlanError
from commgraph.plan.matching import MATCHERS, Matchings
from commgraph.runtime.comm import Communicator

TAG_BASE = 1 << 20  # apart from the all-gather executor's message tags


def gather_counts(comm: Communicator, input_split_sizes: list[int]) -> np.ndarray:
    """The full send-count matrix from every rank's row (one small all-gather)."""
    return np.array(comm.all_gather_object([int(c) for c in input_split_sizes]), dtype=np.int64)


class MatchingAllToAll:
    """``all_to_all_single`` sent as matching sub-phases; ``method`` is ``bvn`` or ``alg3``."""

    def __init__(self, comm: Communicator, method: str = "bvn"):
        if method not in MATCHERS:
            raise PlanError(f"unknown matching {method!r}; choose one of {', '.join(MATCHERS)}")
        self.comm, self.method = comm, method

    def plan(self, counts: np.ndarray) -> Matchings:
        counts = np.asarray(counts)
        size = self.comm.world.size
        if counts.shape != (size, size) or (counts < 0).any():
            raise PlanError(f"the send-count matrix must be {size} x {size} and non-negative, got shape {counts.shape}")
        off_diagonal = counts.astype(np.float64)
        np.fill_diagonal(off_diagonal, 0.0)  # a rank's block for itself is copied, not sent
        return MATCHERS[self.method](off_diagonal)

    def __call__(
        self, output: torch.Tensor, input: torch.Tensor, counts: np.ndarray, label: str = "alltoall"
    ) -> torch.Tensor:
        """Fill ``output`` from every rank's ``input`` as ``counts`` says; returns ``output``. The
        bytes sent count as ``label``."""
        rank = self.comm.world.rank
        counts = np.asarray(counts, dtype=np.int64)
        plan = self.plan(counts)
        if input.shape[0] != counts[rank].sum() or output.shape[0] != counts[:, rank].sum():
            raise PlanError(
                f"rank {rank}: input has {input.shape[0]} rows and output {output.shape[0]}, "
                f"the counts say {counts[rank].sum()} and {counts[:, rank].sum()}"
            )
        send_at = np.concatenate([[0], np.cumsum(counts[rank])])  # where my block for j starts
        recv_at = np.concatenate([[0], np.cumsum(counts[:, rank])])  # where i's block for me starts
        output[recv_at[rank] : recv_at[rank + 1]] = input[send_at[rank] : send_at[rank + 1]]
        sent = np.zeros(counts.shape[0], dtype=np.int64)
        received = np.zeros(counts.shape[0], dtype=np.int64)
        self.comm.count_as(label)
        for phase, (rows, cols, amounts) in enumerate(zip(plan.rows, plan.cols, plan.sent)):
            works = []
            rows_amount = np.rint(amounts).astype(np.int64)
            for src, dst, n in zip(rows.tolist(), cols.tolist(), rows_amount.tolist()):
                if n == 0 or rank not in (src, dst):
                    continue
                if src == rank:
                    start = send_at[dst] + sent[dst]
                    works.append((self.comm.isend(input[start : start + n].contiguous(), dst, TAG_BASE + phase), dst))
                    sent[dst] += n
                else:
                    start = recv_at[src] + received[src]
                    piece = output[start : start + n]
                    buffer = piece if piece.is_contiguous() else torch.empty_like(piece)
                    works.append((self.comm.irecv(buffer, src, TAG_BASE + phase), src, piece, buffer))
                    received[src] += n
            for work in works:
                self.comm.wait(work[0], peer=work[1], what=f"all-to-all phase {phase}")
                if len(work) == 4 and work[3] is not work[2]:
                    work[2].copy_(work[3])
        return output
