"""GIN layer (Xu et al.) on a block: ``MLP((1 + eps) x_i + sum_j x_j)`` with PyG's ``GINConv``."""

from __future__ import annotations

import torch
from torch_geometric.nn import GINConv

from commgraph.nn.block import Block


class GINLayer(torch.nn.Module):
    r"""The graph isomorphism operator of `"How Powerful are Graph Neural Networks?"
    <https://arxiv.org/abs/1810.00826>`_ (Xu, Hu, Leskovec and Jegelka, ICLR 2019), on a block
    (PyG's ``GINConv`` in its bipartite form):

    .. math::
        \mathbf{x}^{\prime}_i = h_{\mathbf{\Theta}} \left( (1 + \epsilon) \cdot \mathbf{x}_i +
        \sum_{j \in \mathcal{N}(i)} \mathbf{x}_j \right)

    with :math:`\epsilon = 0` (fixed) and :math:`h_{\mathbf{\Theta}}` a two-layer MLP,
    ``Linear(in_dim, out_dim)``, ReLU, ``Linear(out_dim, out_dim)``. The sum runs over every
    in-edge of the destination in the whole graph.

    Args:
        in_dim: input width :math:`F_{in}`.
        out_dim: output width :math:`F_{out}` (also the MLP's hidden width).

    Shapes:
        - **input:** the table ``x_src`` :math:`(|\mathcal{V}_s|, F_{in})`, the destinations' own
          rows ``x_dst`` :math:`(|\mathcal{V}_t|, F_{in})`, and a :class:`~commgraph.nn.Block`
        - **output:** :math:`(|\mathcal{V}_t|, F_{out})`
    """

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        mlp = torch.nn.Sequential(torch.nn.Linear(in_dim, out_dim), torch.nn.ReLU(), torch.nn.Linear(out_dim, out_dim))
        self.conv = GINConv(mlp)

    def forward(self, x_src: torch.Tensor, x_dst: torch.Tensor, block: Block) -> torch.Tensor:
        return self.conv((x_src, x_dst), block.adj_t())
