r"""Each ``MessagePassing`` layer of a user's model computed on the rows the next layer reads, as
DGL's blocks are: :class:`LayerTrim`, ``cg.sampled(model, loader, trim=True)``.

A :class:`~commgraph.pyg.NeighborLoader` batch of :math:`L` hops holds the seeds, then the nodes
each hop added (``num_sampled_nodes`` :math:`n_0, \dots, n_L`), and the edges of each hop
(``num_sampled_edges`` :math:`e_1, \dots, e_L`), hop :math:`h`'s edges pointing into the nodes
hop :math:`h-1` added. A model of :math:`L` layers run on the whole batch (PyG's
``model(batch.x, batch.edge_index)[:batch.batch_size]``) computes every layer for every node,
though the seeds' outputs read only the nodes within :math:`L-l` hops after layer :math:`l`
(:math:`l = 0, \dots, L-1`). Trimmed, layer :math:`l` is called on the bipartite pair

.. math::
    \bigl(x_{0:s_l},\; x_{0:d_l}\bigr),\quad \text{edges } 0 : \textstyle\sum_{h \le L-l} e_h,
    \qquad s_l = \sum_{h \le L-l} n_h,\; d_l = \sum_{h < L-l} n_h,

so its output holds :math:`d_l` rows, the next layer's sources, and the last layer's the seeds'
alone. A layer that aggregates a sparse adjacency in one fused product (:data:`FUSED`, with a mean
or a sum, called on ``x`` and ``edge_index`` alone) gets the kept edges as PyG's ``adj_t``, a CSR
matrix (:func:`adjacency`); the others get the kept columns of ``edge_index``. For a layer whose
output at a node reads only that node's row and its in-edges' messages (:data:`TRIMMABLE`), the
seeds' outputs are those of the whole-batch run (up to float rounding: the same sums, fewer rows);
PyG's ``trim_to_layer`` keeps every remaining row as a destination instead, so its first layer
still transforms every node of the batch.

A layer that normalises by its sources' degrees in the batch (``GCNConv``) would change them, so
it is refused, as are models that call their layers other than once each, in order, on the
previous layer's output (a row count that does not match says so at the call).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from commgraph.errors import BridgeError

# PyG convs that take a (sources, destinations) pair and whose output at a destination reads its
# own row and its in-edges' messages only
TRIMMABLE = (
    "SAGEConv",
    "GraphConv",
    "GATConv",
    "GATv2Conv",
    "GINConv",
    "GINEConv",
    "TransformerConv",
    "ResGatedGraphConv",
)
# those that aggregate a sparse adjacency in one fused product, and the aggregations it does
FUSED = ("SAGEConv", "GraphConv", "GINConv")
FUSED_AGGREGATIONS = ("mean", "add", "sum")


@dataclass(frozen=True)
class BatchCounts:
    """A batch's ``num_sampled_nodes`` (the seeds, then each hop's new nodes) and
    ``num_sampled_edges`` (each hop's edges)."""

    nodes: tuple[int, ...]
    edges: tuple[int, ...]

    @property
    def num_nodes(self) -> int:
        return sum(self.nodes)

    @property
    def num_edges(self) -> int:
        return sum(self.edges)

    def layer(self, index: int) -> LayerRows:
        """What layer ``index`` reads and writes (see the module description)."""
        hops = len(self.edges) - index
        return LayerRows(sum(self.nodes[: hops + 1]), sum(self.nodes[:hops]), sum(self.edges[:hops]))


@dataclass(frozen=True)
class LayerRows:
    """A trimmed layer's source rows :math:`s_l`, destination rows :math:`d_l` and kept edges."""

    sources: int
    targets: int
    edges: int


class LayerTrim:
    """Forward pre-hooks on ``layers`` (a model's ``MessagePassing`` layers, in call order) that,
    while :meth:`running` a batch of :class:`BatchCounts` ``counts``, call each on the rows the
    next layer reads (see the module description).

    Raises:
        BridgeError: a layer not in :data:`TRIMMABLE`, or not one layer per hop.
    """

    def __init__(self, layers: dict[str, torch.nn.Module], hops: int):
        refused = [f"{name} ({type(layer).__name__})" for name, layer in layers.items() if not _trimmable(layer)]
        if refused:
            raise BridgeError(
                f"trim=True calls each layer on (sources, destinations) rows, as DGL's blocks do; "
                f"{', '.join(refused)} cannot be (it takes no pair, or reads its sources' degrees): pass trim=False"
            )
        if len(layers) != hops:
            raise BridgeError(
                f"trim=True needs one MessagePassing layer per hop of the loader: the model has {len(layers)}, "
                f"the loader draws {hops} hops (num_neighbors)"
            )
        self.counts: BatchCounts | None = None
        self.called = 0
        for layer in layers.values():
            layer.register_forward_pre_hook(self._before, with_kwargs=True)

    def running(self, counts: BatchCounts | None) -> None:
        """Trim the layers' calls from now on for a batch of ``counts`` (None: call them as they are)."""
        self.counts, self.called = counts, 0

    def _before(self, layer: torch.nn.Module, args: tuple, kwargs: dict):
        if self.counts is None:
            return None
        index, self.called = self.called, self.called + 1
        rows = self._checked(layer, index, _argument(args, kwargs, 0, "x"))
        return _trimmed(layer, list(args), dict(kwargs), rows, self.counts.num_edges)

    def _checked(self, layer: torch.nn.Module, index: int, x) -> LayerRows:
        """Call ``index`` of a layer in this forward, its ``x`` the rows the trim expects.

        Raises:
            BridgeError: more calls than hops, or ``x`` of other rows.
        """
        hops = len(self.counts.edges)
        if index >= hops:
            raise BridgeError(
                f"trim=True: {type(layer).__name__} was call {index + 1} of a MessagePassing layer in one forward, "
                f"on a batch of {hops} hops: call each layer once per forward, or pass trim=False"
            )
        rows = self.counts.layer(index)
        if not isinstance(x, torch.Tensor) or x.shape[0] != rows.sources:
            got = x.shape[0] if isinstance(x, torch.Tensor) else type(x).__name__
            raise BridgeError(
                f"trim=True: layer {index} ({type(layer).__name__}) got x of {got} rows where the batch's "
                f"{rows.sources} within {hops - index} hops were expected: call the layers in order, "
                "each on the previous one's output (nothing between them that changes rows), or pass trim=False"
            )
        return rows


def _trimmed(layer: torch.nn.Module, args: list, kwargs: dict, rows: LayerRows, total: int) -> tuple[tuple, dict]:
    """A layer's call arguments trimmed to ``rows``: ``x`` as the (sources, destinations) pair, the
    kept edges (as ``adj_t`` for a fused layer), and the kept rows of every edge-aligned tensor (of
    ``total`` rows)."""
    x = _argument(args, kwargs, 0, "x")
    _replace(args, kwargs, 0, "x", (x, x[: rows.targets]))
    edges = _argument(args, kwargs, 1, "edge_index")[:, : rows.edges]
    extra = len(args) > 2 or any(key not in ("x", "edge_index") for key in kwargs)
    fused = not extra and _fused(layer)
    _replace(args, kwargs, 1, "edge_index", adjacency(edges, rows.targets, rows.sources) if fused else edges)
    for at, value in enumerate(args[2:], start=2):  # edge-aligned tensors (edge_attr, edge_weight)
        if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == total:
            args[at] = value[: rows.edges]
    for key, value in kwargs.items():
        if key not in ("x", "edge_index") and isinstance(value, torch.Tensor) and value.dim():
            kwargs[key] = value[: rows.edges] if value.shape[0] == total else value
    return tuple(args), kwargs


def adjacency(edge_index: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """PyG's sparse ``adj_t`` of a batch's ``edge_index`` (sources, then targets): the ``rows x
    cols`` CSR matrix of ones whose row ``v`` holds ``v``'s sources, which PyG's fused convs
    aggregate in one sparse product (no tensor of a message per edge). A batch's edges come target
    after target (hop after hop, each hop's by the node drawn for), so no sort is needed where
    they do; the indices are int32 where they fit, which the backward's transpose sorts several
    times faster than int64."""
    src, dst = edge_index
    if dst.numel() > 1 and not bool((dst[1:] >= dst[:-1]).all()):
        order = torch.argsort(dst, stable=True)
        src, dst = src[order], dst[order]
    index = torch.int32 if max(cols, src.shape[0]) < 2**31 else torch.int64
    crow = torch.zeros(rows + 1, dtype=index, device=dst.device)
    torch.cumsum(torch.bincount(dst, minlength=rows), 0, out=crow[1:])
    ones = torch.ones(src.shape[0], device=src.device)
    return torch.sparse_csr_tensor(crow, src.to(index), ones, size=(rows, cols))


def _trimmable(layer: torch.nn.Module) -> bool:
    from torch_geometric import nn

    return isinstance(layer, tuple(getattr(nn, name) for name in TRIMMABLE))


def _fused(layer: torch.nn.Module) -> bool:
    from torch_geometric import nn

    fused = isinstance(layer, tuple(getattr(nn, name) for name in FUSED))
    return fused and getattr(layer, "aggr", None) in FUSED_AGGREGATIONS


def _argument(args: list, kwargs: dict, at: int, name: str):
    return args[at] if len(args) > at else kwargs[name]


def _replace(args: list, kwargs: dict, at: int, name: str, value) -> None:
    if len(args) > at:
        args[at] = value
    else:
        kwargs[name] = value
