r"""HGT: the Heterogeneous Graph Transformer of Hu et al., on a part of a typed graph's homogeneous
view, as :mod:`commgraph.nn.rgcn` lays a part out (owned rows, ascending homogeneous id, then halo
rows; in-edges the part's CSR with each edge's relation).

:class:`HGTBlock` holds a part's in-edges grouped by relation, with each table row's node type;
:class:`HGTLayer` computes the owned rows with one product per node type (keys, queries, values;
the output projection) and per relation (its attention and message matrices), softmax over every
in-edge of a destination whatever its relation, and no loop over edges. :class:`HGT` stacks them
over :class:`~commgraph.nn.rgcn.TypedInput` and classifies the target type's rows with a linear
head, read a chunk of logits at a time (:func:`~commgraph.nn.rgcn.linear_cross_entropy`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.utils import softmax

from commgraph.errors import TrainingError
from commgraph.nn.rgcn import LinearTerm, TypedInput, TypedModel


@dataclass
class HGTBlock:
    """A part's in-edges for :class:`HGTLayer`: edge ``e`` runs from table row ``src[e]`` into
    destination row ``dst[e]`` (rows ``dst_start..dst_start + num_dst - 1`` of the table) over
    relation ``relation[e]``, the edges grouped by relation (relation ``r``'s are
    ``bounds[r]..bounds[r + 1] - 1``); ``row_type[i]`` is table row ``i``'s node type.

    Shapes:
        - **src, dst:** ``[E]`` int64; **bounds:** ``[R + 1]``; **row_type:** ``[num_src]``
    """

    src: torch.Tensor
    dst: torch.Tensor
    bounds: list[int]
    row_type: torch.Tensor
    num_dst: int
    dst_start: int = 0

    @classmethod
    def from_csr(
        cls, indptr: np.ndarray, indices: np.ndarray, edge_type: np.ndarray, row_type: np.ndarray, relations: int
    ) -> HGTBlock:
        """The block of a part's CSR (``indptr`` over its owned rows, ``indices`` table rows,
        ``edge_type`` each edge's relation), ``row_type`` each table row's node type."""
        indptr = np.asarray(indptr, dtype=np.int64)
        num_dst = indptr.shape[0] - 1
        rows = np.repeat(np.arange(num_dst, dtype=np.int64), np.diff(indptr))
        edge_type = np.asarray(edge_type, dtype=np.int64)
        order = np.argsort(edge_type, kind="stable")
        bounds = np.searchsorted(edge_type[order], np.arange(relations + 1)).tolist()
        return cls(
            torch.from_numpy(np.asarray(indices, dtype=np.int64)[order]),
            torch.from_numpy(rows[order]),
            bounds,
            torch.from_numpy(np.asarray(row_type, dtype=np.int64)),
            num_dst,
        )

    @property
    def relation(self) -> torch.Tensor:
        """Each edge's relation."""
        counts = torch.tensor(np.diff(self.bounds))
        return torch.repeat_interleave(torch.arange(counts.shape[0]), counts).to(self.src.device)

    def rows(self, start: int, end: int) -> HGTBlock:
        """The block of destination rows ``start..end - 1`` alone: the edges into them."""
        keep = (self.dst >= start) & (self.dst < end)
        relation = self.relation
        bounds = torch.searchsorted(relation[keep], torch.arange(len(self.bounds), device=relation.device))
        return HGTBlock(
            self.src[keep], self.dst[keep] - start, bounds.tolist(), self.row_type, end - start, self.dst_start + start
        )

    def to(self, device: torch.device) -> HGTBlock:
        """The block on ``device``."""
        return HGTBlock(
            self.src.to(device),
            self.dst.to(device),
            self.bounds,
            self.row_type.to(device),
            self.num_dst,
            self.dst_start,
        )


