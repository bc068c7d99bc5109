"""GAT layer (multi-head attention) on a block (PyG's ``GATConv``, bipartite form)."""

from __future__ import annotations

import torch
from torch_geometric.nn import GATConv

from commgraph.nn.block import Block


class GATLayer(torch.nn.Module):
    """Attention over each destination's in-edges plus a self loop, as ``GATConv`` does on the whole
    graph; heads are concatenated except in the output layer, where they are averaged. GAT
    transforms its sources before attending, so it reads only the table rows the block uses."""

    def __init__(self, in_dim: int, out_dim: int, heads: int, concat: bool):
        super().__init__()
        self.conv = GATConv(in_dim, out_dim, heads=heads, concat=concat, add_self_loops=False)

    def forward(self, x_src: torch.Tensor, x_dst: torch.Tensor, block: Block) -> torch.Tensor:
        sources, edge_index = block.compact()
        return self.conv((x_src.index_select(0, sources), x_dst), edge_index,
                         size=(sources.numel(), block.num_dst))
