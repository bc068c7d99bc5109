"""``--first-layer owner`` in sampled training: a batch's network rows arrive as their first layer,
computed by their owners (see :mod:`commgraph.train.owner`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from commgraph.nn import GNN, Block, RowTransform
from commgraph.runtime.features import FeatureStore
from commgraph.runtime.owner import rows_to_readers, settle
from commgraph.sample import SampledBatch
from commgraph.train.fetch import FeatureFetch, Fetched, Request, first_layer_rows, later_layers


@dataclass
class OwnerRows:
    """A batch's first-layer rows received from their owners, and where they go."""

    received: torch.Tensor  # owner after owner: its neighbour rows, then its root rows
    neighbour: torch.Tensor  # rows of ``received`` that are neighbour rows, in ``at``'s order
    at: torch.Tensor  # their input-table positions
    root: torch.Tensor  # rows of ``received`` that are root rows (GraphSAGE's destinations)
    dst_at: torch.Tensor  # their destination positions


class OwnerFetch(FeatureFetch):
    """:class:`~commgraph.train.fetch.FeatureFetch` whose training steps receive the network's
    rows as the first layer of ``model`` computed by their owners (see the module's docstring):
    a :class:`~commgraph.nn.RowTransform`, the trainer's :class:`~commgraph.nn.GNN` or the
    bridge's :class:`~commgraph.pyg.first_layer.LinearFirstLayer` (None until the bridge's model
    is wrapped). The one-off tables (DGS's explanation graph) still fetch features."""

    def __init__(self, job, store: FeatureStore, graph, model: RowTransform | None, peer_rows: str = "map"):
        super().__init__(job, store, graph, peer_rows)
        self.model = model

    def step(self, batch: SampledBatch | None) -> Fetched:
        if self.world.size == 1:
            return replace_owner(self(batch), self.device)
        request = self.request(batch)
        return self.receive(request, self.table(request, batch, self.device, None))

    def receive(self, request: Request, fetched: Fetched) -> Fetched:
        """``fetched`` with the first layer of its network rows from their owners (``owner``),
        each worker serving what ``request`` asks of it with ``model``'s weights as they are now;
        a collective, differentiable with respect to the served rows."""
        dst = request.dst_counts if self.model.has_root else np.zeros_like(request.dst_counts)
        received = rows_to_readers(self._served(request, dst), self.alltoall, (request.counts + dst).T)
        fetched.owner = self._placed(request, dst, received)
        return fetched

    def forward(self, model: GNN, fetched: Fetched, blocks: list[Block]) -> torch.Tensor:
        return owner_forward(model, fetched, blocks)

    def idle(self, fetched: Fetched) -> None:
        settle_idle(fetched)

    def _served(self, request: Request, dst: np.ndarray) -> torch.Tensor:
        """The rows the readers asked of this worker, reader after reader: each reader's neighbour
        rows, then the root rows of its destinations (the first ``dst[reader, rank]`` it asked
        for), of the rows cut to the reader's announced columns. Each distinct row is gathered
        once; each reader's columns mask the weights, not a copy of its rows."""
        rank, model = self.world.rank, self.model
        asked = request.counts[:, rank]
        if not request.requested.size:
            return model.neighbour_rows(torch.zeros((0, self.store.width), device=self.device))
        rows, index = np.unique(request.requested, return_inverse=True)
        x = self.local_rows(rows)
        starts = np.concatenate([[0], np.cumsum(asked)])
        pieces, made = [], {}  # made: the transforms of every distinct row, per column list
        for reader in np.flatnonzero(asked):
            key = id(self.columns[reader])
            if key not in made:
                keep = self._keep(reader, x.device)
                made[key] = (model.neighbour_rows(x, keep), model.root_rows(x, keep) if dst[:, rank].any() else None)
            neighbour, root = made[key]
            at = torch.from_numpy(index[starts[reader] : starts[reader + 1]]).to(x.device)
            pieces.append(neighbour.index_select(0, at))
            if dst[reader, rank]:
                pieces.append(root.index_select(0, at[: dst[reader, rank]]))
        return torch.cat(pieces)

    def _keep(self, reader: int, device: torch.device) -> torch.Tensor | None:
        """1 for each column ``reader`` announced, 0 for the others (None: it reads every column)."""
        columns = self.columns[reader]
        if columns is None:
            return None
        keep = torch.zeros(self.store.width, device=device)
        keep[torch.from_numpy(np.asarray(columns, dtype=np.int64)).to(device)] = 1.0
        return keep

    def _placed(self, request: Request, dst: np.ndarray, received: torch.Tensor) -> OwnerRows:
        """Where the received rows go: owner ``q``'s share is its neighbour rows for this worker's
        inputs from ``q`` (``at``'s order), then the root rows of the first ``dst[rank, q]`` of them."""
        rank = self.world.rank
        asked, roots = request.counts[rank], dst[rank]
        starts = np.concatenate([[0], np.cumsum(asked + roots)])
        firsts = np.concatenate([[0], np.cumsum(asked)])
        neighbour = np.concatenate(
            [np.zeros(0, np.int64)] + [np.arange(starts[q], starts[q] + asked[q]) for q in range(len(asked))]
        )
        root = np.concatenate(
            [np.zeros(0, np.int64)] + [np.arange(starts[q] + asked[q], starts[q + 1]) for q in range(len(asked))]
        )
        dst_at = np.concatenate(
            [np.zeros(0, np.int64)] + [request.at[firsts[q] : firsts[q] + roots[q]] for q in range(len(asked))]
        )
        device = received.device
        return OwnerRows(received, *(torch.from_numpy(v).to(device) for v in (neighbour, request.at, root, dst_at)))


def replace_owner(fetched: Fetched, device: torch.device) -> Fetched:
    """A fetch with nothing from other workers, as the owner's forward reads it."""
    empty = torch.zeros(0, dtype=torch.int64, device=device)
    fetched.owner = OwnerRows(torch.zeros((0, 1), device=device), empty, empty, empty, empty)
    return fetched


def owner_forward(model: GNN, fetched: Fetched, blocks: list[Block]) -> torch.Tensor:
    """``model`` on a sampled batch whose network rows' first layer came from their owners: one row
    per seed, the same as :func:`~commgraph.sample.forward_blocks` on the fetched features."""
    neighbour, root = with_owner_rows(fetched.owner, *first_layer_rows(model, fetched.rows, blocks[0].num_dst))
    return later_layers(model, model.from_rows(0, neighbour, root, blocks[0]), blocks)


def with_owner_rows(
    rows: OwnerRows, neighbour: torch.Tensor, root: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Layer 0's neighbour rows of the table and root rows of its destinations, computed here,
    with the network rows' replaced by those their owners sent (``rows``)."""
    if rows.at.numel():
        neighbour = neighbour.index_copy(0, rows.at, rows.received.index_select(0, rows.neighbour))
    if root is not None and rows.dst_at.numel():
        root = root.index_copy(0, rows.dst_at, rows.received.index_select(0, rows.root))
    return neighbour, root


def settle_idle(fetched: Fetched) -> None:
    """A step without a batch still answers its owners' backward exchange (see
    :func:`~commgraph.runtime.owner.settle`)."""
    if fetched.owner is not None:
        settle(fetched.owner.received)
