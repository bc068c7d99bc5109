"""How one worker runs a model's forward pass over its part: three exchange strategies.

- ``pipelined`` (G3): bins in priority order; each finished bin's boundary rows leave at once; the
  next layer runs whichever bin has all its inputs (eager), so interior bins overlap the transfers.
- ``barrier`` (NeuGraph-style): a layer computes all its rows, then exchanges, then the next layer.
- ``replicate`` (DGL-style): the L-hop in-neighbourhood is held locally from the start and computed
  redundantly; nothing is exchanged per layer.

All three compute exactly the single-graph model. The exchanges follow the job's all-gather plan
(p2p, spst with relays, swap, hybrid), executed by :mod:`commgraph.runtime`; an executor only
decides which bin is computed when and tells the runtime when a bin is done or a gradient is
complete. In every backward pass the gradients of halo rows go back to their owners, which add
them up: layer-wise through the halo op (barrier), bin by bin through tensor hooks (pipelined).

Input features come from a :class:`~commgraph.runtime.features.FeatureStore` (``store``: the part's,
placed by ``auto`` unless given; ``replicate`` places its own, of its hop sets). Layer 0 reads them
through :class:`~commgraph.train.streamed.InputTable`: a table gathered once, or streamed chunk by
chunk from host memory (``streamed``: by default exactly when the store is there); with ``owner``
(``--first-layer owner``, pipelined and barrier) through :class:`~commgraph.train.owner.OwnerInput`.
"""

from __future__ import annotations

import numpy as np
import torch

from commgraph.nn import GNN, Block
from commgraph.plan.bins import RowBins, split_by_bins
from commgraph.plan.model import CommPlan
from commgraph.runtime import gather_halo, halo_exchange
from commgraph.runtime.features import FeatureStore, gathered
from commgraph.runtime.job import Job, Wiring
from commgraph.train import schedule
from commgraph.train.owner import OwnerInput
from commgraph.train.streamed import InputTable, owned_table


def row_block(
    indptr: np.ndarray, indices: np.ndarray, start: int, end: int, num_src: int, degree: torch.Tensor, device
) -> Block:
    """The block of rows ``[start, end)`` of a table of ``num_src`` rows, held as its adjacency
    (:meth:`~commgraph.nn.Block.from_csr`)."""
    span = indptr[start : end + 1]
    return Block.from_csr(num_src, span, indices[span[0] : span[-1]], degree, start).to(device)


class _Tables:
    """A part's input table (owned features from ``store``, optionally reordered, then the halo's),
    with the halo rows fetched once up front through the job's plan, layer-wise, and layer 0 on it.
    Owned features kept in host memory (``--features host``, see
    :class:`~commgraph.runtime.features.FeatureStore`) are never gathered whole onto the device:
    layer 0 streams them chunk by chunk (:class:`~commgraph.train.streamed.InputTable`; ``streamed``
    forces either way); otherwise the table is built once. With ``owner`` (``--first-layer
    owner``) the halo's feature rows are never fetched: layer 0's halo exchange moves the boundary
    rows' first layer at every step (:class:`~commgraph.train.owner.OwnerInput`)."""

    def __init__(
        self,
        job: Job,
        wiring: Wiring,
        store: FeatureStore,
        order: np.ndarray | None = None,
        streamed: bool | None = None,
        owner: bool = False,
    ):
        part, device = job.part, job.device
        self.num_owned, self.num_halo = part.num_owned, part.num_halo
        sent = np.unique(np.asarray(part.send_index))  # the rows the halo fetch reads, from the store
        first = job.layerwise(job.exchange(wiring.plan, np.asarray(part.owned)[sent], part.halo))
        degree = np.asarray(part.degree, dtype=np.float32)
        rows = None  # the store row of each owned row, in table order: the store's order
        at = sent  # the table row of each sent row
        if order is not None:  # owned rows in the executor's order; halo rows as the part has them
            rows = torch.from_numpy(order).to(device)
            degree = np.concatenate([degree[order], degree[self.num_owned :]])
            position = np.empty(self.num_owned, dtype=np.int64)
            position[order] = np.arange(self.num_owned)
            at = position[sent]
        self.degree = torch.from_numpy(degree).to(device)
        if owner:
            self.input = OwnerInput(store, rows, first, torch.from_numpy(at).to(device), streamed)
            return
        served = gathered(store, torch.from_numpy(sent).to(device))
        if InputTable.streams(store, streamed):
            self.input = InputTable(store, rows, gather_halo(first, served, layer=0), streamed=True)
        else:  # the halo rows land in the table itself
            table = owned_table(store, rows, self.num_halo)
            self.input = InputTable.built(gather_halo(first, served, layer=0, table=table))


