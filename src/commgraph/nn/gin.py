"""GIN layer (Xu et al.) on a block: ``MLP((1 + eps) x_i + sum_j x_j)`` with PyG's ``GINConv``."""

from __future__ import annotations

import torch
from torch_geometric.nn import GINConv

from commgraph.nn.block import Block


class GINLayer(torch.nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        mlp = torch.nn.Sequential(torch.nn.Linear(in_dim, out_dim), torch.nn.ReLU(), torch.nn.Linear(out_dim, out_dim))
        self.conv = GINConv(mlp)

    def forward(self, x_src: torch.Tensor, x_dst: torch.Tensor, block: Block) -> torch.Tensor:
        return self.conv((x_src, x_dst), block.adj_t())
