r"""A user's model on :class:`~commgraph.pyg.NeighborLoader` batches whose first layer the rows'
owners compute, or whose layers compute only the rows the next one reads
(``trim=True``, :mod:`commgraph.pyg.trim`): :func:`sampled`.

P3 (Gandhi and Iyer, OSDI'21), as ``commgraph train --first-layer owner`` runs it: a first layer
that transforms each source row before it aggregates commutes the two,

.. math::
    \text{GCNConv: } h_i = b + \sum_j a_{ij} (W x_j), \qquad
    \text{SAGEConv, GraphConv: } h_i = W_1 x_i + b + \operatorname{aggr}_j (W_2 x_j)

(``aggr`` a mean or a sum), so the owner of a row ``x_u`` that would cross the network sends
``W_2 x_u`` (and ``W_1 x_u`` when ``u`` is one of the layer's kept destinations), ``hidden``
floats where the feature row has ``F``, and gets the gradient of what it sent back in the backward
pass, which it carries into its own copy of the weights
(:class:`~commgraph.train.owner_fetch.OwnerFetch`). A forward pre-hook on the model's first
``MessagePassing`` layer does it when the layer is called on a batch's ``x``: it transforms the
rows this rank has, puts the owners' rows in the network rows' places, and runs the layer on the
transformed rows with its own weight maps set to the identity (bias kept) for that call.

Parameter gradients sum over ranks as every rank's do (wrap the result in
``DistributedDataParallel``): the owner holds the gradient of the rows it transformed for
others, so the averaged gradient is the one of the features-shipping run, up to float rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from commgraph.errors import BridgeError
from commgraph.nn.sage import _kept
from commgraph.pyg.full import Bias, Swaps, message_passing_layers
from commgraph.pyg.link_loader import LinkNeighborLoader
from commgraph.pyg.loader import NeighborLoader
from commgraph.pyg.trim import BatchCounts, LayerTrim
from commgraph.train.owner_fetch import with_owner_rows

# a conv's map of each source row and of a destination's own row (None: it has none)
LINEAR_MAPS = {"GCNConv": ("lin", None), "SAGEConv": ("lin_l", "lin_r"), "GraphConv": ("lin_rel", "lin_root")}
COMMUTING = ("add", "sum", "mean")  # aggregations a linear map passes through
UNUSED_BATCH = (
    "first_layer='owner': a batch's x did not reach the model's first MessagePassing layer, which replaces "
    "its network rows with their owners' transforms: call the wrapped model on batch.x itself (no dropout or "
    "transform before that layer), on every rank for every batch"
)


@dataclass
class LinearFirstLayer:
    """A PyG conv that transforms each source row before it aggregates, as the owners'
    side of :class:`~commgraph.train.owner_fetch.OwnerFetch` calls a model: a
    :class:`~commgraph.nn.RowTransform` (:meth:`neighbour_rows`: ``W_2 x_j``, no bias;
    :meth:`root_rows`: ``W_1 x_i``, None without a root map; :attr:`has_root`), as the built-in
    layers are; which PyG convs qualify is found here, from their class and maps.

    Attributes:
        layer: the conv.
        neighbour: the name of its ``Linear`` applied to source rows.
        root: the name of its ``Linear`` applied to a destination's own row (None: none).
    """

    layer: torch.nn.Module
    neighbour: str
    root: str | None

    @classmethod
    def of(cls, layer: torch.nn.Module) -> LinearFirstLayer:
        """Raises:
        BridgeError: ``layer`` is not a GCNConv, SAGEConv or GraphConv whose maps commute with
            its aggregation (a mean or a sum; SAGEConv without ``project``), or its weights are
            not made yet (lazy ``in_channels=-1``)."""
        name = type(layer).__name__
        aggr = getattr(layer, "aggr", None)
        if name not in LINEAR_MAPS or aggr not in COMMUTING or getattr(layer, "project", False):
            raise BridgeError(
                f"first_layer='owner' needs a first MessagePassing layer that transforms each row before a mean "
                f"or sum (GCNConv, SAGEConv, GraphConv), got {name}(aggr={aggr!r}): use first_layer='features'"
            )
        neighbour, root = LINEAR_MAPS[name]
        if name == "SAGEConv" and not layer.root_weight:
            root = None
        for attribute in (neighbour, root):
            if attribute is not None and isinstance(
                getattr(layer, attribute).weight, torch.nn.parameter.UninitializedParameter
            ):
                raise BridgeError(
                    f"{name}'s weights are not made yet (in_channels=-1): give the layer its input width for "
                    "first_layer='owner'"
                )
        return cls(layer, neighbour, root)

    @property
    def has_root(self) -> bool:
        return self.root is not None

    def neighbour_rows(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """``W_2 x`` for every row (``keep``, 0 or 1 per column: the rows with the other columns zero)."""
        return torch.nn.functional.linear(x, _kept(getattr(self.layer, self.neighbour).weight, keep))

    def root_rows(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor | None:
        """``W_1 x`` for every row (``keep`` as :meth:`neighbour_rows`); None without a root map."""
        if self.root is None:
            return None
        return torch.nn.functional.linear(x, _kept(getattr(self.layer, self.root).weight, keep))

    def identity_maps(self, swaps: Swaps) -> None:
        """The layer's maps set to the identity, their biases kept, until ``swaps`` undoes them."""
        for attribute in (self.neighbour, self.root):
            if attribute is not None:
                swaps.set(self.layer, attribute, Bias(getattr(self.layer, attribute).bias))


