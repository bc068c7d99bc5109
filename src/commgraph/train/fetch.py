"""A sampled step's input rows (:class:`FeatureFetch`): the worker's own from its feature store,
the same machine's from their parts' memory-mapped files, the other machines' from their owners
through the runtime's executor, as a fetch plan made for the batch. A collective: every worker
calls it at every step. :class:`~commgraph.train.owner_fetch.OwnerFetch` builds on it for
``--first-layer owner``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from commgraph.nn import GNN, Block
from commgraph.plan.allgather import plan_fetch
from commgraph.runtime import gather_halo
from commgraph.runtime.alltoall import MatchingAllToAll
from commgraph.runtime.features import FeatureStore, gathered
from commgraph.runtime.job import Job
from commgraph.sample import SampledBatch, SamplingGraph, forward_blocks


@dataclass
class Fetched:
    """A batch's input table, and what the step learnt from the others."""

    x: torch.Tensor  # one row per input node, on the device asked for; remote rows zero outside the fetched columns
    global_seeds: int  # the step's seeds on every worker
    announced_bytes: int  # column lists this worker sent
    local_bytes: int = 0  # rows read from the shared files of workers on the same machine
    owner: object = None  # --first-layer owner: the network rows' first layer from their owners (train.owner_fetch)


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


FILL_BYTES = 1 << 24  # rows are written into a batch's input table this many bytes at a time


def fill(x: torch.Tensor, at: np.ndarray, rows, columns: np.ndarray | None = None) -> None:
    """Write rows into table ``x`` in place, a chunk of :data:`FILL_BYTES` at a time, so no
    table-sized staging copy is ever made: ``rows(a, b)`` gives the values of table rows
    ``at[a:b]``, cut to ``columns`` (None: every column)."""
    width = x.shape[1] if columns is None else columns.shape[0]
    step = max(1, FILL_BYTES // (4 * max(width, 1)))
    cut = None if columns is None else torch.from_numpy(np.asarray(columns, dtype=np.int64)).to(x.device)
    for a in range(0, at.shape[0], step):
        b = min(a + step, at.shape[0])
        index = torch.from_numpy(np.asarray(at[a:b], dtype=np.int64)).to(x.device)
        values = rows(a, b).to(x.device)
        if cut is None:
            x[index] = values
        else:
            x[index.unsqueeze(1), cut.unsqueeze(0)] = values


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
        return gathered(self.store, self._index(np.searchsorted(self.owned, ids), device), device)

    def mapped_rows(self, ids: np.ndarray, owners: np.ndarray, columns: np.ndarray | None) -> torch.Tensor:
        """The rows of nodes ``ids`` that workers of this machine own (``owners``), read from their
        parts' memory-mapped feature files, cut to ``columns`` (None: all)."""
        width = self.store.width if columns is None else columns.shape[0]
        rows = np.empty((ids.shape[0], width), dtype=np.float32)
        for q in np.unique(owners):
            part = self.job.pset.part(int(q), check=False)
            pick = np.flatnonzero(owners == q)
            table = part.features[np.searchsorted(part.owned, ids[pick])]
            rows[pick] = table if columns is None else table[:, columns]
        return torch.from_numpy(rows)

    def __call__(self, batch: SampledBatch | None, device: torch.device | None = None) -> Fetched:
        """``batch``'s input table, built on ``device`` (default: the worker's; DGS's explainer puts
        its one-off table in host memory, so with ``--features host`` it never passes through the
        GPU). Rows served to other workers are gathered on the worker's device, as the exchange
        sends them from there."""
        target = device or self.device
        if self.world.size == 1:
            seeds = 0 if batch is None else int(batch.seeds.shape[0])
            return Fetched(self.local_rows(batch.input_nodes, target), seeds, 0)
        request = self.request(batch)
        halo = self._rows(request.requested, request.counts, request.wanted)
        return self.table(request, batch, target, halo)

    def step(self, batch: SampledBatch | None) -> Fetched:
        """What a training step reads: the batch's input table (see ``__call__``)."""
        return self(batch)

    def forward(self, model: GNN, fetched: Fetched, blocks: list[Block]) -> torch.Tensor:
        """``model`` on a batch's blocks and its :meth:`step`'s table: one row per seed."""
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
        """The batch's input table on ``target``: the worker's own rows, the same machine's read
        from their files, and the network's ``halo`` rows (None: left zero), remote rows cut to
        this worker's columns."""
        inputs, remote, at, mapped_at = request.inputs, request.remote, request.at, request.mapped_at
        mine = self.columns[self.world.rank]
        cut = None if mine is None or (halo is not None and halo.shape[1] == self.store.width) else mine
        x = torch.zeros((inputs.shape[0], self.store.width), device=target)
        own = np.flatnonzero(~remote)
        fill(x, own, lambda a, b: self.local_rows(inputs[own[a:b]], target))
        if halo is not None:
            fill(x, at, lambda a, b: halo[a:b], cut)
        fill(x, mapped_at, lambda a, b: self.mapped_rows(inputs[mapped_at[a:b]], request.mapped_owners[a:b], cut), cut)
        local = 4 * mapped_at.shape[0] * (self.store.width if cut is None else cut.shape[0])
        return Fetched(x, request.global_seeds, request.announced_bytes, local)

    def _rows(self, requested: np.ndarray, counts: np.ndarray, wanted: np.ndarray) -> torch.Tensor:
        """Serve ``requested`` (what each reader asked of this worker, reader after reader) and
        receive ``wanted`` (this worker's remote inputs, by owner) through one fetch plan; the rows
        arrive on the device."""
        rank, size = self.world.rank, self.world.size
        asked = np.split(requested, np.cumsum(counts[:, rank])[:-1])
        mine = np.split(wanted, np.cumsum(counts[rank])[:-1])
        pairs = {**{(rank, r): asked[r] for r in range(size)}, **{(q, rank): mine[q] for q in range(size)}}
        plan = plan_fetch(pairs, self.job.devices, self.job.topology, 4 * self.store.width)
        served = np.unique(requested)
        exchange = self.job.exchange(plan, served, wanted)
        columns = [None if c is None else torch.from_numpy(np.asarray(c, dtype=np.int64)) for c in self.columns]
        return gather_halo(self.job.layerwise(exchange), self.local_rows(served), layer=0, columns=columns)
