"""Layer 0 on features kept in host memory, a chunk of destinations at a time (PyTorch-Direct).

With ``--features host`` the feature table stays in host memory and the device reads the rows it
needs (:class:`~commgraph.runtime.features.FeatureStore`: zero-copy on a GPU). Full-graph training
reads every row at every step, so layer 0 cannot gather the whole table onto the device first: a
table larger than the device's memory would not fit. :class:`InputTable` runs layer 0 on chunks of
a block's destinations instead. A chunk

1. gathers only the rows its destinations read: its sources, from the store, and halo rows, which
   are already on the device;
2. encodes them and runs layer 0's message passing (:meth:`~commgraph.nn.GNN.conv`) on the block
   renumbered into those rows, its destinations first-to-last in the same order;
3. runs under activation checkpointing, so autograd keeps only the chunk's output: the backward
   pass gathers the chunk's rows again and recomputes it.

The chunks' outputs are concatenated, then activated and dropped out as one table
(:meth:`~commgraph.nn.GNN.activate`). Message passing is computed per destination, so the output is
the whole-table layer's, and dropout draws the same mask. Device memory for layer 0's input is one
chunk's rows, about ``CHUNK_BYTES``; the price is that every input row crosses to the device twice
per training step (once in evaluation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from commgraph.nn import GNN, Block
from commgraph.runtime.features import FeatureStore, gathered

CHUNK_BYTES = 1 << 28  # layer 0's gathered input rows per chunk, estimated from the chunk's edges


@dataclass(frozen=True)
class _Chunk:
    """A range of a block's destinations, as a block of its own over the rows it reads."""

    block: Block  # sources renumbered 0..n-1 in table order; its destinations are among them
    stored: torch.Tensor  # store rows of the sources the store holds (the first ones)
    extra: torch.Tensor  # rows of the extra table of the other sources (the last ones)