def by_type(x: torch.Tensor, row_type: torch.Tensor, lins: torch.nn.ModuleList) -> torch.Tensor:
    """``lins[t]`` applied to the rows of ``x`` of node type ``t``, the rows in their order."""
    pieces, order = [], []
    for t, lin in enumerate(lins):
        mine = (row_type == t).nonzero().flatten()
        pieces.append(lin(x.index_select(0, mine)))
        order.append(mine)
    return torch.cat(pieces).index_select(0, torch.argsort(torch.cat(order)))


class HGTLayer(torch.nn.Module):
    r"""The heterogeneous graph transformer layer of `"Heterogeneous Graph Transformer"
    <https://arxiv.org/abs/2003.01332>`_ (Hu et al., WWW 2020) on an :class:`HGTBlock`. For a
    target :math:`t` and its in-edges :math:`e = (s, t)` of relation :math:`\phi(e)`, with
    :math:`H` heads of width :math:`d = F / H` and :math:`\tau(\cdot)` a node's type:

    .. math::
        \alpha^i_e = \operatorname{softmax}_{e \in N(t)}\Big(\mathbf{K}^i_{\tau(s)}(\mathbf{x}_s)\,
            \mathbf{W}^{ATT,i}_{\phi(e)}\, \mathbf{Q}^i_{\tau(t)}(\mathbf{x}_t)^\top
            \frac{\mu^i_{\phi(e)}}{\sqrt{d}}\Big)

        \tilde{\mathbf{x}}_t = \big\Vert_{i=1}^{H} \sum_{e \in N(t)} \alpha^i_e\,
            \mathbf{V}^i_{\tau(s)}(\mathbf{x}_s)\, \mathbf{W}^{MSG,i}_{\phi(e)}

        \mathbf{x}'_t = \beta_{\tau(t)}\, \mathbf{A}_{\tau(t)}\big(\operatorname{GELU}(\tilde{\mathbf{x}}_t)\big)
            + (1 - \beta_{\tau(t)})\, \mathbf{x}_t, \qquad \beta_\tau = \sigma(s_\tau)

    the softmax over every in-edge of :math:`t` whatever its relation, :math:`\mathbf{K},
    \mathbf{Q}, \mathbf{V}, \mathbf{A}` linear maps per node type, :math:`\mathbf{W}^{ATT},
    \mathbf{W}^{MSG}` (:math:`d \times d` per head) and the prior :math:`\mu` per relation (PyG's
    ``HGTConv``, its parameters as there: ``kqv`` its ``kqv_lin``, ``k_rel`` and ``v_rel``
    ``[R, H, d, d]``, ``p_rel`` ``[R, H]``, ``out`` its ``out_lin``, ``skip``). Every in-edge of a
    destination is in the block, so a part computes the single-graph result.

    Args:
        dim: the input and output width :math:`F`.
        num_types: node types.
        num_relations: relations :math:`|\mathcal{R}|`.
        heads: attention heads :math:`H`, dividing ``dim``.

    Shapes:
        - **input:** the table ``x_src`` :math:`(|\mathcal{V}_s|, F)`, the destinations' own rows
          ``x_dst`` :math:`(|\mathcal{V}_t|, F)`, and an :class:`HGTBlock`
        - **output:** :math:`(|\mathcal{V}_t|, F)`

    Raises:
        TrainingError: ``heads`` that does not divide ``dim``.
    """

    def __init__(self, dim: int, num_types: int, num_relations: int, heads: int = 1):
        super().__init__()
        if heads < 1 or dim % heads:
            raise TrainingError(f"HGT splits --hidden {dim} into --heads {heads}: give heads that divide it")
        self.heads, self.head_dim = heads, dim // heads
        self.kqv = torch.nn.ModuleList(torch.nn.Linear(dim, 3 * dim) for _ in range(num_types))
        self.out = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(num_types))
        d = self.head_dim
        bound = 1 / math.sqrt(d)  # HeteroLinear's kaiming_uniform(a=sqrt(5)) bound for a d-wide input
        self.k_rel = torch.nn.Parameter(torch.empty(num_relations, heads, d, d).uniform_(-bound, bound))
        self.v_rel = torch.nn.Parameter(torch.empty(num_relations, heads, d, d).uniform_(-bound, bound))
        self.p_rel = torch.nn.Parameter(torch.ones(num_relations, heads))
        self.skip = torch.nn.Parameter(torch.ones(num_types))

    def forward(self, x_src: torch.Tensor, x_dst: torch.Tensor, block: HGTBlock) -> torch.Tensor:
        heads, d = self.heads, self.head_dim
        k, q, v = by_type(x_src, block.row_type, self.kqv).view(-1, 3, heads, d).unbind(1)
        q = q[block.dst_start : block.dst_start + block.num_dst]
        keys, values = [], []
        for r, (a, b) in enumerate(zip(block.bounds[:-1], block.bounds[1:], strict=True)):
            src = block.src[a:b]
            keys.append(torch.einsum("ehd,hdf->ehf", k[src], self.k_rel[r]))
            values.append(torch.einsum("ehd,hdf->ehf", v[src], self.v_rel[r]))
        relation = block.relation
        score = (q[block.dst] * torch.cat(keys)).sum(-1) * self.p_rel[relation] / math.sqrt(d)
        alpha = softmax(score, block.dst, num_nodes=block.num_dst)
        messages = (torch.cat(values) * alpha.unsqueeze(-1)).flatten(1)
        aggregated = x_dst.new_zeros(block.num_dst, heads * d).index_add(0, block.dst, messages)
        dst_type = block.row_type[block.dst_start : block.dst_start + block.num_dst]
        beta = torch.sigmoid(self.skip)[dst_type].unsqueeze(1)
        return beta * by_type(F.gelu(aggregated), dst_type, self.out) + (1 - beta) * x_dst