class SampledModel(torch.nn.Module):
    """``module`` on ``loader``'s batches, its first ``MessagePassing`` layer computed by the rows'
    owners when ``loader`` was made with ``first_layer="owner"`` (see the module description),
    and with ``trim`` each layer on the rows the next one reads (:mod:`commgraph.pyg.trim`);
    otherwise the model runs as it is. Made by :func:`sampled`.

    Attributes:
        module: the user's model.
        loader: the loader whose batches the first layer reads.
        first: the first layer as its owners compute it (None: ``first_layer="features"``).
        trim: the layers' trim (None: every layer runs on the whole batch).
    """

    def __init__(self, module: torch.nn.Module, loader: NeighborLoader | LinkNeighborLoader, trim: bool = False):
        super().__init__()
        layers = message_passing_layers(module)
        if not layers:
            raise BridgeError(
                f"{type(module).__name__} has no MessagePassing layer (torch_geometric.nn.conv.MessagePassing): "
                "cg.sampled hooks those layers; use the model as it is"
            )
        if not isinstance(loader, (NeighborLoader, LinkNeighborLoader)):
            raise BridgeError(
                f"cg.sampled takes the cg.NeighborLoader or cg.LinkNeighborLoader whose batches the model reads, "
                f"got {loader!r}"
            )
        self.module, self.loader, self.first = module, loader, None
        self._swaps = Swaps()
        if getattr(loader, "first_layer", "features") == "owner":
            self.first = LinearFirstLayer.of(next(iter(layers.values())))
            if loader.fetch is not None:
                loader.fetch.model = self.first
            self.first.layer.register_forward_pre_hook(self._before_first, with_kwargs=True)
            self.first.layer.register_forward_hook(lambda *_: self._swaps.undo())
        self.trim = None
        if trim:
            if self.first is not None:
                raise BridgeError(
                    "trim=True with first_layer='owner' is not supported: the owners compute the first layer for "
                    "every row; pass one of them"
                )
            self.trim = LayerTrim(layers, len(loader.num_neighbors))

    def forward(self, *args, **kwargs):
        if self.trim is not None:
            self.trim.running(self._batch_counts(args, kwargs))
        try:
            return self.module(*args, **kwargs)
        finally:  # a layer that raised leaves no map swapped and no trim running
            self._swaps.undo()
            if self.trim is not None:
                self.trim.running(None)

    def _batch_counts(self, args: tuple, kwargs: dict) -> BatchCounts | None:
        """The counts of the loader's last batch when the call's ``x`` and ``edge_index`` are its
        (by their sizes; None: another input, such as the layer-wise inference loader's)."""
        counts = self.loader.yielded
        x = args[0] if args else kwargs.get("x")
        edge_index = args[1] if len(args) > 1 else kwargs.get("edge_index")
        if counts is None or not isinstance(x, torch.Tensor) or not isinstance(edge_index, torch.Tensor):
            return None
        if x.shape[0] != counts.num_nodes or edge_index.dim() != 2 or edge_index.shape[1] != counts.num_edges:
            return None
        return counts

    def _before_first(self, layer: torch.nn.Module, args: tuple, kwargs: dict):
        """The layer's ``x`` as its rows' transforms, the network rows' from their owners (a
        collective), when ``x`` is the loader's pending batch's; another loader's ``x`` (every
        row present) passes as it is."""
        pending = self.loader.pending
        x = args[0] if args else kwargs.get("x")
        if pending is None or x is not pending.x:
            if pending is not None and not pending.used:
                raise BridgeError(UNUSED_BATCH)
            return None
        pending.used = True
        neighbour, root = self.first.neighbour_rows(x), self.first.root_rows(x)
        if self.loader.fetch is not None:
            fetched = self.loader.fetch.receive(pending.request, pending.fetched)
            neighbour, root = with_owner_rows(fetched.owner, neighbour, root)
        self.first.identity_maps(self._swaps)
        rows = neighbour if root is None else (neighbour, root)
        if args:
            return (rows, *args[1:]), kwargs
        return args, {**kwargs, "x": rows}


def sampled(model: torch.nn.Module, loader: NeighborLoader | LinkNeighborLoader, trim: bool = False) -> SampledModel:
    """``model`` on the batches of ``loader`` (a :class:`~commgraph.pyg.NeighborLoader`, or with
    ``trim`` a :class:`~commgraph.pyg.LinkNeighborLoader`); with
    ``first_layer="owner"``, each network row's first layer computed by its owner (see the module
    description). Every rank calls the model on every batch's ``x``, and runs its backward pass,
    as ``DistributedDataParallel`` also needs.

    Args:
        model: any ``torch.nn.Module`` with ``MessagePassing`` layers; with ``first_layer="owner"``
            its first one is a ``GCNConv``, ``SAGEConv`` (mean or sum, no ``project``) or
            ``GraphConv`` (mean or sum) called on the batch's ``x`` itself (nothing applied before).
        loader: the loader whose batches the model reads in training.
        trim: called on a batch of ``loader`` (``model(batch.x, batch.edge_index, ...)``), run
            each layer on the rows the next one reads, as DGL's blocks do, so the output holds the
            seeds' rows alone (a link batch's: the label edges' endpoints, which
            ``edge_label_index`` indexes) (:mod:`commgraph.pyg.trim`: one layer of
            :data:`~commgraph.pyg.trim.TRIMMABLE` per hop, called in order); any other input runs
            the model as it is.

    Returns:
        SampledModel: a module calling ``model`` (wrap it in ``DistributedDataParallel``).

    Raises:
        BridgeError: no ``MessagePassing`` layer; with ``first_layer="owner"``, a first layer whose
            transform does not commute with its aggregation; at a step, a batch's ``x`` that did
            not reach that layer; with ``trim``, a layer it cannot trim, not one layer per hop,
            ``first_layer="owner"``, or at a step a layer called out of order.
    """
    return SampledModel(model, loader, trim)
