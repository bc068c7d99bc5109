"""Inverted dropout that draws its mask at ``uniform_``'s speed on CPU.

``torch.nn.functional.dropout`` draws its mask with ``bernoulli_``, which on CPU runs on one thread
at about a third of ``uniform_``'s speed: on a 200,000 x 128 activation it was a quarter of a whole
GraphSAGE training step. Keeping the entries whose uniform draw falls below ``1 - p`` is the same
Bernoulli(1 - p) mask; forward and backward together take half of ``F.dropout``'s time there. On GPUs
torch's fused kernel is used as is.
"""

from __future__ import annotations

import torch


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Zero each entry with probability ``p`` and scale the rest by ``1 / (1 - p)``, in training."""
    if not training or p == 0:
        return x
    if x.device.type != "cpu":
        return torch.nn.functional.dropout(x, p, True)
    keep = 1.0 - p
    return x * torch.empty_like(x).uniform_().lt_(keep).div_(keep)