class BarrierExecutor:
    """Layer-wise exchange of every boundary row through the job's all-gather plan, no overlap."""

    name = "barrier"

    def __init__(
        self,
        job: Job,
        wiring: Wiring,
        store: FeatureStore | None = None,
        streamed: bool | None = None,
        owner: bool = False,
    ):
        part = job.part
        store = store or FeatureStore.create(part.features, job.device)
        self.tables = _Tables(job, wiring, store, streamed=streamed, owner=owner)
        self.feature_note = store.describe()
        self.block = row_block(
            np.asarray(part.indptr),
            np.asarray(part.indices),
            0,
            part.num_owned,
            part.num_owned + part.num_halo,
            self.tables.degree,
            job.device,
        )
        self.runner = job.layerwise(job.exchange(wiring.plan, part.owned, part.halo))

    def forward(self, model: GNN) -> torch.Tensor:
        h = self.tables.input.first_layer(model)(self.block)
        for index in range(1, model.num_layers):
            table = h if self.runner.exchange.idle else torch.cat([h, halo_exchange(h, self.runner, index)])
            h = model.layer(index, table, self.block, x_dst=h)
        return model.decode(h)


class ReplicateExecutor:
    """DGL-style: the part's L-hop in-neighbourhood (read from the partition set, as DGL's halo
    partitions store it) is computed redundantly; layer ``l`` computes hop set ``S_{L-1-l}`` from
    ``S_{L-l}``, and no embedding crosses workers."""

    name = "replicate"

    def __init__(self, job: Job, layers: int, features: str = "auto", streamed: bool | None = None):
        part, pset, device = job.part, job.pset, job.device
        indptr, indices = pset.in_edges()
        nodes, sizes = schedule.hop_sets(indptr, indices, np.asarray(part.owned), layers)
        degree = torch.from_numpy(np.asarray(pset.structure("degree"))[nodes].astype(np.float32)).to(device)
        position = np.full(indptr.shape[0] - 1, -1, dtype=np.int64)
        position[nodes] = np.arange(nodes.shape[0])
        counts, sources = schedule.in_neighbours(indptr, indices, nodes[: sizes[-2]])
        local_indptr, local_indices = np.concatenate([[0], np.cumsum(counts)]), position[sources]
        self.blocks = [
            row_block(local_indptr, local_indices, 0, sizes[layers - 1 - index], sizes[layers - index], degree, device)
            for index in range(layers)
        ]
        self.num_owned = part.num_owned
        store = FeatureStore.create(pset.rows("features", nodes), device, features)
        self.feature_note = store.describe()
        self.input = InputTable(store, streamed=streamed)
        job.comm.count_as("features")

    def forward(self, model: GNN) -> torch.Tensor:
        h = self.input.first_layer(model)(self.blocks[0])
        for index, block in enumerate(self.blocks[1:], start=1):
            h = model.layer(index, h, block)
        return model.decode(h[: self.num_owned])


