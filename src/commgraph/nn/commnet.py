"""CommNet communication step (Sukhbaatar et al., 2016) on a graph.

Each agent (node) mixes its own state with the mean of the states it hears from (its in-neighbours):
``h_i' = tanh(H h_i + C mean_{j in N(i)} h_j)``. PyG has no CommNet layer, so this is a small
``MessagePassing`` of our own; the model wraps the steps in CommNet's linear encoder and decoder.
"""

from __future__ import annotations

import torch
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import spmm

from commgraph.nn.block import Block


class CommNetLayer(MessagePassing):
    r"""The communication step of `"Learning Multiagent Communication with Backpropagation"
    <https://arxiv.org/abs/1605.07736>`_ (Sukhbaatar, Szlam and Fergus, NeurIPS 2016), with the
    agents' neighbours given by the graph:

    .. math::
        \mathbf{h}^{\prime}_i = \tanh\left( \mathbf{H} \mathbf{h}_i + \mathbf{C} \cdot
        \mathrm{mean}_{j \in \mathcal{N}(i)} \mathbf{h}_j \right)

    (a bias with :math:`\mathbf{H}`, none with :math:`\mathbf{C}`; an agent that hears nobody gets
    a zero mean). The mean runs over every in-edge of the destination in the whole graph.

    Args:
        in_dim: width of the agents' states :math:`\mathbf{h}`, :math:`F_{in}`.
        out_dim: width of the new states :math:`\mathbf{h}^{\prime}`, :math:`F_{out}`.

    Shapes:
        - **input:** the states of the table's agents ``x_src`` :math:`(|\mathcal{V}_s|, F_{in})`,
          the destinations' own states ``x_dst`` :math:`(|\mathcal{V}_t|, F_{in})`, a
          :class:`~commgraph.nn.Block`
        - **output:** the destinations' new states :math:`(|\mathcal{V}_t|, F_{out})`
    """

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__(aggr="mean")
        self.self_map = torch.nn.Linear(in_dim, out_dim)  # H
        self.comm_map = torch.nn.Linear(in_dim, out_dim, bias=False)  # C

    def forward(self, x_src: torch.Tensor, x_dst: torch.Tensor, block: Block) -> torch.Tensor:
        heard = self.propagate(block.adj_t(), x=(x_src, x_dst))
        return torch.tanh(self.self_map(x_dst) + self.comm_map(heard))

    def message_and_aggregate(self, adj_t: torch.Tensor, x: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return spmm(adj_t, x[0], reduce=self.aggr)
