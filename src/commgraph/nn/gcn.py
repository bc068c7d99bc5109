"""GCN layer (Kipf & Welling) on a block, normalised with global degrees."""

from __future__ import annotations

import torch
from torch_geometric.nn import GCNConv
from torch_geometric.utils import spmm

from commgraph.nn.block import Block
from commgraph.nn.sage import _kept


class GCNLayer(torch.nn.Module):
    r"""The graph convolution of `"Semi-supervised Classification with Graph Convolutional Networks"
    <https://arxiv.org/abs/1609.02907>`_ (Kipf and Welling, ICLR 2017), on a block:

    .. math::
        \mathbf{x}^{\prime}_i = \mathbf{\Theta}^{\top} \sum_{j \in \mathcal{N}(i) \cup \{ i \}}
        \frac{1}{\sqrt{\hat{d}_j \hat{d}_i}} \mathbf{x}_j + \mathbf{b},
        \qquad \hat{d}_i = 1 + \deg(i),

    that is ``D^-1/2 (A + I) D^-1/2 X W + b``, with the weights of a PyG ``GCNConv``; :math:`\deg`
    counts a node's in-edges in the whole graph, self loops not counted (every node gets exactly one).
    The normalisation needs the degree of every source, including halo nodes owned elsewhere, so it
    comes from the block's global degrees rather than from the block's own edges: a part computes
    the single-graph result. ``GCNConv`` multiplies by :math:`\mathbf{\Theta}` before aggregating,
    which on a block would transform every table row; the normalisation is fixed, so aggregating
    first gives the same result and transforms only the destinations.

    Args:
        in_dim: input width :math:`F_{in}`.
        out_dim: output width :math:`F_{out}`.

    Shapes:
        - **input:** table rows ``x_src`` :math:`(|\mathcal{V}_s|, F_{in})`, the destinations' own
          rows ``x_dst`` :math:`(|\mathcal{V}_t|, F_{in})`, a :class:`~commgraph.nn.Block`
        - **output:** :math:`(|\mathcal{V}_t|, F_{out})`
    """

    has_root = False  # a :class:`~commgraph.nn.transform_first.TransformFirst` layer; its self loop is a neighbour row

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.conv = GCNConv(in_dim, out_dim, normalize=False, add_self_loops=False)

    def forward(self, x_src: torch.Tensor, x_dst: torch.Tensor, block: Block) -> torch.Tensor:
        adjacency, _ = self.aggregation(block)
        return self.from_aggregated(spmm(adjacency, x_src, reduce="sum"), None)

    def aggregation(self, block: Block) -> tuple[torch.Tensor, bool]:
        """What the layer aggregates its sources' rows with: ``block``'s normalised adjacency with
        one self loop per destination, summed (not divided by the in-edges' number)."""
        return block.adj_t(self_loops=True, gcn_norm=True), False

    def from_aggregated(self, aggregated: torch.Tensor, x_dst: None) -> torch.Tensor:
        """The layer from each destination's normalised sum of source rows: ``Theta^T`` of it plus
        the bias (``x_dst`` unused: the self loop is in the sum)."""
        return self.conv.lin(aggregated) + self.conv.bias

    def neighbour_rows(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """``Theta^T x_j`` for every row: the normalised sum of these is the layer before its bias
        (the self loop's row is the destination's own). ``keep`` (0 or 1 per column): the rows with
        the other columns zero."""
        return torch.nn.functional.linear(x, _kept(self.conv.lin.weight, keep), self.conv.lin.bias)

    def root_rows(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> None:
        """GCN has no separate root term: its self loop reads :meth:`neighbour_rows`."""
        return None

    def from_rows(self, neighbour: torch.Tensor, root: None, block: Block) -> torch.Tensor:
        """The layer from its sources' :meth:`neighbour_rows`: the normalised sum, then the bias."""
        return spmm(block.adj_t(self_loops=True, gcn_norm=True), neighbour, reduce="sum") + self.conv.bias
