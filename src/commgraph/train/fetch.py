"""A sampled step's input rows (:class:`FeatureFetch`): the worker's own from its feature store,
the same machine's from their parts' memory-mapped files, the other machines' from their owners
through the runtime's executor, as a fetch plan made for the batch. A collective: every worker
calls it at every step. :class:`~commgraph.train.owner_fetch.OwnerFetch` builds on it for
``--first-layer owner``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from commgraph.nn import GNN, Block
from commgraph.nn.aggregate import Aggregated, TableRows, aggregate_output, aggregate_rows, aggregate_table
from commgraph.partition.store import owned_positions
from commgraph.plan.allgather import plan_fetch
from commgraph.plan.memory import INPUT_CHUNK_BYTES
from commgraph.runtime import gather_halo
from commgraph.runtime.alltoall import MatchingAllToAll
from commgraph.runtime.features import FeatureStore, gathered
from commgraph.runtime.job import Job
from commgraph.sample import SampledBatch, SamplingGraph, forward_blocks

OWN, MAPPED, NETWORK = 0, 1, 2  # where a table row comes from: this worker, a peer's file, the network


@dataclass
class InputRows:
    """A batch's input table as where its rows come from, read a range or a list of rows at a time
    (:meth:`read`, :meth:`take`): the worker's own rows from its feature store, the same machine's
    from their parts' memory-mapped files, the network's from the ``halo`` rows received (None:
    left zero);
    remote rows cut to ``cut``'s columns, the others zero. Reading a range again gives the same
    values, so a layer that only needs the table through a linear map never holds it whole
    (:func:`first_layer_rows`); :meth:`table` builds it whole for the layers that do."""

    fetch: FeatureFetch  # reads own and mapped rows
    inputs: np.ndarray  # the batch's input nodes, one per table row
    source: np.ndarray  # per table row: OWN, MAPPED or NETWORK
    slot: np.ndarray  # per table row: its index into ``mapped_owners`` (MAPPED) or ``halo`` (NETWORK)
    mapped_owners: np.ndarray  # the owners of the MAPPED rows
    halo: torch.Tensor | None  # the NETWORK rows as received
    cut: np.ndarray | None  # the columns of remote rows (None: all)
    device: torch.device

    @property
    def num_rows(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def width(self) -> int:
        return self.fetch.store.width

    @property
    def chunk_rows(self) -> int:
        """Rows read at a time: :data:`INPUT_CHUNK_BYTES` of them."""
        return max(1, INPUT_CHUNK_BYTES // (4 * max(self.width, 1)))

    def read(self, a: int, b: int) -> torch.Tensor:
        """Table rows ``a..b-1``, as a tensor of their own on the device."""
        return self.take(np.arange(a, b))

    def take(self, positions: np.ndarray) -> torch.Tensor:
        """The table's rows at ``positions`` (repeats allowed), as a tensor of their own on the device;
        the time it takes is added to the fetch's ``gather_seconds``."""
        started = time.perf_counter()
        try:
            return self._take(positions)
        finally:
            self.fetch.gather_seconds += time.perf_counter() - started

    def _take(self, positions: np.ndarray) -> torch.Tensor:
        source, slot = self.source[positions], self.slot[positions]
        own, mapped, network = (np.flatnonzero(source == kind) for kind in (OWN, MAPPED, NETWORK))
        if own.size == positions.shape[0]:
            return self.fetch.local_rows(self.inputs[positions], self.device)
        x = torch.zeros((positions.shape[0], self.width), device=self.device)
        if own.size:
            x[self._index(own)] = self.fetch.local_rows(self.inputs[positions[own]], self.device)
        if mapped.size:
            rows = self.fetch.mapped_rows(self.inputs[positions[mapped]], self.mapped_owners[slot[mapped]], self.cut)
            self._put(x, mapped, rows.to(self.device))
        if network.size and self.halo is not None:
            self._put(x, network, self.halo[self._index(slot[network], self.halo.device)].to(self.device))
        return x

    def aggregate(self, adjacency: torch.Tensor, mean: bool, dst_start: int) -> Aggregated:
        """Layer 0's aggregates of the table's rows (:mod:`commgraph.nn.aggregate`): straight from
        the float32 host tables the rows lie in (the worker's feature table, the same machine's
        parts' mapped files) by a compiled kernel where no row crosses the network
        (:func:`~commgraph.nn.aggregate.aggregate_table`, its time added to the fetch's
        ``gather_seconds``), else a chunk of entries at a time through :meth:`take`; the same sums
        either way, bit for bit. The mapped rows' bytes are the fetch's ``local_bytes`` either way
        (:meth:`FeatureFetch.table`)."""
        direct = self._table_rows()
        if direct is None:
            return aggregate_rows(self.take, adjacency, mean, self.chunk_rows, dst_start)
        started = time.perf_counter()
        try:
            return aggregate_table(direct, adjacency, mean, dst_start)
        finally:
            self.fetch.gather_seconds += time.perf_counter() - started

    def _table_rows(self) -> TableRows | None:
        """The table as rows of host tables: the worker's own rows in its feature table, the
        mapped rows in their owners' memory-mapped feature files (None: a row comes from the
        network, remote rows are cut to columns, the store is on a GPU or cached, or a table is not
        a C-contiguous float32 array)."""
        store = self.fetch.store
        table = store.table
        if self.device.type != "cpu" or store.method != "index_select" or table.device.type != "cpu":
            return None
        if table.dtype != torch.float32 or bool((self.source == NETWORK).any()):
            return None
        own = table.numpy()
        if not TableRows.holds(own):
            return None
        mapped = np.flatnonzero(self.source == MAPPED)
        if mapped.size == 0:
            return TableRows.one(own, owned_positions(self.fetch.owned, self.inputs))
        if self.cut is not None:
            return None
        tables, index, rows = [own], np.zeros(self.num_rows, np.int8), np.empty(self.num_rows, np.int64)
        mine = np.flatnonzero(self.source == OWN)
        rows[mine] = owned_positions(self.fetch.owned, self.inputs[mine])
        owners = self.mapped_owners[self.slot[mapped]]
        for q in np.unique(owners):
            part = self.fetch.job.pset.part(int(q), check=False)
            if not TableRows.holds(part.features):
                return None
            pick = mapped[owners == q]
            index[pick], rows[pick] = len(tables), owned_positions(part.owned, self.inputs[pick])
            tables.append(part.features)
        return TableRows(tuple(tables), index, rows)

    def table(self) -> torch.Tensor:
        """The whole table, written in place a chunk of :data:`INPUT_CHUNK_BYTES` at a time (no
        table-sized staging copy)."""
        x = torch.empty((self.num_rows, self.width), device=self.device)
        for a in range(0, self.num_rows, self.chunk_rows):
            b = min(a + self.chunk_rows, self.num_rows)
            x[a:b] = self.read(a, b)
        return x

    def _index(self, positions: np.ndarray, device: torch.device | None = None) -> torch.Tensor:
        return torch.from_numpy(np.asarray(positions, dtype=np.int64)).to(device or self.device)

    def _put(self, x: torch.Tensor, positions: np.ndarray, rows: torch.Tensor) -> None:
        """Write remote ``rows`` (cut to ``cut``'s columns unless it is None) at ``positions``."""
        index = self._index(positions)
        if self.cut is None:
            x[index] = rows
        else:
            x[index.unsqueeze(1), self._index(self.cut).unsqueeze(0)] = rows


