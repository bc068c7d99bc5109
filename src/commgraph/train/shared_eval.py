"""Sampled training's evaluation pass when every worker is on one machine: layer tables held once.

The evaluation computes every node's logits layer by layer, and a layer's sources are most of the
graph (with METIS on a well-mixed graph a part's halo is several times its own rows). Held per
worker, as the full-graph executors hold them, each worker would keep node-sized tables of its
own: on a products-sized graph (2.45M nodes, hidden 256) 2.5 GB a table, 8 private copies.
:class:`SharedEvaluation` keeps each layer's table once per machine instead
(:func:`~commgraph.runtime.shared_table.shared_table`): table rows are the parts' owned rows,
part after part (worker ``r``'s rows are ``[offset_r, offset_r + owned_r)``); each worker writes
its rows of layer ``l + 1`` from the whole layer ``l`` table, read in place, and after a barrier
the machine's table for ``l`` is dropped. The input table (the encoded features) is built the same
way. Only two tables live at a time; a layer is computed in chunks of destinations
(:data:`~commgraph.nn.model.EVAL_CHUNK_BYTES`), each chunk's block built from mapped in-edges (the
whole graph's that the sampler maps already, ``whole``, or the part's) with its columns renumbered
into the table. The last layer's rows stay with their worker.

It is used only where every rank is on one machine and reads its peers' rows in place
(``--peer-rows map``) on CPU: rows of another machine must cross the network, which the
full-graph executors do.
"""

from __future__ import annotations

import numpy as np
import torch

from commgraph.nn import GNN, Block
from commgraph.nn.model import EVAL_CHUNK_BYTES
from commgraph.runtime.features import FeatureStore
from commgraph.runtime.job import Job
from commgraph.runtime.shared_table import SharedTable, shared_table


class SharedEvaluation:
    """The evaluation pass over ``job``'s part through machine-shared layer tables (see the
    module's description); ``forward`` gives the part's logits in its owned order, as the
    full-graph executors do."""

    name = "shared"

    def __init__(self, job: Job, store: FeatureStore, whole: bool = False):
        self.job, self.store, self.comm = job, store, job.comm
        pset, part, rank = job.pset, job.part, job.world.rank
        owned = [pset.part(k, check=False).num_owned for k in range(pset.num_parts)]
        offsets = np.concatenate([[0], np.cumsum(owned)]).astype(np.int64)
        self.rows, self.start, self.num_owned = int(offsets[-1]), int(offsets[rank]), part.num_owned
        position = np.empty(self.rows, dtype=np.int32)  # each node's table row
        for k in range(pset.num_parts):
            position[np.asarray(pset.part(k, check=False).owned)] = np.arange(offsets[k], offsets[k + 1])
        if whole:  # the whole graph's in-edges, already mapped by the sampler: columns by global id
            self.in_edges, self.columns = pset.in_edges(), position
            self.owned = np.asarray(part.owned)
        else:  # the part's in-edges: columns by the part's local row
            halo = position[np.asarray(part.halo)]
            self.in_edges = (part.indptr, part.indices)
            self.columns = np.concatenate([np.arange(self.start, self.start + self.num_owned, dtype=np.int32), halo])
            self.owned = None
        degree = np.empty(self.rows, dtype=np.float32)
        degree[position] = np.asarray(pset.structure("degree"), dtype=np.float32)
        self.degree = torch.from_numpy(degree)
        self.machine = job.machine_ranks()
        self.feature_note = (
            f"evaluation: layer tables of {self.rows} rows held once by the machine's {len(self.machine)} worker(s)"
        )

    def _table(self, width: int) -> SharedTable:
        return shared_table(self.comm, self.machine, self.rows, width)

    def _barrier(self) -> None:
        if self.job.world.size > 1:
            self.comm.barrier()

    def _chunks(self, width: int) -> list[tuple[int, int]]:
        """Ranges of owned destinations whose rows at ``width`` take about ``EVAL_CHUNK_BYTES``."""
        step = max(1, EVAL_CHUNK_BYTES // (4 * width))
        return [(a, min(a + step, self.num_owned)) for a in range(0, self.num_owned, step)]

    def _block(self, start: int, end: int) -> Block:
        """Owned destinations ``[start, end)`` with their in-edges' sources as table rows."""
        indptr, indices = self.in_edges
        if self.owned is None:  # the part's rows are consecutive
            span = np.asarray(indptr[start : end + 1])
            sources = np.asarray(indices[span[0] : span[-1]])
        else:  # the owned nodes' rows of the whole graph's CSR
            nodes = self.owned[start:end]
            first, counts = np.asarray(indptr[nodes]), np.asarray(indptr[nodes + 1]) - np.asarray(indptr[nodes])
            span = np.concatenate([[0], np.cumsum(counts)])
            sources = np.asarray(indices[np.repeat(first - span[:-1], counts) + np.arange(span[-1])])
        return Block.from_csr(self.rows, span, self.columns[sources], self.degree, self.start + start)

    def forward(self, model: GNN) -> torch.Tensor:
        """The part's logits (eval mode, without autograd), every rank of the job in step."""
        table = self._table(model.widths[0])
        own = table.x[self.start : self.start + self.num_owned]
        for a, b in self._chunks(self.store.width):
            own[a:b] = model.encode(self.store.table[a:b].to(torch.float32))
        self._barrier()  # every worker's rows are in
        out = None
        for index in range(model.num_layers):
            last = index == model.num_layers - 1
            following = None if last else self._table(model.out_width(index))
            if last:
                out = torch.empty((self.num_owned, model.out_width(index)))
            target = out if last else following.x[self.start : self.start + self.num_owned]
            for a, b in self._chunks(max(model.widths[index], model.out_width(index))):
                target[a:b] = model.layer(index, table.x, self._block(a, b))
            self._barrier()  # every worker has read this table and written the next
            table.close()
            table = following
        return model.decode(out)
