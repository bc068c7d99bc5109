"""``--first-layer owner``: the first layer's transform of a remote input row computed where the
row lives (P3, Gandhi and Iyer, OSDI'21).

GraphSAGE-mean and GCN transform each source row before they aggregate (``W mean(x_u) =
mean(W x_u)``; GCN's normalised sum alike), so instead of a feature row ``F`` wide, the owner of a
remote input ``u`` can send ``W x_u``, ``hidden`` wide (GraphSAGE: and its root term ``W_1 x_u``
when ``u`` is also one of the layer's destinations), and receive the gradient of those rows back
in the backward pass, which it carries into its own copy of ``W`` (see
:mod:`commgraph.runtime.owner`). The loss is the feature-shipping loss up to float rounding:
only the order of the sums differs.

- Sampled training (:class:`~commgraph.train.owner_fetch.OwnerFetch`): the rows that would cross
  the network are computed by their owners, after the reader's DGS feature mask (the columns it
  announced; the others are zero, as a reader's fetched rows are); rows of the same machine's
  workers are still read from their files and transformed by the reader, as they cost no network.
- Full-graph training (:class:`OwnerInput`): layer 0's halo exchange moves the boundary rows'
  transforms, every step, where shipping features moves the halo's feature rows once, before the
  first step; what it saves is the halo's feature table (memory), not bytes per step.

Every step's hidden rows count as ``activations`` and their gradients as ``activation_grads``.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from commgraph.nn import GNN
from commgraph.runtime import halo_exchange
from commgraph.runtime.features import FeatureStore, gathered
from commgraph.runtime.owner import BACKWARD_LABEL, FORWARD_LABEL
from commgraph.runtime.stream import ExchangeRunner
from commgraph.train import streamed as streaming
from commgraph.train.streamed import InputTable


class OwnerInput:
    """Layer 0 of a full-graph part with ``--first-layer owner``: the table's owned rows (``rows``
    of ``store``, as :class:`~commgraph.train.streamed.InputTable`; streamed chunk by chunk from a
    host store) are transformed here, every step, and the boundary rows' transforms (table rows
    ``sent``) go to the parts that read them through ``runner`` (layer 0's halo exchange), whose
    backward brings their gradients back. The halo's feature rows are never held."""

    def __init__(
        self,
        store: FeatureStore,
        rows: torch.Tensor | None,
        runner: ExchangeRunner,
        sent: torch.Tensor,
        streamed: bool | None = None,
    ):
        self.input = InputTable(store, rows, streamed=streamed)
        self.runner, self.sent = runner, sent

    def first_layer(self, model: GNN):
        """Layer 0 of ``model`` (activated) as a function of a block of the table, for one forward
        pass; its halo exchange runs now."""
        neighbour, root = self._transformed(model)
        halo = halo_exchange(neighbour.index_select(0, self.sent), self.runner, 0, (FORWARD_LABEL, BACKWARD_LABEL))
        table = torch.cat([neighbour, halo])
        return lambda block: model.from_rows(0, table, None if root is None else block.dst(root), block)

    def _transformed(self, model: GNN) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Every owned row's neighbour and root rows."""
        table = self.input
        if not table.streamed:
            return model.neighbour_rows(table.x), model.root_rows(table.x)
        rows = table.rows
        step = max(streaming.CHUNK_BYTES // (4 * table.store.width), 1)
        outs = [
            checkpoint(self._chunk, model, rows[a : a + step], use_reentrant=False)
            for a in range(0, rows.numel(), step)
        ]
        both = torch.cat(outs) if outs else self._chunk(model, rows)
        if not model.has_root:
            return both, None
        hidden = both.shape[1] // 2
        return both[:, :hidden], both[:, hidden:]

    def _chunk(self, model: GNN, rows: torch.Tensor) -> torch.Tensor:
        x = gathered(self.input.store, rows)
        root = model.root_rows(x)
        neighbour = model.neighbour_rows(x)
        return neighbour if root is None else torch.cat([neighbour, root], dim=1)
