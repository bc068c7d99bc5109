"""``GNN``: a stack of layers that a trainer drives one layer (and one bin) at a time.

A distributed forward cannot be one ``forward`` call: between layers a worker must exchange its
boundary rows. So a model exposes ``encode`` (pointwise, before the first exchange), ``layer`` (one
message-passing step on a block, ``conv``, then activation and dropout, ``activate``) and ``decode``
(pointwise, after the last). ``widths[l]`` is the row width layer ``l`` reads, which is what the
exchange moves.
"""

from __future__ import annotations

import torch

from commgraph.errors import TrainingError
from commgraph.nn.block import Block
from commgraph.nn.commnet import CommNetLayer
from commgraph.nn.dropout import dropout, relu_dropout
from commgraph.nn.gat import GATLayer
from commgraph.nn.gcn import GCNLayer
from commgraph.nn.gin import GINLayer
from commgraph.nn.options import MODELS, check_model_options
from commgraph.nn.sage import SAGELayer
from commgraph.nn.transform_first import TransformFirst

EVAL_CHUNK_BYTES = 1 << 24  # an evaluation's scratch per chunk of destinations: their rows at the widest


class GNN(torch.nn.Module):
    r"""A GNN of ``layers`` message-passing layers of one ``kind``, which a trainer drives one layer
    (and one bin) at a time: :meth:`encode`, then for each layer ``l`` :meth:`layer` (or
    :meth:`conv` and :meth:`activate`) on a block whose table is ``widths[l]`` wide, then
    :meth:`decode`. On the whole graph as one block it computes what the same stack of PyG layers
    computes.

    - ``gcn``: :class:`~commgraph.nn.gcn.GCNLayer`, ReLU and dropout between layers;
    - ``sage``: :class:`~commgraph.nn.sage.SAGELayer`, ReLU and dropout;
    - ``gat``: :class:`~commgraph.nn.gat.GATLayer`, ``heads`` heads concatenated in the hidden
      layers and one head in the output layer, ELU and dropout;
    - ``gin``: :class:`~commgraph.nn.gin.GINLayer`, ReLU and dropout;
    - ``commnet``: a linear encoder, :class:`~commgraph.nn.commnet.CommNetLayer` steps (their own
      tanh) with dropout between them, a linear decoder.

    Args:
        kind: one of :data:`MODELS`.
        in_dim: input feature width :math:`F`.
        hidden: hidden width (per head for GAT).
        out_dim: output width :math:`C` (the classes).
        layers: message-passing layers, >= 1.
        heads: GAT's attention heads in the hidden layers.
        dropout: dropout probability after every layer but the last, in ``[0, 1)``.

    Shapes:
        - **encode:** :math:`(N, F)` to :math:`(N, \mathrm{widths}[0])`
        - **layer** ``l``: a table :math:`(|\mathcal{V}_s|, \mathrm{widths}[l])` to
          :math:`(|\mathcal{V}_t|, \mathrm{widths}[l + 1])`; the last layer's output is
          ``hidden`` wide for CommNet, else :math:`C`
        - **decode:** the last layer's output to :math:`(N, C)`

    Raises:
        TrainingError: an unknown ``kind`` or a shape no GNN can have.
    """

    def __init__(
        self,
        kind: str,
        in_dim: int,
        hidden: int,
        out_dim: int,
        *,
        layers: int = 2,
        heads: int = 4,
        dropout: float = 0.5,
    ):
        super().__init__()
        if kind not in MODELS:
            raise TrainingError(f"unknown model {kind!r}; choose one of {', '.join(MODELS)}")
        check_model_options(layers, hidden, heads, dropout)
        self.kind, self.dropout, self.in_dim = kind, dropout, in_dim
        self.encoder = torch.nn.Linear(in_dim, hidden) if kind == "commnet" else None
        self.decoder = torch.nn.Linear(hidden, out_dim) if kind == "commnet" else None
        width = hidden if kind == "commnet" else in_dim
        self.widths: list[int] = []
        self.convs = torch.nn.ModuleList()
        for index in range(layers):
            last = index == layers - 1
            out = hidden if (kind == "commnet" or not last) else out_dim
            self.widths.append(width)
            if kind == "gcn":
                self.convs.append(GCNLayer(width, out))
            elif kind == "sage":
                self.convs.append(SAGELayer(width, out))
            elif kind == "gat":
                self.convs.append(GATLayer(width, out, heads=1 if last else heads, concat=not last))
                out = out if last else out * heads
            elif kind == "gin":
                self.convs.append(GINLayer(width, out))
            else:
                self.convs.append(CommNetLayer(width, out))
            width = out
        self.final_width = width  # the last layer's output rows

    @property
    def num_layers(self) -> int:
        """Message-passing layers."""
        return len(self.convs)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The pointwise step before the first exchange: CommNet's encoder, else ``x`` itself."""
        return self.encoder(x) if self.encoder is not None else x

    def layer(self, index: int, x_src: torch.Tensor, block: Block, x_dst: torch.Tensor | None = None) -> torch.Tensor:
        """Layer ``index`` on ``block``: :meth:`conv`, then :meth:`activate`. In evaluation (eval
        mode, no autograd) a block held as its adjacency is computed in chunks of destinations
        whose rows at the layer's widest take about :data:`EVAL_CHUNK_BYTES`, each written into
        the output as it is done: the aggregation's scratch is one chunk's, whatever the block's
        size, and the rows are the same (a layer is row-wise per destination)."""
        chunk = max(1, EVAL_CHUNK_BYTES // (4 * max(x_src.shape[1], self.out_width(index))))
        if self.training or torch.is_grad_enabled() or block.csr is None or block.num_dst <= chunk:
            return self.activate(index, self.conv(index, x_src, block, x_dst))
        out = None
        for start in range(0, block.num_dst, chunk):
            end = min(start + chunk, block.num_dst)
            rows = self.activate(
                index, self.conv(index, x_src, block.rows(start, end), None if x_dst is None else x_dst[start:end])
            )
            if out is None:
                out = rows.new_empty((block.num_dst, rows.shape[1]))
            out[start:end] = rows
        return out

    def out_width(self, index: int) -> int:
        """The width of layer ``index``'s output rows."""
        return self.widths[index + 1] if index + 1 < self.num_layers else self.final_width

    def conv(self, index: int, x_src: torch.Tensor, block: Block, x_dst: torch.Tensor | None = None) -> torch.Tensor:
        """Layer ``index``'s message passing on ``block``, before activation. ``x_dst`` are the
        destinations' rows of ``x_src`` when the caller holds them as a tensor of their own (a bin's
        previous output): gradients then flow to it directly instead of through a slice of the
        whole table. Row-wise per destination: computing the destinations in chunks gives the
        same rows."""
        return self.convs[index](x_src, block.dst(x_src) if x_dst is None else x_dst, block)

    @property
    def linear_first(self) -> bool:
        """Whether every layer transforms each source row before it aggregates
        (:class:`~commgraph.nn.transform_first.TransformFirst`), so a row can be transformed where
        it is held (:meth:`neighbour_rows`, :meth:`root_rows`) and the layer computed from the
        transformed rows (:meth:`from_rows`)."""
        return all(isinstance(conv, TransformFirst) for conv in self.convs)

    def narrows(self, index: int) -> bool:
        """Whether layer ``index`` is :attr:`linear_first` and its output narrower than its input,
        so its transformed rows take less memory than its input rows."""
        return self.linear_first and self.out_width(index) < self.widths[index]

    @property
    def first_narrows(self) -> bool:
        """Whether layer 0 :meth:`narrows` its rows."""
        return self.narrows(0)

    @property
    def first_aggregates(self) -> bool:
        """Whether layer 0 is :attr:`linear_first` and its output at least as wide as its input, so
        aggregating the input rows first (:meth:`aggregation`) and transforming the destinations'
        aggregates (:meth:`from_aggregated`) holds fewer floats than transforming every source
        row."""
        return self.linear_first and not self.first_narrows

    @property
    def has_root(self) -> bool:
        """Whether the layers have a per-destination term of their own (GraphSAGE's root weight)."""
        return self.linear_first and self.convs[0].has_root

    def neighbour_rows(self, x: torch.Tensor, keep: torch.Tensor | None = None, index: int = 0) -> torch.Tensor:
        """Layer ``index``'s per-source transform of its input rows ``x`` (``[n, widths[index]]``
        to ``[n, out_width(index)]``; GCN and GraphSAGE only): what a destination aggregates, with
        the aggregation's weights. ``keep`` (``[widths[index]]``, 0 or 1): the transform of the rows
        with the unkept columns zero."""
        return self.convs[index].neighbour_rows(x, keep)

    def root_rows(self, x: torch.Tensor, keep: torch.Tensor | None = None, index: int = 0) -> torch.Tensor | None:
        """Layer ``index``'s per-destination term of its input rows ``x`` (GraphSAGE's root weight;
        None for GCN; ``keep`` as :meth:`neighbour_rows`)."""
        return self.convs[index].root_rows(x, keep)

    def from_rows(self, index: int, neighbour: torch.Tensor, root: torch.Tensor | None, block: Block) -> torch.Tensor:
        """Layer ``index`` (activated) on ``block`` from its table's :meth:`neighbour_rows` and its
        destinations' :meth:`root_rows`: the same rows as :meth:`layer` on the input rows, up to
        float rounding (the transform and the aggregation commute)."""
        return self.activate(index, self.convs[index].from_rows(neighbour, root, block))

    def aggregation(self, index: int, block: Block) -> tuple[torch.Tensor, bool]:
        """Layer ``index``'s aggregation on ``block`` (GCN and GraphSAGE only): the adjacency
        (``num_dst x num_src``, its values the weights) that multiplies the source rows, and
        whether each destination's sum is then divided by its number of in-edges (a mean)."""
        return self.convs[index].aggregation(block)

    def transform(self, index: int, aggregated: torch.Tensor, x_dst: torch.Tensor | None) -> torch.Tensor:
        """Layer ``index`` before activation from its destinations' aggregated source rows
        (:meth:`aggregation` applied to the table) and their own rows ``x_dst`` (GraphSAGE's root
        term; unused by GCN): the same rows as :meth:`conv`, up to float rounding."""
        return self.convs[index].from_aggregated(aggregated, x_dst)

    def from_aggregated(self, index: int, aggregated: torch.Tensor, x_dst: torch.Tensor | None) -> torch.Tensor:
        """Layer ``index`` (activated) from :meth:`transform`'s inputs: the same rows as :meth:`layer`."""
        return self.activate(index, self.transform(index, aggregated, x_dst))

    def activate(self, index: int, out: torch.Tensor) -> torch.Tensor:
        """Layer ``index``'s activation and dropout (none after the last layer), on its whole output
        so that one dropout mask is drawn per layer."""
        if index == self.num_layers - 1:
            return out
        if self.kind == "gat":
            out = torch.nn.functional.elu(out)
        elif self.kind != "commnet":  # CommNet's step has its own tanh
            return relu_dropout(out, self.dropout, self.training)  # one autograd step, a one-byte mask
        return dropout(out, self.dropout, self.training)

    def decode(self, h: torch.Tensor) -> torch.Tensor:
        """The pointwise step after the last layer: CommNet's decoder, else ``h`` itself."""
        return self.decoder(h) if self.decoder is not None else h
