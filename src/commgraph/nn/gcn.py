"""GCN layer (Kipf & Welling) on a block, normalised with global degrees."""

from __future__ import annotations

import torch
from torch_geometric.nn import GCNConv
from torch_geometric.utils import spmm

from commgraph.nn.block import Block


class GCNLayer(torch.nn.Module):
    """``D^-1/2 (A + I) D^-1/2 X W + b`` with the weights of a PyG ``GCNConv``. The normalisation
    needs the degree of every source, including halo nodes owned elsewhere, so it comes from the
    block's global degrees rather than from the block's own edges. ``GCNConv`` multiplies by ``W``
    before aggregating, which on a block would transform every table row; the normalisation is
    fixed, so aggregating first gives the same result and transforms only the destinations."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.conv = GCNConv(in_dim, out_dim, normalize=False, add_self_loops=False)

    def forward(self, x_src: torch.Tensor, x_dst: torch.Tensor, block: Block) -> torch.Tensor:
        aggregated = spmm(block.adj_t(self_loops=True, gcn_norm=True), x_src, reduce="sum")
        return self.conv.lin(aggregated) + self.conv.bias