class HGT(TypedModel):
    r"""HGT for node classification on a typed graph: :class:`~commgraph.nn.rgcn.TypedInput` to
    ``hidden``, then ``layers`` :class:`HGTLayer` (dropout between them), then a linear head to the
    classes on the target type's rows (as PyG's HGT example on ogbn-mag).

    Args:
        widths, owned_ids, seed: as :class:`~commgraph.nn.rgcn.TypedInput` takes them.
        hidden: hidden width.
        out_dim: classes :math:`C`.
        num_relations: relations.
        layers: HGT layers, >= 1.
        heads: attention heads, dividing ``hidden``.
        dropout: dropout after every layer but the last.

    Shapes:
        - **layer** ``l``: a table :math:`(|\mathcal{V}_s|, \mathrm{hidden})` to
          :math:`(|\mathcal{V}_t|, \mathrm{hidden})`; the head to :math:`(|\mathcal{V}_t|, C)`
    """

    def __init__(
        self,
        widths: list[int],
        hidden: int,
        out_dim: int,
        num_relations: int,
        owned_ids: list[np.ndarray],
        *,
        layers: int = 2,
        heads: int = 4,
        dropout: float = 0.5,
        seed: int = 0,
    ):
        super().__init__()
        self.dropout = dropout
        self.input = TypedInput(widths, hidden, owned_ids, seed)
        self.convs = torch.nn.ModuleList(HGTLayer(hidden, len(widths), num_relations, heads) for _ in range(layers))
        self.classifier = torch.nn.Linear(hidden, out_dim)

    def layer(self, index: int, x_src: torch.Tensor, block: HGTBlock) -> torch.Tensor:
        """Layer ``index`` on ``block`` (its destinations' own rows the table's from
        ``block.dst_start``), with dropout after it (none after the last)."""
        out = self.convs[index](x_src, x_src[block.dst_start : block.dst_start + block.num_dst], block)
        if index == self.num_layers - 1:
            return out
        return F.dropout(out, self.dropout, self.training)

    def head(self, x_src: torch.Tensor, block: HGTBlock) -> list[LinearTerm]:
        """The last layer on ``block`` and the head as a :class:`~commgraph.nn.rgcn.LinearTerm`."""
        h = self.layer(self.num_layers - 1, x_src, block)
        return [LinearTerm(0, h, self.classifier.weight.t(), self.classifier.bias)]
