"""GCN layer (Kipf & Welling) on a block, normalised with global degrees."""

from __future__ import annotations

import torch
from torch_geometric.nn import GCNConv

from commgraph.nn.block import Block


class GCNLayer(torch.nn.Module):
    """``D^-1/2 (A + I) D^-1/2 X W`` as PyG's ``GCNConv`` computes it on the whole graph. The
    normalisation needs the degree of every source, including halo nodes owned elsewhere, so it is
    computed from the block's global degrees rather than from the block's own edges."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.conv = GCNConv(in_dim, out_dim, normalize=False, add_self_loops=False)

    def forward(self, x_src: torch.Tensor, block: Block) -> torch.Tensor:
        if "gcn_weight" not in block.cache:
            edges = block.with_self_loops()
            inv_sqrt = (block.src_degree + 1).rsqrt()
            block.cache["gcn_weight"] = inv_sqrt[edges[0]] * inv_sqrt[edges[1]]
        return self.conv(x_src, block.with_self_loops(), block.cache["gcn_weight"])[: block.num_dst]
