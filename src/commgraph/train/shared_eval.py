"""Sampled training's evaluation pass when every worker is on one machine: layer tables held once.

The evaluation computes every node's logits layer by layer, and a layer's sources are most of the
graph (with METIS on a well-mixed graph a part's halo is several times its own rows). Held per
worker, as the full-graph executors hold them, each worker would keep node-sized tables of its
own: on a products-sized graph (2.45M nodes, hidden 256) 2.5 GB a table, 8 private copies.
:class:`SharedEvaluation` keeps each layer's table once per machine instead
(:func:`~commgraph.runtime.shared_table.shared_table`): table rows are the parts' owned rows,
part after part (worker ``r``'s rows are ``[offset_r, offset_r + owned_r)``); each worker writes
its rows of layer ``l + 1`` from the whole layer ``l`` table, read in place, and after a barrier
the machine's table for ``l`` is dropped. Layer 0 has no input table: its rows are the parts'
feature files, which every rank maps already (the rank's own rows from its feature store), so
each chunk of destinations gathers the rows its block reads (its sources and its destinations,
encoded) into a table of its own, sized by the chunk's in-edges. Only two tables live at a time;
a layer is computed in chunks of destinations (:data:`~commgraph.nn.model.EVAL_CHUNK_BYTES`), each
chunk's block built from mapped in-edges (the whole graph's that the sampler maps already,
``whole``, or the part's) with its columns renumbered into the table. The last layer's rows stay
with their worker; where that layer narrows its rows (GraphSAGE's or GCN's last layer, hidden
to classes), the layer before it writes its rows already transformed by the last layer's
weights, so the machine's last table is as narrow as the logits (products: 47 floats a row
against 256). The chunks' blocks, of varying sizes, would grow a heap that keeps freed blocks
(:func:`~commgraph.runtime.memory.keep_freed_memory`) by their fragments, so the pass runs under
:func:`~commgraph.runtime.memory.freed_blocks_returned` and hands the heap's free pages back after
each layer (:func:`~commgraph.runtime.memory.release_free_memory`).

It is used only where every rank is on one machine and reads its peers' rows in place
(``--peer-rows map``) on CPU: rows of another machine must cross the network, which the
full-graph executors do.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from commgraph.nn import GNN, Block
from commgraph.nn.model import EVAL_CHUNK_BYTES
from commgraph.runtime.features import FeatureStore
from commgraph.runtime.job import Job
from commgraph.runtime.memory import freed_blocks_returned, release_free_memory
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
        self.offsets, self.rank = offsets, rank
        self.features = [pset.part(k, check=False).features for k in range(pset.num_parts)]  # mapped
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

    def _sources(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """Owned destinations ``[start, end)``'s in-edges: their row pointers from 0, and their
        sources as table rows."""
        indptr, indices = self.in_edges
        if self.owned is None:  # the part's rows are consecutive
            span = np.asarray(indptr[start : end + 1])
            sources = np.asarray(indices[span[0] : span[-1]])
            span = span - span[0]
        else:  # the owned nodes' rows of the whole graph's CSR
            nodes = self.owned[start:end]
            first, counts = np.asarray(indptr[nodes]), np.asarray(indptr[nodes + 1]) - np.asarray(indptr[nodes])
            span = np.concatenate([[0], np.cumsum(counts)])
            sources = np.asarray(indices[np.repeat(first - span[:-1], counts) + np.arange(span[-1])])
        return span, self.columns[sources]

    def _block(self, start: int, end: int) -> Block:
        """Owned destinations ``[start, end)`` with their in-edges' sources as table rows."""
        span, sources = self._sources(start, end)
        return Block.from_csr(self.rows, span, sources, self.degree, self.start + start)

    def _input_chunks(self, rows: int) -> list[tuple[int, int]]:
        """Ranges of owned destinations whose in-edges and own rows come to about ``rows`` table
        rows (a destination with more in-edges alone)."""
        indptr = self.in_edges[0]
        if self.owned is None:
            counts = np.diff(np.asarray(indptr[: self.num_owned + 1]))
        else:
            counts = np.asarray(indptr[self.owned + 1]) - np.asarray(indptr[self.owned])
        cost = counts.astype(np.int64) + 1
        group = (np.cumsum(cost) - cost) // max(1, rows)  # by where each destination's rows begin
        bounds = np.concatenate([[0], np.flatnonzero(np.diff(group)) + 1, [self.num_owned]])
        return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]

    def _input_block(self, start: int, end: int) -> tuple[Block, torch.Tensor]:
        """Owned destinations ``[start, end)`` as a block over the rows it reads (its sources and
        its destinations, in table order), and those rows' features."""
        span, sources = self._sources(start, end)
        first = self.start + start
        rows = np.unique(np.concatenate([np.arange(first, self.start + end, dtype=sources.dtype), sources]))
        where = torch.from_numpy(rows.astype(np.int64))
        block = Block.from_csr(
            rows.shape[0], span, np.searchsorted(rows, sources), self.degree[where], int(np.searchsorted(rows, first))
        )
        return block, self._input_rows(rows)

    def _input_rows(self, rows: np.ndarray) -> torch.Tensor:
        """The features of table rows ``rows`` (sorted) as float32: this rank's from its store, the
        others' from their parts' mapped files (a part's rows are consecutive in ``rows``)."""
        x = torch.empty((rows.shape[0], self.store.width))
        bounds = np.searchsorted(rows, self.offsets)
        for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
            if b == a:
                continue
            local = rows[a:b].astype(np.int64) - self.offsets[k]
            if k == self.rank:
                x[a:b] = self.store.table[torch.from_numpy(local)]
            else:
                x[a:b] = torch.from_numpy(np.asarray(self.features[k][local]))
        return x

    def forward(self, model: GNN) -> torch.Tensor:
        """The part's logits (eval mode, without autograd), every rank of the job in step."""
        with freed_blocks_returned():
            return model.decode(self._layers(model))

    def _layers(self, model: GNN) -> torch.Tensor:
        """The last layer's output rows of the part (see :meth:`forward`). Where the last layer
        :meth:`~commgraph.nn.model.GNN.narrows` its rows, the layer before it writes them already
        transformed (the last layer's :meth:`~commgraph.nn.model.GNN.neighbour_rows` into the
        machine's table, its root rows into the worker's own): the machine's last table is as
        narrow as the logits, not as wide as the hidden rows."""
        last = model.num_layers - 1
        early = last > 0 and model.narrows(last)
        root = torch.empty((self.num_owned, model.out_width(last))) if early and model.has_root else None
        table, out = None, torch.empty((self.num_owned, model.out_width(last)))
        for index in range(model.num_layers):
            kept = early and index == last - 1  # its rows kept as the last layer's transforms
            following = None if index == last else self._table(model.out_width(last if kept else index))
            target = out if following is None else following.x[self.start : self.start + self.num_owned]
            for a, b, rows in self._layer_rows(model, index, table, root, early and index == last):
                if kept:
                    target[a:b] = model.neighbour_rows(rows, index=last)
                    if root is not None:
                        root[a:b] = model.root_rows(rows, index=last)
                else:
                    target[a:b] = rows
            release_free_memory()  # the chunks' blocks and rows
            self._barrier()  # every worker has read this table and written the next
            if table is not None:
                table.close()
            table = following
        return out

    def _layer_rows(
        self, model: GNN, index: int, table: SharedTable | None, root: torch.Tensor | None, transformed: bool
    ) -> Iterator[tuple[int, int, torch.Tensor]]:
        """Layer ``index``'s output rows of owned destinations ``[a, b)``, a chunk at a time: layer 0
        from the features; a layer whose inputs were written ``transformed`` from ``table``'s
        transformed rows and the destinations' ``root`` rows (None for GCN); any other layer from
        ``table``'s rows."""
        if index == 0:
            widest = max(self.store.width, model.widths[0], model.out_width(0))
            for a, b in self._input_chunks(EVAL_CHUNK_BYTES // (4 * widest)):
                block, x = self._input_block(a, b)
                yield a, b, model.layer(0, model.encode(x), block)
        elif transformed:
            for a, b in self._chunks(model.out_width(index)):
                yield a, b, model.from_rows(index, table.x, None if root is None else root[a:b], self._block(a, b))
        else:
            for a, b in self._chunks(max(model.widths[index], model.out_width(index))):
                yield a, b, model.layer(index, table.x, self._block(a, b))