class InputTable:
    """Layer 0's input table: its first rows are store rows ``rows``, the rest are ``extra``'s (a
    worker's halo rows, on the device). The table is either built once, whole, or streamed chunk by
    chunk at every use; a streamed table keeps each block's chunks (their renumbered edges and row
    lists, about one more copy of layer 0's edges) on the device for the whole run.

    Args:
        store: the feature table; its ``device`` is where layer 0 runs.
        rows: ``[num_stored]`` int64 on that device: the store row of each leading table row;
            ``None`` for all of the store's rows in order.
        extra: ``[num_extra, width]`` rows after them, or ``None`` when there are none.
        streamed: stream the table; by default exactly when the store is in host memory. A table
            used only for evaluation is streamed from any store, so it is never a second copy.
    """

    def __init__(
        self,
        store: FeatureStore,
        rows: torch.Tensor | None = None,
        extra: torch.Tensor | None = None,
        streamed: bool | None = None,
    ):
        self.streamed = self.streams(store, streamed)
        extra = extra if extra is not None else torch.empty((0, store.width), device=store.device)
        if self.streamed:
            self.x, self.store, self.extra = None, store, extra
            self.rows = rows if rows is not None else torch.arange(store.num_rows, device=store.device)
        else:
            self.x, self.store, self.rows, self.extra = _whole(store, rows, extra), None, None, None

    @staticmethod
    def streams(store: FeatureStore, streamed: bool | None = None) -> bool:
        """Whether a table of ``store`` is streamed (``streamed``, by default when the store is in
        host memory)."""
        return store.placement == "host" if streamed is None else streamed

    @classmethod
    def built(cls, table: torch.Tensor) -> InputTable:
        """A table built once by the caller (e.g. with :func:`owned_table`, its halo rows landed in
        place by the exchange)."""
        made = cls.__new__(cls)
        made.streamed, made.x, made.store, made.rows, made.extra = False, table, None, None, None
        return made

    def first_layer(self, model: GNN):
        """Layer 0 of ``model`` (activated) as a function of a block of this table, for one forward
        pass: ``block -> [block.num_dst, out_width]``."""
        if self.streamed:
            return lambda block: self._streamed(model, block)
        table = model.encode(self.x)
        return lambda block: model.layer(0, table, block)

    def _streamed(self, model: GNN, block: Block) -> torch.Tensor:
        if "streamed" not in block.cache:
            block.cache["streamed"] = self._chunks(block)
        outs = [
            checkpoint(self._conv, model, chunk, use_reentrant=False, preserve_rng_state=False)
            for chunk in block.cache["streamed"]
        ]
        return model.activate(0, outs[0] if len(outs) == 1 else torch.cat(outs))

    def _conv(self, model: GNN, chunk: _Chunk) -> torch.Tensor:
        x = gathered(self.store, chunk.stored)
        if chunk.extra.numel():
            x = torch.cat([x, self.extra.index_select(0, chunk.extra)])
        return model.conv(0, model.encode(x), chunk.block)

    def _chunks(self, block: Block) -> list[_Chunk]:
        """``block`` cut into ranges of destinations whose input rows take about ``CHUNK_BYTES``."""
        src, dst = block.edges()
        order = torch.argsort(dst, stable=True)
        src, dst = src[order], dst[order]
        counts = torch.bincount(dst, minlength=block.num_dst).cpu().numpy()
        offsets = np.concatenate([[0], np.cumsum(counts)])
        ends = chunk_ends(counts + 1, max(CHUNK_BYTES // (4 * self.store.width), 1))
        chunks, start = [], 0
        for end in ends:
            a, b = int(offsets[start]), int(offsets[end])
            own = torch.arange(block.dst_start + start, block.dst_start + end, device=src.device)
            sources, position = torch.unique(torch.cat([own, src[a:b]]), return_inverse=True)
            first = int((sources < block.dst_start + start).sum())  # the destinations' own rows start here
            edges = torch.stack([position[own.numel() :], dst[a:b] - start])
            sub = Block(int(sources.numel()), int(end - start), edges, block.src_degree[sources], first)
            held = sources < self.rows.numel()
            chunks.append(_Chunk(sub, self.rows[sources[held]], sources[~held] - self.rows.numel()))
            start = int(end)
        return chunks


def _whole(store: FeatureStore, rows: torch.Tensor | None, extra: torch.Tensor) -> torch.Tensor:
    """The table built once: the store's own table when that is the table, else one allocation
    filled in place (the store's table and this one are the peak, never a third copy)."""
    if rows is None and extra.shape[0] == 0 and store.placement not in ("host", "disk"):
        return store.table
    x = owned_table(store, rows, extra.shape[0])
    x[x.shape[0] - extra.shape[0] :] = extra
    return x


def owned_table(store: FeatureStore, rows: torch.Tensor | None, extra_rows: int) -> torch.Tensor:
    """One allocation of the store's rows ``rows`` (None: all, in order) followed by
    ``extra_rows`` rows left for the caller to fill."""
    owned = store.num_rows if rows is None else rows.shape[0]
    x = torch.empty((owned + extra_rows, store.width), device=store.device)
    if rows is None:
        x[:owned] = store.table
    elif store.placement not in ("host", "disk"):
        torch.index_select(store.table, 0, rows, out=x[:owned])
    else:
        x[:owned] = gathered(store, rows)
    return x


def chunk_ends(cost: np.ndarray, limit: int) -> np.ndarray:
    """Ends of consecutive ranges of items with ``cost`` each (at least one item per range) whose
    costs add up to at most ``limit``, except a range of one item that alone exceeds it. No items
    make one empty range."""
    if cost.size == 0:
        return np.zeros(1, dtype=np.int64)
    ends, start, total = [], 0, np.cumsum(cost)
    while start < cost.size:
        before = total[start - 1] if start else 0
        end = max(int(np.searchsorted(total, before + limit, side="right")), start + 1)
        ends.append(end)
        start = end
    return np.array(ends, dtype=np.int64)
