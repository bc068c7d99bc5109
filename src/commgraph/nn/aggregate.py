"""Layers that aggregate before they transform, computed a chunk of source rows at a time.

GraphSAGE and GCN multiply each destination's (weighted) sum of source rows by their weights, so a
layer needs its sources' rows only through that sum. Where a table of source rows is large and the
layer reads each row once or a few times (a sampled batch: about one edge per source row in its
outermost hop), the rows can be produced a chunk at a time and added into the destinations'
aggregates as they come, and no source-wide tensor exists:

- :func:`aggregate_rows`: the input rows of a batch (no gradient), read a chunk of destinations'
  entries at a time, one row per entry, where the table lies; where every row lies in a float32
  host table (:class:`TableRows`: the worker's own feature table, or the memory-mapped feature
  file of a peer's part on the same machine), a compiled kernel reads each entry's row straight
  from its table into its destination's sum (:func:`aggregate_table`), one pass with nothing
  entry-sized made;
- :class:`AggregateLayerOutput`: a layer's *output* rows (GraphSAGE's or GCN's layer 0, activated)
  made a chunk of its destinations at a time from that layer's aggregates and added into the next
  layer's aggregates; each chunk's pre-activation is kept with its autograd graph (its dropout mask
  too, one byte an entry), from which the backward pass returns the weights' gradients, so the
  layer's activated output is never held whole in either pass.

Either way a destination's sum adds its sources in increasing order, as the block's sparse product
does: :func:`aggregate_rows` takes the entries destination after destination, the layer's output
source after source (:class:`SourceEdges`), each source's by destination.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from numba import njit

from commgraph.nn.dropout import keep_mask, mask_scale


@dataclass
class SourceEdges:
    """A ``num_dst x num_src`` adjacency's entries ordered by source (column): ``col[e]`` reads
    source row ``col[e]`` into destination ``dst[e]`` with weight ``values[e]``; ``counts`` are
    each destination's entries (a mean's divisor)."""

    col: torch.Tensor  # int64, ascending
    dst: torch.Tensor  # int64
    values: torch.Tensor  # [E, 1]
    counts: torch.Tensor  # [num_dst] int64

    @classmethod
    def of(cls, adjacency: torch.Tensor) -> SourceEdges:
        """The entries of a sparse CSR ``adjacency`` (PyG's transposed adjacency of a block)."""
        crow = adjacency.crow_indices()
        counts = (crow[1:] - crow[:-1]).long()
        col = adjacency.col_indices().long()
        order = torch.argsort(col, stable=True)
        dst = torch.repeat_interleave(torch.arange(counts.shape[0], device=col.device), counts)[order]
        return cls(col[order], dst, adjacency.values()[order].unsqueeze(1), counts)

    def bounds(self, num_src: int, step: int) -> list[int]:
        """Where each chunk of ``step`` source rows starts among the entries (one more at the end)."""
        starts = torch.arange(0, num_src + step, step, device=self.col.device)
        return torch.searchsorted(self.col, starts).tolist()

    def pieces(self, start: int, end: int, step: int) -> list[slice]:
        """Entries ``start..end-1`` in slices of at most ``step``: a chunk's messages stay chunk-sized
        however many edges leave its sources."""
        return [slice(e, min(e + step, end)) for e in range(start, end, step)]

    def divide(self, aggregated: torch.Tensor) -> torch.Tensor:
        """``aggregated`` (sums) as means over each destination's entries (0 without any)."""
        return aggregated / self.counts.clamp(min=1).unsqueeze(1).to(aggregated.dtype)


@dataclass
class Aggregated:
    """A layer's destinations' aggregated source rows (sums, or means where the layer takes them)
    and their own source rows (``x_dst``: rows ``dst_start..dst_start + num_dst - 1`` of the
    sources; what GraphSAGE's root term reads)."""

    rows: torch.Tensor
    x_dst: torch.Tensor


def aggregate_rows(
    take: Callable[[np.ndarray], torch.Tensor],
    adjacency: torch.Tensor,
    mean: bool,
    step: int,
    dst_start: int = 0,
) -> Aggregated:
    """The aggregates of a table's rows that ``take(positions)`` reads (no gradient):
    ``adjacency`` times the rows (divided by each destination's entries when ``mean``), a chunk of
    destinations at a time, each chunk's entries (at most ``step``, or one destination's) read as
    one row per entry and added into their destinations in order; and the destinations' own rows
    (table rows ``dst_start..``), ``step`` at a time. A row that several destinations read is
    read once per entry: the table is read where it lies (a feature store, a mapped file, the
    rows received) and never held whole."""
    crow = adjacency.crow_indices().cpu().numpy()
    col = adjacency.col_indices().cpu().numpy()
    values = adjacency.values().unsqueeze(1)
    weighted = bool((values != 1).any())
    num_dst = crow.shape[0] - 1
    aggregated = x_dst = None
    with _one_thread(values.device):
        for d0, d1 in _entry_chunks(crow, step):
            e0, e1 = int(crow[d0]), int(crow[d1])
            rows = take(col[e0:e1])
            if aggregated is None:
                aggregated = rows.new_zeros((num_dst, rows.shape[1]))
            if weighted:
                rows.mul_(values[e0:e1])
            owner = torch.from_numpy(np.repeat(np.arange(d0, d1), np.diff(crow[d0 : d1 + 1]))).to(rows.device)
            aggregated.index_add_(0, owner, rows)
        for a in range(0, num_dst, step):
            rows = take(np.arange(a, min(a + step, num_dst)) + dst_start)
            if x_dst is None:
                x_dst = rows.new_empty((num_dst, rows.shape[1]))
            x_dst[a : a + rows.shape[0]] = rows
    if aggregated is None:  # no destinations
        aggregated = x_dst = take(col[:0])
    if mean:
        counts = torch.from_numpy(np.diff(crow)).to(aggregated.device)
        aggregated = aggregated.div_(counts.clamp(min=1).unsqueeze(1).to(aggregated.dtype))
    return Aggregated(aggregated, x_dst)


@dataclass
class TableRows:
    """A batch's input rows as rows of float32 host tables (``[num_rows, width]`` each, one width,
    in memory or memory-mapped): position ``p`` is row ``rows[p]`` of ``tables[index[p]]``. The
    tables are kept as read-only views, so the compiled kernel sees one array type however each
    table was opened."""

    tables: tuple[np.ndarray, ...]
    index: np.ndarray  # int8, one per position: which table
    rows: np.ndarray  # int64, one per position: the row in that table

    def __post_init__(self):
        self.tables = tuple(_read_only(table) for table in self.tables)

    @classmethod
    def one(cls, table: np.ndarray, rows: np.ndarray) -> TableRows:
        """Every position in ``table``: position ``p`` is its row ``rows[p]``."""
        return cls((table,), np.zeros(rows.shape[0], np.int8), rows)

    @staticmethod
    def holds(table: np.ndarray) -> bool:
        """Whether the kernel reads ``table`` where it lies: 2-D, float32, C-contiguous."""
        return table.ndim == 2 and table.dtype == np.float32 and table.flags.c_contiguous

    @property
    def width(self) -> int:
        return int(self.tables[0].shape[1])

    def gather(self, positions: np.ndarray) -> np.ndarray:
        """The rows at ``positions``, as a float32 array of their own."""
        if len(self.tables) == 1:
            return np.ascontiguousarray(self.tables[0][self.rows[positions]])
        out = np.empty((positions.shape[0], self.width), np.float32)
        which = self.index[positions]
        for t, table in enumerate(self.tables):
            pick = np.flatnonzero(which == t)
            out[pick] = table[self.rows[positions[pick]]]
        return out


def _read_only(table: np.ndarray) -> np.ndarray:
    """A read-only plain ``ndarray`` view of ``table`` (a memory map's too)."""
    view = np.asarray(table).view()
    view.flags.writeable = False
    return view


def aggregate_table(source: TableRows, adjacency: torch.Tensor, mean: bool, dst_start: int = 0) -> Aggregated:
    """:func:`aggregate_rows` of rows that lie in host tables, bit for bit: each destination's
    entries read straight from their tables into its sum, in the entries' order, by a compiled
    kernel (:func:`_sum_rows`, compiled once per number of tables) on torch's intra-op thread
    count, each thread a range of destinations holding about the same entries; and the
    destinations' own rows (positions ``dst_start..``) gathered once."""
    crow = adjacency.crow_indices().numpy().astype(np.int64, copy=False)
    col = adjacency.col_indices().numpy().astype(np.int64, copy=False)
    values = adjacency.values().numpy()
    num_dst = crow.shape[0] - 1
    aggregated = np.zeros((num_dst, source.width), np.float32)
    weighted = bool((values != 1).any())
    ranges = _balanced_ranges(crow, torch.get_num_threads())
    run = [
        (source.tables, source.index, source.rows, crow, col, values, weighted, d0, d1, aggregated) for d0, d1 in ranges
    ]
    threads = [threading.Thread(target=_sum_rows, args=args) for args in run[1:]]
    for thread in threads:
        thread.start()
    _sum_rows(*run[0])
    for thread in threads:
        thread.join()
    x_dst = torch.from_numpy(source.gather(np.arange(dst_start, dst_start + num_dst)))
    rows = torch.from_numpy(aggregated)
    if mean:
        rows.div_(torch.from_numpy(np.diff(crow)).clamp(min=1).unsqueeze(1).to(rows.dtype))
    return Aggregated(rows, x_dst)


def _balanced_ranges(crow: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """``parts`` consecutive destination ranges of a CSR's row pointers ``crow`` (at least one),
    cut where the entries reach each share of their total."""
    num_dst = crow.shape[0] - 1
    cuts = np.searchsorted(crow, np.linspace(0, crow[-1], max(parts, 1) + 1)[1:-1], side="left")
    bounds = np.unique(np.concatenate([[0], np.clip(cuts, 0, num_dst), [num_dst]]))
    if bounds.shape[0] == 1:
        return [(0, num_dst)]
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


@njit(nogil=True, cache=True)
def _sum_rows(tables, index, rows, crow, col, values, weighted, d0, d1, out):  # pragma: no cover - compiled
    """``out[d] += values[e] * tables[index[p]][rows[p]]`` for ``p = col[e]`` (the product left
    out when not ``weighted``) for the entries ``e`` of destinations ``d0..d1-1``, in order, summed
    in float32. ``tables`` is a tuple of same-typed arrays, indexed at run time; its length is
    known when compiled, so one table reads no ``index``."""
    width = out.shape[1]
    acc = np.empty(width, np.float32)
    one = tables[0]
    for d in range(d0, d1):
        acc[:] = out[d]
        for e in range(crow[d], crow[d + 1]):
            p = col[e]
            if len(tables) == 1:
                src = one[rows[p]]
            else:
                src = tables[index[p]][rows[p]]
            if weighted:
                w = values[e]
                for k in range(width):
                    acc[k] += src[k] * w
            else:
                for k in range(width):
                    acc[k] += src[k]
        out[d] = acc


def _entry_chunks(crow: np.ndarray, step: int) -> list[tuple[int, int]]:
    """Destination ranges of a CSR's row pointers ``crow`` holding at most ``step`` entries each
    (a destination with more entries is a range of its own)."""
    num_dst, ranges, d0 = crow.shape[0] - 1, [], 0
    while d0 < num_dst:
        d1 = int(np.searchsorted(crow, crow[d0] + step, side="right")) - 1
        d1 = min(max(d1, d0 + 1), num_dst)
        ranges.append((d0, d1))
        d0 = d1
    return ranges


@contextmanager
def _one_thread(device: torch.device):
    """Torch's intra-op threads held to one on a CPU while a chunk's few milliseconds of gathering
    and adding run: torch splits such a call so finely that, on a CPU shared with other processes,
    it waits on its descheduled threads (measured at load 2.5, 768k entries of 100 floats in 70
    chunks: 0.17 s on one thread against 1.06 s on two; at load 9, 10k rows: 2.6 ms against
    100-135 ms)."""
    threads = torch.get_num_threads()
    if threads == 1 or device.type != "cpu":
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _add_chunk(
    aggregated: torch.Tensor, edges: SourceEdges, x: torch.Tensor, a: int, start: int, end: int, step: int
) -> None:
    """Add source rows ``a..a + len(x) - 1`` (``x``) into their destinations' ``aggregated`` rows
    through entries ``start..end - 1`` of ``edges``, ``step`` entries at a time."""
    for piece in edges.pieces(start, end, step):
        _add_rows(aggregated, edges.dst[piece], x[edges.col[piece] - a] * edges.values[piece])


def _add_rows(target: torch.Tensor, index: torch.Tensor, rows: torch.Tensor) -> None:
    """``target[index[i]] += rows[i]`` (``index_add_``) on one intra-op thread (:func:`_one_thread`)."""
    with _one_thread(target.device):
        target.index_add_(0, index, rows)


def _keep_dst_rows(x_dst: torch.Tensor, x: torch.Tensor, a: int, dst_start: int) -> None:
    """Copy the destinations' own rows among source rows ``a..a + len(x) - 1`` into ``x_dst``."""
    low, high = max(a, dst_start), min(a + x.shape[0], dst_start + x_dst.shape[0])
    if low < high:
        x_dst[low - dst_start : high - dst_start] = x[low - a : high - a]


class AggregateLayerOutput(torch.autograd.Function):
    """Layer ``l``'s activated output, made a chunk of its destinations at a time by ``make``
    (``make(a, b)``: rows ``a..b-1`` before activation, from ``params``), added into layer
    ``l + 1``'s aggregates as it is made (:func:`aggregate_output`); each chunk's pre-activation is
    kept with its graph, from which the backward pass returns ``params``' gradients. ReLU, then
    inverted dropout with probability ``p`` (one mask drawn for all the rows, as
    :func:`~commgraph.nn.dropout.dropout` draws it, sliced a chunk at a time; what passed kept as
    one byte an entry)."""

    @staticmethod
    def forward(ctx, plan: _OutputPlan, *params: torch.Tensor):
        edges, step, n = plan.edges, plan.step, plan.num_rows
        bounds = edges.bounds(n, step)
        aggregated = x_dst = mask = None
        made, passed = [], []
        for index, a in enumerate(range(0, n, step)):
            b = min(a + step, n)
            with torch.enable_grad():
                z = plan.make(a, b)
            made.append(z)
            z = z.detach()
            if mask is None:
                mask = plan.mask((n, z.shape[1]))
            h = torch.relu(z) if mask is None else torch.relu(z).mul_(mask_scale(mask[a:b], plan.p, z.dtype))
            passed.append(h.ne(0))
            if aggregated is None:
                aggregated = h.new_zeros((edges.counts.shape[0], h.shape[1]))
                x_dst = h.new_empty((plan.num_dst, h.shape[1]))
            _keep_dst_rows(x_dst, h, a, plan.dst_start)
            _add_chunk(aggregated, edges, h, a, bounds[index], bounds[index + 1], step)
        ctx.plan, ctx.bounds, ctx.made, ctx.passed, ctx.params = plan, bounds, made, passed, params
        return aggregated, x_dst

    @staticmethod
    def backward(ctx, grad_aggregated: torch.Tensor | None, grad_x_dst: torch.Tensor | None):
        plan, bounds, params = ctx.plan, ctx.bounds, ctx.params
        edges, step, n = plan.edges, plan.step, plan.num_rows
        grads = [torch.zeros_like(p) for p in params]
        for index, a in enumerate(range(0, n, step)):
            b = min(a + step, n)
            z = ctx.made[index]
            grad_h = z.new_zeros(z.shape)
            if grad_aggregated is not None:
                for piece in edges.pieces(bounds[index], bounds[index + 1], step):
                    _add_rows(grad_h, edges.col[piece] - a, grad_aggregated[edges.dst[piece]] * edges.values[piece])
            if grad_x_dst is not None:
                low, high = max(a, plan.dst_start), min(b, plan.dst_start + plan.num_dst)
                if low < high:
                    grad_h[low - a : high - a] += grad_x_dst[low - plan.dst_start : high - plan.dst_start]
            grad_z = grad_h.masked_fill_(ctx.passed[index].logical_not_(), 0).mul_(plan.keep_scale)
            for total, grad in zip(grads, torch.autograd.grad(z, params, grad_z, allow_unused=True), strict=True):
                if grad is not None:
                    total += grad
            ctx.made[index] = None
        ctx.made = ctx.passed = ctx.params = None
        return (None, *grads)


@dataclass
class _OutputPlan:
    """What :class:`AggregateLayerOutput` computes: ``num_rows`` output rows made by ``make``, read
    through ``edges`` into ``edges.counts``' destinations (``num_dst`` of which have their own rows
    from ``dst_start``), ``step`` rows at a time, dropout ``p`` in ``training``."""

    make: Callable[[int, int], torch.Tensor]
    num_rows: int
    edges: SourceEdges
    num_dst: int
    dst_start: int
    step: int
    p: float
    training: bool

    @property
    def keep_scale(self) -> float:
        """What a kept entry is multiplied by (1 without dropout)."""
        return 1.0 / (1.0 - self.p) if self.training and self.p > 0 else 1.0

    def mask(self, shape: tuple[int, int]) -> torch.Tensor | None:
        """The dropout mask of all ``shape`` output rows (None without dropout), drawn as
        :func:`~commgraph.nn.dropout.dropout` draws it."""
        if not self.training or self.p == 0:
            return None
        return keep_mask(shape, self.p)


def aggregate_output(
    make: Callable[[int, int], torch.Tensor],
    params: list[torch.Tensor],
    num_rows: int,
    adjacency: torch.Tensor,
    mean: bool,
    *,
    num_dst: int,
    dst_start: int,
    step: int,
    p: float,
    training: bool,
) -> Aggregated:
    """The next layer's aggregates of a layer's activated output rows (ReLU, dropout ``p``), which
    ``make(a, b)`` computes before activation from ``params``, ``step`` rows at a time (see
    :class:`AggregateLayerOutput`): ``adjacency`` times the rows (means when ``mean``), and the
    ``num_dst`` destinations' own rows from ``dst_start``."""
    edges = SourceEdges.of(adjacency)
    plan = _OutputPlan(make, num_rows, edges, num_dst, dst_start, step, p, training)
    aggregated, x_dst = AggregateLayerOutput.apply(plan, *params)
    return Aggregated(edges.divide(aggregated) if mean else aggregated, x_dst)
