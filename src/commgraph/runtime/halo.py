"""The autograd halo exchange: forward fills a part's halo rows from their owners; backward sends
the halo rows' gradients back to the owners, which add them to their own rows' gradients. It runs a
whole ``Exchange`` at once (layer-wise); the pipelined trainer streams the same messages bin by bin
with tensor hooks instead (``commgraph.train.executor``).
"""

from __future__ import annotations

import torch

from commgraph.runtime.comm import Communicator, Exchange


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, owned: torch.Tensor, comm: Communicator, exchange: Exchange, tags: tuple[int, int]):
        ctx.comm, ctx.exchange, ctx.tags = comm, exchange, tags
        return comm.gather(exchange, owned.detach(), tags[0])[: exchange.num_halo]

    @staticmethod
    def backward(ctx, grad_halo: torch.Tensor):
        ctx.comm.count_as("halo_backward")
        return ctx.comm.scatter_back(ctx.exchange, grad_halo, ctx.tags[1]), None, None, None


def halo_exchange(owned: torch.Tensor, comm: Communicator, exchange: Exchange, tags: tuple[int, int]) -> torch.Tensor:
    """Halo rows of ``owned`` as the plan fills them, differentiable with respect to ``owned``.
    ``tags`` are the tag bases of the forward and the backward exchange."""
    return _Gather.apply(owned, comm, exchange, tags)

