"""GAT layer (multi-head attention) on a block (PyG's ``GATConv``, bipartite form)."""

from __future__ import annotations

import torch
from torch_geometric.nn import GATConv

from commgraph.nn.block import Block


class GATLayer(torch.nn.Module):
    r"""The graph attention operator of `"Graph Attention Networks"
    <https://arxiv.org/abs/1710.10903>`_ (Veličković et al., ICLR 2018), on a block (PyG's
    ``GATConv`` in its bipartite form), with :math:`K` heads:

    .. math::
        \mathbf{x}^{\prime}_i = \mathop{\Big\Vert}_{k=1}^{K} \sum_{j \in \mathcal{N}(i) \cup \{ i \}}
        \alpha^k_{i,j} \mathbf{\Theta}^k \mathbf{x}_j,
        \qquad
        \alpha^k_{i,j} = \frac{\exp\left(\mathrm{LeakyReLU}\left({\mathbf{a}^k}^{\top}
        [\mathbf{\Theta}^k \mathbf{x}_i \, \Vert \, \mathbf{\Theta}^k \mathbf{x}_j]\right)\right)}
        {\sum_{l \in \mathcal{N}(i) \cup \{ i \}} \exp\left(\mathrm{LeakyReLU}\left({\mathbf{a}^k}^{\top}
        [\mathbf{\Theta}^k \mathbf{x}_i \, \Vert \, \mathbf{\Theta}^k \mathbf{x}_l]\right)\right)},

    plus a bias. Attention runs over each destination's in-edges in the whole graph plus exactly
    one self loop, as ``GATConv`` does on the whole graph; the heads are concatenated, or averaged
    with ``concat=False`` (the output layer). GAT transforms its sources before attending, so it
    transforms only the table rows the block reads (:meth:`~commgraph.nn.Block.compact`).

    Args:
        in_dim: input width :math:`F_{in}`.
        out_dim: width of one head :math:`F_{out}`.
        heads: number of heads :math:`K`.
        concat: concatenate the heads (else average them).

    Shapes:
        - **input:** the table ``x_src`` :math:`(|\mathcal{V}_s|, F_{in})`, the destinations' own
          rows ``x_dst`` :math:`(|\mathcal{V}_t|, F_{in})`, and a :class:`~commgraph.nn.Block`
        - **output:** :math:`(|\mathcal{V}_t|, K F_{out})`
          with ``concat``, else :math:`(|\mathcal{V}_t|, F_{out})`
    """

    def __init__(self, in_dim: int, out_dim: int, heads: int, concat: bool):
        super().__init__()
        self.conv = GATConv(in_dim, out_dim, heads=heads, concat=concat, add_self_loops=False)

    def forward(self, x_src: torch.Tensor, x_dst: torch.Tensor, block: Block) -> torch.Tensor:
        sources, edge_index = block.compact()
        return self.conv((x_src.index_select(0, sources), x_dst), edge_index, size=(sources.numel(), block.num_dst))
