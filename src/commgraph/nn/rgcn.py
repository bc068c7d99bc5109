r"""R-GCN: the relational graph convolution of Schlichtkrull et al., with basis decomposition, on a
part of a typed graph's homogeneous view.

A part's table holds its owned rows (ascending homogeneous id, so each node type's owned rows are
one range) and then its halo rows; its in-edges are the part's CSR with each edge's relation
(``edge_type.npy`` of a typed set). :class:`RelationBlock` holds, per relation, the adjacency of the
relation's destination rows (one type's range of owned rows) with the mean's weights
:math:`1 / c_{i,r}`; :class:`RGCNLayer` aggregates with one sparse product per relation (a loop
over relations, none over edges) and transforms each destination type's rows with one product.
:class:`TypedInput` brings every node type to one width before the first layer: a type with
features through a linear projection of its own, a type without through a learnable embedding
whose rows live with their owners (a worker holds its owned nodes' rows, initialised by typed id,
so any partition starts from the same table). :class:`RGCN` stacks them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.nn.inits import glorot, zeros

from commgraph.errors import TrainingError
from commgraph.nn.dropout import relu_dropout
from commgraph.nn.model import EVAL_CHUNK_BYTES

EMBEDDING_CHUNK = 1 << 16  # embedding rows drawn per generator seed: the table is the same for any partition


@dataclass
class RelationAdjacency:
    """One relation's in-edges of a part: the adjacency of its destination rows
    ``start..start + rows - 1`` of the table, over every table row, valued :math:`1 / c_{i,r}`, and
    its transpose, which the backward pass multiplies the gradient by (built once: torch would
    transpose the adjacency at every backward pass); ``None`` where the relation has no edge into
    the part. Row pointers and columns are int32 while the edges and the table's rows fit, as
    :meth:`~commgraph.nn.Block.from_csr` holds them.

    Shapes:
        - **adjacency:** ``[rows, num_src]``; **transposed:** ``[num_src, rows]`` (sparse CSR)
    """

    start: int
    adjacency: torch.Tensor | None = None
    transposed: torch.Tensor | None = None

    @classmethod
    def of(cls, start: int, dst: np.ndarray, col: np.ndarray, rows: int, num_src: int) -> RelationAdjacency:
        """The relation's edges ``col[e] -> start + dst[e]`` (``dst`` ascending), as both CSRs."""
        counts = np.bincount(dst, minlength=rows)
        values = (1.0 / counts[dst]).astype(np.float32)
        order = np.argsort(col, kind="stable")
        return cls(
            start,
            _csr(counts, col, values, (rows, num_src)),
            _csr(np.bincount(col, minlength=num_src), dst[order].astype(col.dtype), values[order], (num_src, rows)),
        )

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """``adjacency @ x``, differentiable with respect to ``x``."""
        return _Product.apply(self.adjacency, self.transposed, x)

    def to(self, device: torch.device) -> RelationAdjacency:
        if self.adjacency is None:
            return self
        return RelationAdjacency(self.start, self.adjacency.to(device), self.transposed.to(device))


def _csr(counts: np.ndarray, col: np.ndarray, values: np.ndarray, shape: tuple[int, int]) -> torch.Tensor:
    """A sparse CSR tensor of rows with ``counts`` entries each, columns ``col`` (their dtype for
    the row pointers too)."""
    crow = np.zeros(shape[0] + 1, dtype=col.dtype)
    np.cumsum(counts, out=crow[1:])
    with warnings.catch_warnings():  # "sparse CSR support is in beta": PyG relies on it too
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(col), torch.from_numpy(values), shape)


