"""GraphSAGE layer with mean aggregation on a block (PyG's ``SAGEConv``, bipartite form)."""

from __future__ import annotations

import torch
from torch_geometric.nn import SAGEConv
from torch_geometric.utils import spmm

from commgraph.nn.block import Block


class SAGELayer(torch.nn.Module):
    r"""The GraphSAGE operator of `"Inductive Representation Learning on Large Graphs"
    <https://arxiv.org/abs/1706.02216>`_ (Hamilton, Ying and Leskovec, NeurIPS 2017), mean
    aggregator, on a block (PyG's ``SAGEConv`` in its bipartite form):

    .. math::
        \mathbf{x}^{\prime}_i = \mathbf{W}_1 \mathbf{x}_i + \mathbf{W}_2 \cdot
        \mathrm{mean}_{j \in \mathcal{N}(i)} \mathbf{x}_j

    (a bias with ``W_2``; a node without in-edges gets ``W_1 x_i``
    plus the bias). The mean runs over every in-edge of the destination in the whole graph, so a
    part computes the single-graph result.

    Args:
        in_dim: input width :math:`F_{in}`.
        out_dim: output width :math:`F_{out}`.

    Shapes:
        - **input:** the table ``x_src`` :math:`(|\mathcal{V}_s|, F_{in})`, the destinations' own
          rows ``x_dst`` :math:`(|\mathcal{V}_t|, F_{in})`, and a :class:`~commgraph.nn.Block`
        - **output:** :math:`(|\mathcal{V}_t|, F_{out})`
    """

    has_root = True  # a :class:`~commgraph.nn.transform_first.TransformFirst` layer with a root term

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.conv = SAGEConv(in_dim, out_dim, aggr="mean")

    def forward(self, x_src: torch.Tensor, x_dst: torch.Tensor, block: Block) -> torch.Tensor:
        return self.conv((x_src, x_dst), block.adj_t())

    def neighbour_rows(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """``W_2 x_j`` for every row (no bias): the mean of these over a destination's sources is
        ``W_2`` times the mean of the rows. ``keep`` (0 or 1 per column): the rows with the other
        columns zero."""
        return torch.nn.functional.linear(x, _kept(self.conv.lin_l.weight, keep))

    def root_rows(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """``W_1 x_i``: a destination's own term (``keep``: as :meth:`neighbour_rows`)."""
        return torch.nn.functional.linear(x, _kept(self.conv.lin_r.weight, keep), self.conv.lin_r.bias)

    def from_rows(self, neighbour: torch.Tensor, root: torch.Tensor | None, block: Block) -> torch.Tensor:
        """The layer from its sources' :meth:`neighbour_rows` and its destinations' :meth:`root_rows`:
        the mean over in-edges, then the bias and the root term (a destination without in-edges
        gets the bias, as :meth:`forward` does)."""
        return spmm(block.adj_t(), neighbour, reduce="mean") + self.conv.lin_l.bias + root

    def aggregation(self, block: Block) -> tuple[torch.Tensor, bool]:
        """What the layer aggregates its sources' rows with: ``block``'s adjacency, and that the
        sum over a destination's in-edges is divided by their number (the mean)."""
        return block.adj_t(), True

    def from_aggregated(self, aggregated: torch.Tensor, x_dst: torch.Tensor) -> torch.Tensor:
        """The layer from the mean of each destination's source rows (``aggregated``) and the
        destinations' own rows: ``W_2 aggregated + b + W_1 x_i``, what :meth:`forward` computes
        after its aggregation; the root term is added in place, so the output is one tensor."""
        return self.conv.lin_l(aggregated).addmm_(x_dst, self.conv.lin_r.weight.t())


def _kept(weight: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """``weight`` reading only the input columns ``keep`` marks: the same products as zeroing the
    other columns of the rows, without a masked copy of the rows."""
    return weight if keep is None else weight * keep