@dataclass
class Fetched:
    """A batch's input table, and what the step learnt from the others."""

    rows: InputRows  # one row per input node, read on demand; remote rows zero outside the fetched columns
    global_seeds: int  # the step's seeds on every worker
    announced_bytes: int  # column lists this worker sent
    local_bytes: int = 0  # rows read from the shared files of workers on the same machine
    owner: object = None  # --first-layer owner: the network rows' first layer from their owners (train.owner_fetch)

    @cached_property
    def x(self) -> torch.Tensor:
        """The whole input table (built on first use)."""
        return self.rows.table()


@dataclass
class Request:
    """What a step's fetch asks of the other workers, once they have told each other (a batch's
    remote inputs over the network, by owner; those of the same machine's workers, read locally)."""

    inputs: np.ndarray  # the batch's input nodes
    remote: np.ndarray  # which of them other workers own
    at: np.ndarray  # positions in ``inputs`` of the rows that cross the network, owner after owner
    mapped_at: np.ndarray  # positions of the rows read from the same machine's files
    mapped_owners: np.ndarray  # their owners
    counts: np.ndarray  # [reader, owner]: rows each worker asks of each
    dst_counts: np.ndarray  # [reader, owner]: of those, the first layer's destinations (first in each owner's share)
    requested: np.ndarray  # ids asked of this worker, reader after reader
    global_seeds: int
    announced_bytes: int

    @property
    def wanted(self) -> np.ndarray:
        return self.inputs[self.at]