class _Product(torch.autograd.Function):
    """``adjacency @ x``; the gradient ``transposed @ grad``."""

    @staticmethod
    def forward(ctx, adjacency: torch.Tensor, transposed: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        ctx.transposed = transposed
        return torch.sparse.mm(adjacency, x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return None, None, torch.sparse.mm(ctx.transposed, grad.contiguous())


@dataclass
class RelationBlock:
    r"""A part's in-edges by relation (see the module's description): ``relations[r]`` for relation
    ``r``; ``num_dst`` owned rows, from table row ``dst_start``, are computed from a table of
    ``num_src`` rows (each relation's ``start`` counted from ``dst_start``)."""

    num_src: int
    num_dst: int
    relations: list[RelationAdjacency]
    dst_start: int = 0

    @classmethod
    def from_csr(
        cls,
        indptr: np.ndarray,
        indices: np.ndarray,
        edge_type: np.ndarray,
        num_src: int,
        dst_ranges: list[tuple[int, int]],
    ) -> RelationBlock:
        """The block of a part's CSR (``indptr`` over its owned rows, ``indices`` table rows,
        ``edge_type`` each edge's relation), relation ``r``'s destinations the owned rows
        ``dst_ranges[r]`` (its destination type's range)."""
        indptr = np.asarray(indptr, dtype=np.int64)
        num_dst = indptr.shape[0] - 1
        rows = np.repeat(np.arange(num_dst, dtype=np.int64), np.diff(indptr))
        edge_type, indices = np.asarray(edge_type), np.asarray(indices)
        dtype = np.int32 if max(indices.shape[0], num_src) < np.iinfo(np.int32).max else np.int64
        relations = []
        for r, (start, end) in enumerate(dst_ranges):
            mine = np.flatnonzero(edge_type == r)
            if mine.size == 0:
                relations.append(RelationAdjacency(start))
                continue
            dst = rows[mine] - start
            if dst.min() < 0 or dst.max() >= end - start:
                raise TrainingError(f"relation {r}'s edges end outside its destination type's rows: re-partition")
            relations.append(RelationAdjacency.of(start, dst, indices[mine].astype(dtype), end - start, num_src))
        return cls(num_src, num_dst, relations)

    def groups(self) -> list[tuple[int, int, list[int]]]:
        """The relations into each range of destination rows (one node type's: the ranges are
        disjoint), ``(start, rows, relations)`` by start: a layer concatenates the destinations'
        own rows and the relations' aggregates and multiplies them by the stacked root and relation
        weights at once (one output-wide product per destination type, not one per relation)."""
        ranges: dict[tuple[int, int], list[int]] = {}
        for r, relation in enumerate(self.relations):
            if relation.adjacency is not None:
                ranges.setdefault((relation.start, relation.adjacency.shape[0]), []).append(r)
        return sorted((start, rows, members) for (start, rows), members in ranges.items())

    def rows(self, start: int, end: int) -> RelationBlock:
        """The block of destination rows ``start..end - 1`` alone (one node type's range): the
        relations into exactly those rows, the others empty."""
        return RelationBlock(
            self.num_src,
            end - start,
            [
                RelationAdjacency(0, r.adjacency, r.transposed)
                if r.adjacency is not None and r.start == start and r.adjacency.shape[0] == end - start
                else RelationAdjacency(0)
                for r in self.relations
            ],
            self.dst_start + start,
        )

    def to(self, device: torch.device) -> RelationBlock:
        """The block with its adjacencies on ``device``."""
        return RelationBlock(self.num_src, self.num_dst, [r.to(device) for r in self.relations], self.dst_start)


@dataclass
class LinearTerm:
    """Rows ``start..start + len(input) - 1`` of a layer's output, ``input @ weight + bias``.

    Shapes:
        - **input:** ``[rows, F]``; **weight:** ``[F, F_out]``; **bias:** ``[F_out]``
    """

    start: int
    input: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor


def linear_cross_entropy(terms: list[LinearTerm], rows: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The summed cross-entropy of output rows ``rows`` (ascending) of ``terms`` against ``labels``,
    computed :func:`chunk_rows` rows at a time: no pass holds more than a chunk's logits. Every term
    is in the loss's graph, a term without rows with zero gradients (so a part without a training
    row still takes part in the backward pass's exchanges)."""
    losses = []
    for term in terms:
        ends = torch.tensor([term.start, term.start + term.input.shape[0]], device=rows.device)
        lo, hi = (int(end) for end in torch.searchsorted(rows, ends))
        step = chunk_rows(term.weight.shape[1])
        losses.append(
            _LinearCrossEntropy.apply(term.input, term.weight, term.bias, rows[lo:hi] - term.start, labels[lo:hi], step)
        )
    return torch.stack(losses).sum()


def linear_argmax(terms: list[LinearTerm]) -> torch.Tensor:
    """Every output row's largest column (its predicted class) of ``terms``, without autograd,
    :func:`chunk_rows` rows at a time."""
    with torch.no_grad():
        pieces = [
            torch.addmm(term.bias, term.input[s : s + step], term.weight).argmax(dim=1)
            for term in terms
            for step in [chunk_rows(term.weight.shape[1])]
            for s in range(0, term.input.shape[0], step)
        ]
    return torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.long, device=terms[0].input.device)


def chunk_rows(width: int) -> int:
    """Rows of ``width`` float32 logits in one :data:`~commgraph.nn.model.EVAL_CHUNK_BYTES` chunk."""
    return max(1, EVAL_CHUNK_BYTES // (4 * width))


class _LinearCrossEntropy(torch.autograd.Function):
    r"""The summed cross-entropy of rows ``rows`` of ``x @ weight + bias`` against ``labels``, a
    chunk of ``step`` rows at a time. The loss is a scalar its gradient only scales, so the forward
    pass computes the gradients with each chunk's logits (:math:`\mathrm{softmax} - \mathrm{onehot}`
    by the chunk's rows) and the backward pass scales them: no chunk's logits are kept or made again."""

    @staticmethod
    def forward(ctx, x, weight, bias, rows, labels, step):
        total = x.new_zeros(())
        grad_x, grad_weight, grad_bias = torch.zeros_like(x), torch.zeros_like(weight), torch.zeros_like(bias)
        for s in range(0, rows.shape[0], step):
            index, classes = rows[s : s + step], labels[s : s + step, None]
            chunk = x[index]
            g = torch.log_softmax(torch.addmm(bias, chunk, weight), dim=1)
            total -= g.gather(1, classes).sum()
            g.exp_().scatter_add_(1, classes, g.new_full(classes.shape, -1.0))
            grad_weight.addmm_(chunk.t(), g)
            grad_bias += g.sum(dim=0)
            grad_x.index_add_(0, index, g @ weight.t())
        ctx.save_for_backward(grad_x, grad_weight, grad_bias)
        return total

    @staticmethod
    def backward(ctx, grad):
        grad_x, grad_weight, grad_bias = ctx.saved_tensors
        return grad * grad_x, grad * grad_weight, grad * grad_bias, None, None, None


class RGCNLayer(torch.nn.Module):
    r"""The relational graph convolution of `"Modeling Relational Data with Graph Convolutional
    Networks" <https://arxiv.org/abs/1703.06103>`_ (Schlichtkrull et al., ESWC 2018) on a
    :class:`RelationBlock`, with basis decomposition:

    .. math::
        \mathbf{x}^{\prime}_i = \mathbf{W}_0 \mathbf{x}_i + \mathbf{b} + \sum_{r \in \mathcal{R}}
        \sum_{j \in \mathcal{N}_r(i)} \frac{1}{|\mathcal{N}_r(i)|} \mathbf{W}_r \mathbf{x}_j,
        \qquad \mathbf{W}_r = \sum_{b=1}^{B} a_{rb} \mathbf{V}_b

    (PyG's ``RGCNConv`` with ``aggr="mean"``, its parameters named as there: ``weight`` the
    :math:`\mathbf{V}_b`, ``comp`` the :math:`a_{rb}`, ``root`` :math:`\mathbf{W}_0^\top` and
    ``bias``). Without bases each relation has a weight of its own (``weight`` is the
    :math:`\mathbf{W}_r`). Every in-edge of a destination is in the block, so a part computes the
    single-graph result.

    Args:
        in_dim: input width :math:`F_{in}`.
        out_dim: output width :math:`F_{out}`.
        num_relations: relations :math:`|\mathcal{R}|`.
        num_bases: basis matrices :math:`B \ge 1` (None: no decomposition).

    Shapes:
        - **input:** the table ``x_src`` :math:`(|\mathcal{V}_s|, F_{in})`, the destinations' own
          rows ``x_dst`` :math:`(|\mathcal{V}_t|, F_{in})`, and a :class:`RelationBlock`
        - **output:** :math:`(|\mathcal{V}_t|, F_{out})`

    Raises:
        TrainingError: ``num_bases < 1``.
    """

    def __init__(self, in_dim: int, out_dim: int, num_relations: int, num_bases: int | None = None):
        super().__init__()
        if num_bases is not None and num_bases < 1:
            raise TrainingError(f"R-GCN needs --bases >= 1 (or none: a weight per relation), got {num_bases}")
        self.num_relations, self.num_bases = num_relations, num_bases
        self.weight = torch.nn.Parameter(torch.empty(num_bases or num_relations, in_dim, out_dim))
        self.comp = torch.nn.Parameter(torch.empty(num_relations, num_bases)) if num_bases is not None else None
        self.root = torch.nn.Parameter(torch.empty(in_dim, out_dim))
        self.bias = torch.nn.Parameter(torch.empty(out_dim))
        glorot(self.weight)
        if self.comp is not None:
            glorot(self.comp)
        glorot(self.root)
        zeros(self.bias)

    def relation_weights(self) -> torch.Tensor:
        r"""Every relation's :math:`\mathbf{W}_r` (``[R, F_in, F_out]``), from the bases where decomposed."""
        if self.comp is None:
            return self.weight
        bases, in_dim, out_dim = self.weight.shape
        return (self.comp @ self.weight.view(bases, -1)).view(self.num_relations, in_dim, out_dim)

    def forward(self, x_src: torch.Tensor, x_dst: torch.Tensor, block: RelationBlock) -> torch.Tensor:
        pieces = [torch.addmm(term.bias, term.input, term.weight) for term in self.terms(x_src, x_dst, block)]
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces)

    def terms(self, x_src: torch.Tensor, x_dst: torch.Tensor, block: RelationBlock) -> list[LinearTerm]:
        """The output's rows as :class:`LinearTerm` s, by start (aggregated, not yet multiplied):
        per destination type its own rows beside each relation's aggregate, with the stacked root
        and relation weights; the rows no relation reaches with the root alone."""
        weights = self.relation_weights()
        terms, done = [], 0
        for start, rows, members in block.groups():
            if start > done:  # destinations no relation reaches: the root term alone
                terms.append(LinearTerm(done, x_dst[done:start], self.root, self.bias))
            aggregated = [x_dst[start : start + rows], *(block.relations[r].product(x_src) for r in members)]
            stacked = torch.cat([self.root, weights[members].flatten(0, 1)])
            terms.append(LinearTerm(start, torch.cat(aggregated, dim=1), stacked, self.bias))
            done = start + rows
        if done < x_dst.shape[0] or not terms:
            terms.append(LinearTerm(done, x_dst[done:], self.root, self.bias))
        return terms


class TypedInput(torch.nn.Module):
    r"""Every node type's rows at one width ``hidden``: a type with features through a linear
    projection of its own (:math:`\mathbf{P}_t \mathbf{x}_i + \mathbf{c}_t`), a type without through
    a learnable embedding of its owned nodes (``embeddings[t]``: this part's rows of the type's
    table, drawn :math:`\mathcal{N}(0, 1)` by typed id from ``seed``, so every partition starts
    from one table; its gradient stays with the owner, who holds the row).

    Args:
        widths: each node type's feature width (0: no features), in the graph's type order.
        hidden: the output width.
        owned_ids: each type's owned typed ids (ascending), for the embeddings' rows.
        seed: the embeddings' seed.

    Shapes:
        - **input:** each type's owned feature rows ``[n_t, F_t]`` (None for a type without)
        - **output:** :math:`(\sum_t n_t, \mathrm{hidden})`, the types one after the other
    """

    def __init__(self, widths: list[int], hidden: int, owned_ids: list[np.ndarray], seed: int):
        super().__init__()
        self.projections = torch.nn.ModuleDict(
            {str(t): torch.nn.Linear(width, hidden) for t, width in enumerate(widths) if width}
        )
        self.embeddings = torch.nn.ParameterDict(
            {
                str(t): torch.nn.Parameter(embedding_rows(ids, hidden, seed, t))
                for t, (width, ids) in enumerate(zip(widths, owned_ids, strict=True))
                if not width
            }
        )

    def forward(self, features: list[torch.Tensor | None]) -> torch.Tensor:
        rows = [self.embeddings[str(t)] if x is None else self.projections[str(t)](x) for t, x in enumerate(features)]
        return torch.cat(rows)

    def rows(self, node_type: np.ndarray, at: np.ndarray, features: list[torch.Tensor | None]) -> torch.Tensor:
        """The rows of single owned nodes, in their order: node ``i`` of type ``node_type[i]``,
        ``at[i]`` its position among the part's owned rows of its type (what an owner computes for
        the sampled batches that read its nodes). Every type takes part, none of its rows asked or
        not, so the result is in the parameters' graph even without rows.

        Shapes:
            - **node_type, at:** ``[n]``; **output:** ``[n, hidden]``
        """
        pieces, order = [], []
        for t, x in enumerate(features):
            mine = np.flatnonzero(node_type == t)
            index = torch.from_numpy(at[mine]).to(self._device)
            pieces.append(self.embeddings[str(t)][index] if x is None else self.projections[str(t)](x[index]))
            order.append(mine)
        back = torch.from_numpy(np.argsort(np.concatenate(order), kind="stable")).to(self._device)
        return torch.cat(pieces).index_select(0, back)

    @property
    def _device(self) -> torch.device:
        return next(self.parameters()).device


def embedding_rows(ids: np.ndarray, width: int, seed: int, node_type: int) -> torch.Tensor:
    """Rows ``ids`` (typed ids, ascending) of a type's :math:`\\mathcal{N}(0, 1)` embedding table,
    drawn :data:`EMBEDDING_CHUNK` rows per seed, so the rows are the same whoever draws them."""
    ids = np.asarray(ids, dtype=np.int64)
    out = torch.empty((ids.size, width))
    chunks = ids // EMBEDDING_CHUNK
    bounds = np.flatnonzero(np.diff(chunks)) + 1
    for piece in np.split(np.arange(ids.size), bounds) if ids.size else []:
        chunk = int(chunks[piece[0]])
        generator = torch.Generator().manual_seed(seed * 1_000_003 + node_type * 65_537 + chunk)
        table = torch.randn((EMBEDDING_CHUNK, width), generator=generator)
        out[torch.from_numpy(piece)] = table[torch.from_numpy(ids[piece] - chunk * EMBEDDING_CHUNK)]
    return out


class TypedModel(torch.nn.Module):
    """What the typed models (:class:`RGCN`, :class:`~commgraph.nn.hgt.HGT`) share: ``input`` (a
    :class:`TypedInput`) and ``convs`` (their layers)."""

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def shared_parameters(self) -> list[torch.nn.Parameter]:
        """The parameters every worker holds alike (all but the embeddings' owned rows): the ones
        whose gradients are summed over the workers."""
        owned = {id(p) for p in self.input.embeddings.parameters()}
        return [p for p in self.parameters() if id(p) not in owned]


class RGCN(TypedModel):
    r"""R-GCN for node classification on a typed graph: :class:`TypedInput` to ``hidden``, then
    ``layers`` :class:`RGCNLayer` (ReLU and dropout between them), the last one to the classes.

    Args:
        widths, owned_ids, seed: as :class:`TypedInput` takes them.
        hidden: hidden width.
        out_dim: classes :math:`C`.
        num_relations: relations.
        layers: R-GCN layers, >= 1.
        num_bases: each layer's basis matrices (None: a weight per relation).
        dropout: dropout after every layer but the last.

    Shapes:
        - **layer** ``l``: a table :math:`(|\mathcal{V}_s|, \mathrm{hidden})` to
          :math:`(|\mathcal{V}_t|, \mathrm{hidden})`, the last to :math:`(|\mathcal{V}_t|, C)`
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
        num_bases: int | None = None,
        dropout: float = 0.5,
        seed: int = 0,
    ):
        super().__init__()
        self.dropout = dropout
        self.input = TypedInput(widths, hidden, owned_ids, seed)
        self.convs = torch.nn.ModuleList(
            RGCNLayer(hidden, out_dim if index == layers - 1 else hidden, num_relations, num_bases)
            for index in range(layers)
        )

    def head(self, x_src: torch.Tensor, block: RelationBlock) -> list[LinearTerm]:
        """The last layer on ``block`` as :class:`LinearTerm` s, for :func:`linear_cross_entropy`
        and :func:`linear_argmax` to read a chunk of logits at a time."""
        return self.convs[-1].terms(x_src, x_src[block.dst_start : block.dst_start + block.num_dst], block)

    def layer(
        self, index: int, x_src: torch.Tensor, block: RelationBlock, x_dst: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Layer ``index`` on ``block`` (its destinations' own rows ``x_dst``, default the table's
        rows from ``block.dst_start``), activated: ReLU and dropout, none after the last."""
        if x_dst is None:
            x_dst = x_src[block.dst_start : block.dst_start + block.num_dst]
        out = self.convs[index](x_src, x_dst, block)
        if index == self.num_layers - 1:
            return out
        return relu_dropout(out, self.dropout, self.training)
