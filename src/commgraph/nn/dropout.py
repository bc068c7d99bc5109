"""Inverted dropout whose mask is drawn from random bytes on CPU.

``torch.nn.functional.dropout`` draws its mask with ``bernoulli_`` and ``uniform_`` draws a float
an entry from torch's Mersenne twister; on CPU either is as slow as the layer's own matrix product
(a sampled GraphSAGE layer 0 on a products-sized batch, 66k x 256 entries: ``uniform_`` about as
long as its 66k x 200 x 256 product). :func:`keep_mask` draws a byte an entry (two where ``1 - p``
is not a multiple of 1/256) from numpy's SFC64 generator, seeded by one draw of torch's default
generator, so ``torch.manual_seed`` decides the mask, and keeps an entry whose draw falls below
``(1 - p)`` times the draws' range: a Bernoulli(1 - p) mask, ``1 - p`` rounded to a multiple of
1/65536 where it is not one of 1/256. A mask is a function of the seed and the shape only, so a
layer drawn a chunk of rows at a time slices one mask drawn for all its rows. On GPUs torch's fused
kernel is used as is.

:func:`relu_dropout` is ReLU followed by that dropout as one autograd step: the composition keeps
the ReLU's output and a float mask for its backward pass (8 bytes an entry beside the output),
this keeps one byte an entry. A sampled GraphSAGE layer 0 on a products-sized batch (164k x 256)
keeps 170 MB less; the values and gradients are the composition's, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Zero each entry with probability ``p`` and scale the rest by ``1 / (1 - p)``, in training."""
    if not training or p == 0:
        return x
    if x.device.type != "cpu":
        return torch.nn.functional.dropout(x, p, True)
    return x * keep_scale(x.shape, p, x.dtype)


def keep_mask(shape: tuple[int, ...] | torch.Size, p: float) -> torch.Tensor:
    """A CPU bool tensor of ``shape``: each entry kept (True) with probability ``1 - p`` (``0 < p <
    1``), independently, drawn as the module's description says from one draw of torch's default
    generator."""
    keep = 1.0 - p
    dtype, levels = (np.uint8, 256) if float(keep * 256).is_integer() else (np.uint16, 65536)
    seed = int(torch.randint(0, 2**62, (1,), dtype=torch.int64))
    count = math.prod(shape)
    draws = np.frombuffer(np.random.Generator(np.random.SFC64(seed)).bytes(count * np.dtype(dtype).itemsize), dtype)
    return torch.from_numpy(draws < round(keep * levels)).reshape(tuple(shape))


def keep_scale(shape: tuple[int, ...] | torch.Size, p: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Inverted dropout's multiplier of ``shape``: ``1 / (1 - p)`` where :func:`keep_mask` keeps an
    entry, else 0."""
    return mask_scale(keep_mask(shape, p), p, dtype)


def mask_scale(mask: torch.Tensor, p: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A :func:`keep_mask` (or a slice of one) as inverted dropout's multiplier: ``1 / (1 - p)``
    where it is True, else 0."""
    return mask.to(dtype).div_(1.0 - p)


def relu_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``dropout(relu(x), p, training)``, the same values and gradients, keeping a one-byte mask
    for the backward pass instead of the ReLU's output and a float mask (CPU, training, ``p > 0``;
    elsewhere the composition itself)."""
    if not training or p == 0 or x.device.type != "cpu" or not x.requires_grad:
        return dropout(torch.relu(x), p, training)
    return _ReluDropout.apply(x, p)


class _ReluDropout(torch.autograd.Function):
    """ReLU then inverted dropout: the mask is drawn as :func:`dropout` draws it (one
    :func:`keep_mask` of ``x``'s shape), so a seed gives the same mask either way."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        scale = keep_scale(x.shape, p, x.dtype)  # dropout's mask: 0 or 1 / (1 - p)
        out = torch.relu(x).mul_(scale)
        ctx.save_for_backward(out.ne(0))  # kept by dropout and positive: what the gradient passes through
        ctx.scale = float(scale.max()) if scale.numel() else 0.0
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (passed,) = ctx.saved_tensors
        return grad * passed * ctx.scale, None
