r"""Layers that transform each source row before they aggregate, declared: a layer

.. math::
    h_i = \operatorname{aggr}_{j \in \mathcal{N}(i)} (W_2 x_j) + W_1 x_i + b

(GCN's normalised sum, GraphSAGE's mean) commutes its transform with its aggregation, so a row
``x_j`` can be transformed where it is held and only ``W_2 x_j``, ``hidden`` wide, sent to the
destinations that read it (P3, Gandhi and Iyer, OSDI'21; :mod:`commgraph.train.owner`).

- :class:`RowTransform`: what the rows' owners compute: :meth:`~RowTransform.neighbour_rows`
  (``W_2 x_j``), :meth:`~RowTransform.root_rows` (``W_1 x_i``; None without a root term) and
  :attr:`~RowTransform.has_root`. The built-in layers and a PyG conv on the bridge
  (:class:`~commgraph.pyg.first_layer.LinearFirstLayer`) implement it.
- :class:`TransformFirst`: a built-in layer, which also computes itself from those rows on a block
  (:meth:`~TransformFirst.from_rows`: the aggregation, then the bias and the root term).

Shapes:
    ``x`` :math:`(n, F_{in})` to :math:`(n, F_{out})`; ``keep`` :math:`(F_{in})` of 0 or 1: the
    transform of the rows with the other columns zero.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from commgraph.nn.block import Block


@runtime_checkable
class RowTransform(Protocol):
    """A first layer's per-row transforms, as the rows' owners compute them."""

    @property
    def has_root(self) -> bool:
        """Whether a destination adds a term of its own row (GraphSAGE's ``W_1 x_i``)."""
        ...

    def neighbour_rows(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """``W_2 x_j`` of every row: what a destination aggregates."""
        ...

    def root_rows(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor | None:
        """``W_1 x_i`` of every row (None: no root term)."""
        ...


@runtime_checkable
class TransformFirst(RowTransform, Protocol):
    """A layer that transforms before it aggregates, computed on a block from its transformed rows."""

    def from_rows(self, neighbour: torch.Tensor, root: torch.Tensor | None, block: Block) -> torch.Tensor:
        """The layer (before activation) from its table's :meth:`neighbour_rows` and its
        destinations' :meth:`root_rows`: the same rows as calling it on ``x``, up to float rounding."""
        ...
