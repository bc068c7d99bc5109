"""GraphSAGE layer with mean aggregation on a block (PyG's ``SAGEConv``, bipartite form)."""

from __future__ import annotations

import torch
from torch_geometric.nn import SAGEConv

from commgraph.nn.block import Block


class SAGELayer(torch.nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.conv = SAGEConv(in_dim, out_dim, aggr="mean")

    def forward(self, x_src: torch.Tensor, x_dst: torch.Tensor, block: Block) -> torch.Tensor:
        return self.conv((x_src, x_dst), block.adj_t())
