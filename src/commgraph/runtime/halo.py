"""Layer-wise execution of an all-gather plan: the whole exchange at once, as one bin.

``gather_halo`` fills a table's halo rows; ``halo_exchange`` does it as an autograd op whose
backward sends the halo rows' gradients back to their owners, which add them up; ``halo_table``
is that op returning the whole table (owned rows, then halo rows) in one tensor. The pipelined
(G3) trainer streams the same exchange bin by bin through :class:`~commgraph.runtime.stream.HaloStream`.
"""

from __future__ import annotations

import numpy as np
import torch

from commgraph.plan.exchange import Exchange
from commgraph.runtime.comm import Communicator
from commgraph.runtime.stream import ExchangeRunner, GradientReturn


def layerwise(comm: Communicator, exchange: Exchange, device, ordering: str) -> ExchangeRunner:
    """The exchange as one bin of every owned row."""
    return ExchangeRunner(comm, exchange, np.array([0, exchange.num_owned]), device, ordering)


def gather_halo(
    runner: ExchangeRunner,
    owned: torch.Tensor,
    layer: int,
    columns=None,
    table: torch.Tensor | None = None,
    label: str | None = None,
) -> torch.Tensor:
    """The halo rows, filled from their owners as the plan says (no autograd), received in place
    and sent one message at a time (see :class:`~commgraph.runtime.stream.HaloStream`). With ``columns``
    (one entry per rank: a tensor of column indices, or None for whole rows) each rank's rows
    arrive cut to its own entry's columns, in that order. Given ``table`` (owned rows, then halo
    rows) they land in its halo rows in place and ``table`` is returned: no second copy of them.
    The bytes count as ``label`` (default: the stream's, by layer)."""
    mine = None if columns is None else columns[runner.comm.world.rank]
    width = owned.shape[1] if mine is None else int(mine.numel())
    exchange = runner.exchange
    if table is None:
        table = owned.new_empty((exchange.num_halo, width))
    # the exchange's halo rows follow its own owned rows; the table's follow the table's
    into = (table, exchange.num_owned - (table.shape[0] - exchange.num_halo))
    stream = runner.forward(layer, width, owned.dtype, columns, label, into=into, serial=True)
    stream.bin_done(0, owned.detach())
    stream.finish()
    stream.close()
    return table


def scatter_back(
    runner: ExchangeRunner, grad_halo: torch.Tensor, layer: int, label: str = "halo_backward"
) -> torch.Tensor:
    """Every halo row's gradient back to its owner (the bytes counted as ``label``); returns the
    gradient of the owned rows."""
    grads = GradientReturn(runner, layer, label)
    grads.start(grad_halo)
    owned = grads.add_to_bin(0, grad_halo.new_zeros((runner.exchange.num_owned, grad_halo.shape[1])))
    grads.finish()
    return owned


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, owned: torch.Tensor, runner: ExchangeRunner, layer: int, labels):
        ctx.runner, ctx.layer, ctx.labels = runner, layer, labels
        return gather_halo(runner, owned, layer, label=labels[0])

    @staticmethod
    def backward(ctx, grad_halo: torch.Tensor):
        return scatter_back(ctx.runner, grad_halo.contiguous(), ctx.layer, ctx.labels[1]), None, None, None


def halo_exchange(
    owned: torch.Tensor, runner: ExchangeRunner, layer: int, labels: tuple[str | None, str] = (None, "halo_backward")
) -> torch.Tensor:
    """Halo rows of ``owned`` for ``layer`` as the plan fills them, differentiable with respect
    to ``owned``; the bytes count as ``labels`` (forward: default by layer; backward)."""
    return _Gather.apply(owned, runner, layer, labels)


class _Table(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, runner: ExchangeRunner, num_owned: int, layer: int, labels):
        ctx.runner, ctx.num_owned, ctx.layer, ctx.labels, ctx.rows = runner, num_owned, layer, labels, x.shape[0]
        owned = x[:num_owned].contiguous()
        table = x.new_empty((num_owned + runner.exchange.num_halo, x.shape[1]))
        table[:num_owned] = owned
        return gather_halo(runner, owned, layer, table=table, label=labels[0])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grads = GradientReturn(ctx.runner, ctx.layer, ctx.labels[1])
        grads.start(grad[ctx.num_owned :].contiguous())
        owned = grads.add_to_bin(0, grad[: ctx.num_owned])
        grads.finish()
        if ctx.rows > ctx.num_owned:  # the rows of x past the owned ones were replaced: no gradient
            owned = torch.cat([owned, owned.new_zeros((ctx.rows - ctx.num_owned, owned.shape[1]))])
        return owned, None, None, None, None


def halo_table(
    x: torch.Tensor,
    runner: ExchangeRunner,
    num_owned: int,
    layer: int,
    labels: tuple[str | None, str] = (None, "halo_backward"),
) -> torch.Tensor:
    """The table of ``layer``: the first ``num_owned`` rows of ``x`` (the exchange's owned rows;
    any rows after them are not read), then the halo rows their owners send, received in place
    into one tensor. Differentiable with respect to ``x``: the halo rows' gradients go back to
    their owners and arrive added to the owned rows' own, with no table-sized zero gradient. The
    bytes count as ``labels`` (forward: default by layer; backward).

    Shapes:
        - **x:** ``[num_owned (+ anything), F]`` → ``[num_owned + num_halo, F]``
    """
    return _Table.apply(x, runner, num_owned, layer, labels)
