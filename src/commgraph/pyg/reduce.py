"""Losses and metrics over every rank's rows: :func:`global_mean`, :func:`global_sum`.

A rank holds the rows of the nodes it owns. The one-process script's loss is a mean over every
node of a mask; :func:`global_mean` gives that value on every rank, with a gradient that, once the
ranks' parameter gradients are averaged (:func:`~commgraph.pyg.full_graph`, or
``DistributedDataParallel``), is the one-process gradient: rank :math:`r`'s surrogate is
:math:`\\frac{R}{N} \\sum_{i \\in r} \\ell_i`, whose average over the :math:`R` ranks is
:math:`\\frac{1}{N} \\sum_i \\ell_i`.
"""

from __future__ import annotations

import torch

from commgraph.pyg.world import session


def global_sum(values: torch.Tensor) -> torch.Tensor:
    """The sum of ``values`` over every rank (a 0-dim tensor, no gradient)."""
    s = session()
    total = s.comm.global_sum([float(values.detach().sum())])[0]
    return torch.tensor(total, dtype=values.dtype if values.is_floating_point() else torch.float64)


def global_mean(values: torch.Tensor) -> torch.Tensor:
    """The mean of ``values`` (one entry per row this rank owns: a loss with ``reduction="none"``, a
    correctness indicator) over every rank's entries.

    Args:
        values: this rank's entries, any shape (flattened).

    Returns:
        torch.Tensor: a 0-dim tensor, the same value on every rank; differentiable (see the module
        description: its gradient is meant for gradients averaged over ranks).

    Shapes:
        - **values:** ``[n_r]`` or ``[n_r, ...]``
    """
    s = session()
    local = values.reshape(-1)
    if not local.is_floating_point():
        local = local.to(torch.float32)
    total, count = s.comm.global_sum([float(local.detach().sum()), float(local.numel())])
    if count == 0:
        return local.sum() * 0.0
    surrogate = local.sum() * (s.world.size / count)
    if not local.requires_grad:
        return torch.tensor(total / count, dtype=local.dtype, device=local.device)
    return surrogate + (total / count - surrogate).detach()
