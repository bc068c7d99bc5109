"""Rows computed by their owners and sent to their readers, with the gradients coming back.

``--first-layer owner`` (P3, Gandhi and Iyer, OSDI'21): for a first layer that transforms each
source row before aggregating, the owner of a remote input row sends the transformed row, hidden
wide, instead of the feature row. :func:`rows_to_readers` is that exchange as an autograd op: its
forward is the runtime's matching all-to-all of the owners' rows (counted as ``activations``), its
backward the same all-to-all reversed, which brings each reader's gradient of the rows it received
back to the row's owner (counted as ``activation_grads``). The owner's backward then carries the
gradient on into its own copy of the weights, so the weight gradient of a row transformed by its
owner is accumulated on the owner, exactly once, and the job's gradient all-reduce sums it with
everyone else's.

It is a collective: every worker calls it at every step, and every worker's backward must reach it
(:func:`settle` for a worker whose step computes nothing).
"""

from __future__ import annotations

import numpy as np
import torch

from commgraph.runtime.alltoall import MatchingAllToAll

FORWARD_LABEL, BACKWARD_LABEL = "activations", "activation_grads"


class _RowsToReaders(torch.autograd.Function):
    @staticmethod
    def forward(ctx, served: torch.Tensor, alltoall: MatchingAllToAll, counts: np.ndarray) -> torch.Tensor:
        ctx.alltoall, ctx.counts = alltoall, counts
        rank = alltoall.comm.world.rank
        received = served.new_empty((int(counts[:, rank].sum()), served.shape[1]))
        return alltoall(received, served.detach().contiguous(), counts, label=FORWARD_LABEL)

    @staticmethod
    def backward(ctx, grad_received: torch.Tensor):
        counts, rank = ctx.counts.T, ctx.alltoall.comm.world.rank
        grad_served = grad_received.new_empty((int(counts[:, rank].sum()), grad_received.shape[1]))
        ctx.alltoall(grad_served, grad_received.contiguous(), counts, label=BACKWARD_LABEL)
        return grad_served, None, None


def rows_to_readers(served: torch.Tensor, alltoall: MatchingAllToAll, counts: np.ndarray) -> torch.Tensor:
    """The rows this worker's readers asked of it (``served``, the block for rank ``j`` in rank
    order, ``counts[rank, j]`` rows) sent to them, and the rows it asked of its owners received
    (the block from rank ``i`` in rank order, ``counts[i, rank]`` rows); differentiable with
    respect to ``served``."""
    return _RowsToReaders.apply(served, alltoall, np.asarray(counts, dtype=np.int64))


def settle(received: torch.Tensor) -> None:
    """The backward exchange for a worker whose step used none of the rows it received (it had
    no batch): a zero gradient goes back, so its owners' backward passes, waiting for the
    all-to-all, complete, and its own served rows get their readers' gradients."""
    if received.requires_grad:
        torch.autograd.backward(received, torch.zeros_like(received))
