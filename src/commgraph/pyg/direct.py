"""PyTorch-Direct's two-line promise for a user's own tensors: :func:`unified`.

PyTorch-Direct (Min et al., "Large Graph Convolutional Network Training with GPU-Oriented Data
Communication Architecture", VLDB 2021) asks at most two changed lines of a PyTorch script per
tensor: place the table as a *unified tensor*, then index it as before. Here the first line is
``x = cg.unified(data.x)``; ``x[index]`` then returns the rows on this rank's GPU, gathered by GPU
threads straight from pinned host memory where that wins
(:class:`~commgraph.runtime.features.FeatureStore`, the same store ``train --features host`` uses).
On a CPU rank there is nothing to move: :func:`unified` returns the tensor itself.
"""

from __future__ import annotations

import numpy as np
import torch

from commgraph.errors import BridgeError
from commgraph.pyg.world import session


class UnifiedTensor:
    """A ``[rows, width]`` table in host memory whose rows, indexed, arrive on a GPU.

    Attributes:
        store: the feature store holding the table.
    """

    def __init__(self, store):
        self.store = store

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.store.num_rows, self.store.width))

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def __len__(self) -> int:
        return self.store.num_rows

    @property
    def device(self) -> torch.device:
        """Where indexed rows arrive."""
        return self.store.device

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def __getitem__(self, index) -> torch.Tensor:
        """Rows ``index`` (integer ids or a boolean mask, on any device) on the GPU."""
        if isinstance(index, torch.Tensor) and index.dtype == torch.bool:
            index = index.nonzero().view(-1)
        if not isinstance(index, torch.Tensor):
            index = torch.as_tensor(index)
        return self.store.gather(index.reshape(-1))

    def __repr__(self) -> str:
        return f"UnifiedTensor(shape={list(self.shape)}, {self.store.describe()})"


def unified(x: torch.Tensor, *, device: torch.device | str | None = None) -> torch.Tensor | UnifiedTensor:
    """``x`` as a table the GPU reads directly, indexed as before.

    Args:
        x: a 2-D real table on the CPU (node features).
        device: the GPU the rows go to (default: this rank's device).

    Returns:
        On a GPU: a :class:`UnifiedTensor`, whose ``x[index]`` is a float32 ``[n, width]`` tensor
        on the GPU. On a CPU device: ``x`` itself, a plain tensor.

    Raises:
        BridgeError: ``x`` is not a 2-D tensor on the CPU.
    """
    from commgraph.runtime.features import FeatureStore

    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise BridgeError(f"cg.unified takes a 2-D tensor (rows, width), got {getattr(x, 'shape', type(x).__name__)}")
    target = torch.device(device) if device is not None else session().world.device
    if target.type != "cuda":
        return x
    if x.device.type != "cpu":
        raise BridgeError(f"cg.unified places a host table; x is already on {x.device}: pass the CPU tensor")
    return UnifiedTensor(FeatureStore.create(np.asarray(x.detach().numpy()), target, "host"))