def first_layer_rows(model: GNN, rows: InputRows, num_dst: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Layer 0's :meth:`~commgraph.nn.GNN.neighbour_rows` of every table row and
    :meth:`~commgraph.nn.GNN.root_rows` of its first ``num_dst`` (the destinations), computed a
    chunk of rows at a time from ``rows``: the backward pass reads each chunk again
    (``torch.utils.checkpoint``) instead of keeping the table, so no input-wide tensor outlives
    its chunk."""

    def chunked(transform, n: int) -> torch.Tensor:
        step = rows.chunk_rows
        return torch.cat(
            [
                checkpoint(lambda a, b: transform(rows.read(a, b)), a, min(a + step, n), use_reentrant=False)
                for a in range(0, n, step)
            ]
        )

    neighbour = chunked(model.neighbour_rows, rows.num_rows)
    return neighbour, chunked(model.root_rows, num_dst) if model.has_root else None


def first_layers_aggregated(model: GNN, rows: InputRows, blocks: list[Block]) -> tuple[torch.Tensor, int]:
    """The first layers of a model whose layer 0 does not narrow its rows
    (:attr:`~commgraph.nn.GNN.first_aggregates`), aggregating before they transform
    (:mod:`commgraph.nn.aggregate`): the input rows are read a chunk of entries at a time, where
    they lie, and added into layer 0's aggregates (its destinations' rows at the input width; no
    gradient, so no chunk is read twice); with a second layer, layer 0's output is then made a
    chunk of its destinations at a time and added into layer 1's aggregates, so neither the input
    table nor layer 0's output is ever held whole. Returns the last of those layers' output and how
    many layers it is."""
    adjacency, mean = model.aggregation(0, blocks[0])
    first = rows.aggregate(adjacency, mean, blocks[0].dst_start)
    if model.num_layers == 1:
        return model.from_aggregated(0, first.rows, first.x_dst), 1
    adjacency, mean = model.aggregation(1, blocks[1])
    second = aggregate_output(
        lambda a, b: model.transform(0, first.rows[a:b], first.x_dst[a:b]),
        list(model.convs[0].parameters()),
        blocks[0].num_dst,
        adjacency,
        mean,
        num_dst=blocks[1].num_dst,
        dst_start=blocks[1].dst_start,
        step=max(1, INPUT_CHUNK_BYTES // (4 * model.out_width(0))),
        p=model.dropout,
        training=model.training,
    )
    return model.from_aggregated(1, second.rows, second.x_dst), 2


def later_layers(model: GNN, h: torch.Tensor, blocks: list[Block], start: int = 1) -> torch.Tensor:
    """Layers ``start``.. on ``blocks[start:]`` from layer ``start - 1``'s output ``h``, then the
    decoder: one row per seed."""
    for index, block in enumerate(blocks[start:], start=start):
        h = model.layer(index, h, block)
    return model.decode(h)


class FeatureFetch:
    """A batch's input rows: the worker's own from its feature store, those of workers on the same
    machine straight from their parts' memory-mapped files (``local`` bytes: no message, no copy
    beside the table), and the other machines' from their owners through the runtime's executor
    (see the module's docstring). Called by every worker at every step, in step: it is a
    collective.

    The worker's features are the trainer's :class:`~commgraph.runtime.features.FeatureStore`,
    placed as ``--features`` says: on a GPU, in GPU memory or in pinned host memory that GPU
    threads read directly (PyTorch-Direct), so only a batch's rows reach the device, and both the
    rows it serves to other workers and its own input table are gathered there. ``--peer-rows
    network`` fetches the same machine's rows through the executor too, as if every worker were a
    machine of its own (what the thesis's byte counts assume)."""

    gather_seconds = 0.0  # the time its input rows' reads took (:meth:`InputRows.take`), ever

    def __init__(self, job: Job, store: FeatureStore, graph: SamplingGraph, peer_rows: str = "map"):
        self.job, self.comm, self.world, self.graph, self.device = job, job.comm, job.world, graph, job.device
        self.owned = np.asarray(job.part.owned)
        self.store = store
        self.columns: list[np.ndarray | None] = [None] * job.world.size  # each worker's last announced columns
        self.alltoall = MatchingAllToAll(self.comm)
        machine = job.machine_ranks() if job.world.size > 1 else np.zeros(0, np.int64)
        self.peers = machine[machine != job.world.rank] if peer_rows == "map" else np.zeros(0, np.int64)

    def _index(self, positions: np.ndarray, device: torch.device | None = None) -> torch.Tensor:
        return torch.from_numpy(np.asarray(positions, dtype=np.int64)).to(device or self.device)

    def local_rows(self, ids: np.ndarray, device: torch.device | None = None) -> torch.Tensor:
        """The rows of owned nodes ``ids`` (global ids), on ``device`` (default: the worker's)."""
        return gathered(self.store, self._index(owned_positions(self.owned, ids), device), device)

    def mapped_rows(self, ids: np.ndarray, owners: np.ndarray, columns: np.ndarray | None) -> torch.Tensor:
        """The rows of nodes ``ids`` that workers of this machine own (``owners``), read from their
        parts' memory-mapped feature files, cut to ``columns`` (None: all)."""
        width = self.store.width if columns is None else columns.shape[0]
        rows = np.empty((ids.shape[0], width), dtype=np.float32)
        for q in np.unique(owners):
            part = self.job.pset.part(int(q), check=False)
            pick = np.flatnonzero(owners == q)
            table = part.features[owned_positions(part.owned, ids[pick])]
            rows[pick] = table if columns is None else table[:, columns]
        return torch.from_numpy(rows)

    def __call__(self, batch: SampledBatch | None, device: torch.device | None = None) -> Fetched:
        """``batch``'s input table, built on ``device`` (default: the worker's; DGS's explainer puts
        its one-off table in host memory, so with ``--features host`` it never passes through the
        GPU). Rows served to other workers are gathered on the worker's device, as the exchange
        sends them from there."""
        target = device or self.device
        if self.world.size == 1:
            inputs = batch.input_nodes
            own = np.zeros(inputs.shape[0], np.int8)
            rows = InputRows(self, inputs, own, own, own, None, None, target)
            return Fetched(rows, int(batch.seeds.shape[0]), 0)
        request = self.request(batch)
        return self.table(request, batch, target, self.network_rows(request))

    def step(self, batch: SampledBatch | None) -> Fetched:
        """What a training step reads: the batch's input table (see ``__call__``)."""
        return self(batch)

    def forward(self, model: GNN, fetched: Fetched, blocks: list[Block]) -> torch.Tensor:
        """``model`` on a batch's blocks and its :meth:`step`'s table: one row per seed. A first
        layer that is linear in its rows (GCN, GraphSAGE) reads the table a chunk at a time: one
        that narrows them transforms each chunk (:func:`first_layer_rows`), one that does not
        aggregates them first (:func:`first_layers_aggregated`); the others read the whole table."""
        if model.first_narrows:
            neighbour, root = first_layer_rows(model, fetched.rows, blocks[0].num_dst)
            return later_layers(model, model.from_rows(0, neighbour, root, blocks[0]), blocks)
        if model.first_aggregates:
            h, done = first_layers_aggregated(model, fetched.rows, blocks)
            return later_layers(model, h, blocks, done)
        return forward_blocks(model, fetched.x, blocks)

    def idle(self, fetched: Fetched) -> None:
        """What a step without a batch still owes the others after its :meth:`step` (nothing here)."""

    def request(self, batch: SampledBatch | None) -> Request:
        """Tell every worker what this one asks of it (and DGS's columns when they change), and
        learn what they ask of this one; a collective."""
        rank, size = self.world.rank, self.world.size
        inputs = np.empty(0, np.int64) if batch is None else batch.input_nodes
        remote = np.zeros(0, bool) if batch is None else batch.remote_input
        at = np.flatnonzero(remote)
        owners = self.graph.owner[inputs[at]]
        near = np.isin(owners, self.peers)
        mapped_at, mapped_owners, at, owners = at[near], owners[near], at[~near], owners[~near]
        order = np.argsort(owners, kind="stable")
        at, owners = at[order], owners[order]  # remote inputs by owner
        num_dst = 0 if batch is None else int(batch.layers[0].dst.shape[0])
        columns = None if batch is None else batch.feature_columns
        announce = columns if columns is not None and not np.array_equal(columns, self.columns[rank]) else None
        num_seeds = 0 if batch is None else int(batch.seeds.shape[0])
        meta = self.comm.all_gather_object(
            (
                np.bincount(owners, minlength=size).tolist(),
                num_seeds,
                announce,
                np.bincount(owners[at < num_dst], minlength=size).tolist(),
            )
        )
        counts = np.array([m[0] for m in meta], dtype=np.int64)
        for r, m in enumerate(meta):
            if m[2] is not None:
                self.columns[r] = m[2]
        requested = torch.empty(int(counts[:, rank].sum()), dtype=torch.int64)
        self.alltoall(requested, torch.from_numpy(inputs[at]), counts, label="requests")
        return Request(
            inputs,
            remote,
            at,
            mapped_at,
            mapped_owners,
            counts,
            np.array([m[3] for m in meta], dtype=np.int64),
            requested.numpy(),
            sum(m[1] for m in meta),
            0 if announce is None else 8 * announce.shape[0] * (size - 1),
        )

    def table(
        self, request: Request, batch: SampledBatch | None, target: torch.device, halo: torch.Tensor | None
    ) -> Fetched:
        """The batch's input table on ``target``, read on demand (:class:`InputRows`): the worker's
        own rows, the same machine's read from their files, and the network's ``halo`` rows (None:
        left zero), remote rows cut to this worker's columns."""
        inputs, at, mapped_at = request.inputs, request.at, request.mapped_at
        mine = self.columns[self.world.rank]
        cut = None if mine is None or (halo is not None and halo.shape[1] == self.store.width) else mine
        source = np.full(inputs.shape[0], OWN, np.int8)
        slot = np.zeros(inputs.shape[0], np.int64)
        source[mapped_at], slot[mapped_at] = MAPPED, np.arange(mapped_at.shape[0])
        source[at], slot[at] = NETWORK, np.arange(at.shape[0])
        rows = InputRows(self, inputs, source, slot, request.mapped_owners, halo, cut, target)
        local = 4 * mapped_at.shape[0] * (self.store.width if cut is None else cut.shape[0])
        return Fetched(rows, request.global_seeds, request.announced_bytes, local)

    def network_rows(self, request: Request, label: str = "features") -> torch.Tensor:
        """This fetch's store's rows for ``request``: serve what each reader asked of this worker
        and receive ``request.wanted`` (this worker's network rows, by owner, in that order) through
        one fetch plan; the rows arrive on the device. ``request`` may come from another fetch of
        the same job (:meth:`request`), so a second table of the same nodes (labels beside
        features) costs no second request. The rows' bytes count as ``label``. A collective."""
        requested, counts, wanted = request.requested, request.counts, request.wanted
        rank, size = self.world.rank, self.world.size
        asked = np.split(requested, np.cumsum(counts[:, rank])[:-1])
        mine = np.split(wanted, np.cumsum(counts[rank])[:-1])
        pairs = {**{(rank, r): asked[r] for r in range(size)}, **{(q, rank): mine[q] for q in range(size)}}
        plan = plan_fetch(pairs, self.job.devices, self.job.topology, 4 * self.store.width)
        served = np.unique(requested)
        exchange = self.job.exchange(plan, served, wanted)
        columns = [None if c is None else torch.from_numpy(np.asarray(c, dtype=np.int64)) for c in self.columns]
        return gather_halo(self.job.layerwise(exchange), self.local_rows(served), layer=0, columns=columns, label=label)