class PipelinedExecutor:
    """G3's bins, priorities and eager computation (see ``schedule``), forward and backward.

    Forward: each finished bin is handed to the runtime, which sends the plan's messages of that
    bin at once; a bin of the next layer runs as soon as the halo rows it reads have landed.
    Backward mirrors it: the moment a layer's table gradient is complete the runtime sends the
    halo rows' gradients back, and each bin adds the gradients of its sent rows just before
    autograd runs that bin's backward. Autograd runs bins in reverse order of computation, so the
    interior bins' backward overlaps the transfers."""

    name = "pipelined"

    def __init__(
        self,
        job: Job,
        wiring: Wiring,
        bin_size: int,
        store: FeatureStore | None = None,
        streamed: bool | None = None,
        owner: bool = False,
    ):
        part, device = job.part, job.device
        store = store or FeatureStore.create(part.features, device)
        n_owned = part.num_owned
        order, boundary = schedule.priority_order(
            np.asarray(part.indptr), np.asarray(part.indices), n_owned, np.asarray(part.send_index)
        )
        self.tables = _Tables(job, wiring, store, order, streamed, owner)
        self.feature_note = store.describe()
        indptr, indices = schedule.relabel(np.asarray(part.indptr), np.asarray(part.indices), n_owned, order)
        self.edges = schedule.bins(boundary, n_owned, bin_size)
        table_rows = n_owned + part.num_halo
        self.blocks = [
            row_block(indptr, indices, int(a), int(b), table_rows, self.tables.degree, device)
            for a, b in zip(self.edges[:-1], self.edges[1:])
        ]
        position = np.empty(n_owned, dtype=np.int64)
        position[order] = np.arange(n_owned)
        self.part_order = torch.from_numpy(position).to(device)  # output row of each part row
        exchange = job.exchange(self._binned_plan(job, wiring.plan, position), np.asarray(part.owned)[order], part.halo)
        self.runner = job.binned(exchange, self.edges)
        self.needs = []  # per bin: the receives delivering the halo rows it reads
        for a, b in zip(self.edges[:-1], self.edges[1:]):
            halo = indices[indptr[a] : indptr[b]]
            self.needs.append(exchange.receives_for(halo[halo >= n_owned] - n_owned))

    def _binned_plan(self, job: Job, plan: CommPlan, position: np.ndarray) -> CommPlan:
        """The plan split by the owners' bins; the ranks learn each other's bins once, here."""
        part = job.part
        sent = np.unique(np.asarray(part.send_index))
        mine = (np.asarray(part.owned)[sent], np.searchsorted(self.edges, position[sent], side="right") - 1)
        everyone = job.comm.all_gather_object(mine) if job.world.size > 1 else [mine]
        return split_by_bins(plan, RowBins.concat(everyone))

    def forward(self, model: GNN) -> torch.Tensor:
        first, table = self.tables.input.first_layer(model), None
        incoming = None  # layer 0's halo is the input features, already local
        streams, previous = [], [None] * len(self.blocks)
        n_owned = self.tables.num_owned
        for index in range(model.num_layers):
            last = index == model.num_layers - 1
            if not last:  # receives for the next layer's halo, posted before any computing
                following = self.runner.forward(index + 1, model.widths[index + 1])
                grads = following.backward()
                streams.append(following)
            outs = [None] * len(self.blocks)
            pending = list(range(len(self.blocks)))
            while pending:
                b = next((b for b in pending if incoming is None or incoming.ready(self.needs[b])), None)
                if b is None:  # nothing ready: block on a message the first pending bin needs
                    incoming.wait_for(self.needs[pending[0]])
                    continue
                pending.remove(b)
                out = (
                    first(self.blocks[b])
                    if index == 0
                    else model.layer(index, table, self.blocks[b], x_dst=previous[b])
                )
                if not last:
                    following.bin_done(b, out)  # this bin's boundary rows leave now
                    if out.requires_grad:
                        out.register_hook(lambda grad, b=b, grads=grads: grads.add_to_bin(b, grad))
                    following.poll()  # relayed rows leave as soon as they land
                outs[b] = out
                if incoming is not None:
                    incoming.poll()
            if incoming is not None:  # every halo row has landed; relay-only rows are forwarded
                incoming.finish()
            if last:
                h = outs[0] if len(outs) == 1 else torch.cat(outs)
            elif len(outs) == 1 and self.runner.exchange.idle:  # nothing to exchange
                table = outs[0]
            else:  # the next table: this layer's rows, then halo rows that land as they arrive
                table = torch.cat([*outs, outs[0].new_empty((self.tables.num_halo, outs[0].shape[1]))])
                if table.requires_grad:
                    table.register_hook(lambda grad, grads=grads: _start_return(grads, grad[n_owned:]))
                following.attach(table)
                incoming = following
            previous = outs
        for stream in streams:
            stream.close()
        return model.decode(h).index_select(0, self.part_order)


def _start_return(grads, grad_halo: torch.Tensor) -> None:
    """The table's gradient is complete: the halo gradients go back now, and the backward pass
    waits for all of this layer's messages before it ends."""
    grads.start(grad_halo.contiguous())
    torch.autograd.Variable._execution_engine.queue_callback(grads.finish)
