"""``Block``: the bipartite piece of graph one layer computes on, as DGL calls it.

A block reads a *table* ``x_src`` (a worker's owned rows, then its halo rows) and computes
``num_dst`` destinations, which are the consecutive table rows from ``dst_start``: a bin of the
pipelined trainer is a range of rows, so its destinations' own inputs are a view, not a copy.
``edge_index`` holds every in-edge of every destination, so any aggregation over a destination's
neighbourhood sees all of it, whichever worker or bin computes it. Degrees are those of the whole
graph: normalisations (GCN) then equal the single-graph ones.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch


@dataclass
class Block:
    r"""The edges one layer computes on: every in-edge of ``num_dst`` destinations, read from a table
    of ``num_src`` rows (see the module's description). Derived tensors (self loops, PyG's
    adjacency, the compaction) are built once, on first use, and kept in ``cache``.

    Args:
        num_src: rows of the table the block reads :math:`|\mathcal{V}_s|` (owned, then halo).
        num_dst: destinations :math:`|\mathcal{V}_t|`.
        edge_index: row 0 the table row of each edge's source, row 1 its destination
            (``0..num_dst-1``).
        src_degree: every table row's in-degree in the whole graph, self loops not counted (float).
        dst_start: destination ``i`` is table row ``dst_start + i``.

        csr: instead of ``edge_index`` (None), the edges as the adjacency's compressed rows,
            ``(crow, col)`` (see :meth:`from_csr`); ``edge_index`` is then derived on use.

    Shapes:
        - **edge_index:** ``[2, E]`` (int64)
        - **src_degree:** :math:`(|\mathcal{V}_s|,)`
    """

    num_src: int  # rows of the table the block reads
    num_dst: int
    edge_index: torch.Tensor | None  # (2, E): row 0 indexes table rows, row 1 destinations (0..num_dst-1)
    src_degree: torch.Tensor  # global in-degree of each table row, self loops not counted (float)
    dst_start: int = 0  # destination i is table row dst_start + i
    cache: dict = field(default_factory=dict)  # derived tensors (self loops, adjacency, compaction)
    csr: tuple[torch.Tensor, torch.Tensor] | None = None  # (crow, col), when built by from_csr

    @classmethod
    def from_csr(
        cls, num_src: int, indptr: np.ndarray, indices: np.ndarray, src_degree: torch.Tensor, dst_start: int = 0
    ) -> Block:
        """The block of destinations ``0..len(indptr)-2`` whose in-edges' table rows are
        ``indices[indptr[i]:indptr[i + 1]]``, held once, as the adjacency :meth:`adj_t` reads: its
        columns sorted within each row, row pointers and columns int32 while the edges and the
        table's rows fit (8 bytes an edge with the values, against 28 as an edge list beside the
        adjacency). ``edge_index`` is derived from it when a caller asks (:meth:`edges`)."""
        indptr = np.asarray(indptr, dtype=np.int64)
        indptr = indptr - indptr[0]
        edges, num_dst = int(indptr[-1]), indptr.shape[0] - 1
        dtype = np.int32 if max(edges, num_src) < np.iinfo(np.int32).max else np.int64
        adjacency = sp.csr_matrix(
            (np.zeros(edges, dtype=np.int8), np.array(indices, dtype=dtype), indptr.astype(dtype)),
            shape=(num_dst, num_src),
        )
        adjacency.sort_indices()  # in place, as adj_t orders an edge list's sources
        crow = torch.from_numpy(adjacency.indptr.astype(dtype, copy=False))
        col = torch.from_numpy(adjacency.indices.astype(dtype, copy=False))
        return cls(num_src, num_dst, None, src_degree, dst_start, csr=(crow, col))

    def edges(self) -> torch.Tensor:
        """``edge_index``; for a block built by :meth:`from_csr`, derived from the adjacency at
        each call (int64, not kept: what callers build from it, they keep)."""
        if self.edge_index is not None:
            return self.edge_index
        crow, col = self.csr
        return torch.stack([col.long(), _row_of_entries(crow)])

    def rows(self, start: int, end: int) -> Block:
        """The block of destinations ``[start, end)`` alone, sharing this block's columns (a
        block built by :meth:`from_csr`; only the row pointers are copied)."""
        crow, col = self.csr
        return Block(
            self.num_src,
            end - start,
            None,
            self.src_degree,
            self.dst_start + start,
            csr=(crow[start : end + 1] - crow[start], col[int(crow[start]) : int(crow[end])]),
        )

    def dst(self, x_src: torch.Tensor) -> torch.Tensor:
        """The destinations' own rows of the table (a view)."""
        return x_src[self.dst_start : self.dst_start + self.num_dst]

    def with_self_loops(self) -> torch.Tensor:
        """Edges with exactly one self loop per destination: a graph's own loops are replaced, as
        PyG's GCN and GAT do."""
        if "loops" not in self.cache:
            edges = self.edges()
            edges = edges[:, edges[0] != edges[1] + self.dst_start]
            loop = torch.arange(self.num_dst, device=edges.device)
            self.cache["loops"] = torch.cat([edges, torch.stack([loop + self.dst_start, loop])], dim=1)
        return self.cache["loops"]

    def adj_t(self, *, self_loops: bool = False, gcn_norm: bool = False) -> torch.Tensor:
        """The block as PyG's transposed adjacency, a ``num_dst x num_src`` sparse CSR tensor: PyG
        layers given it aggregate with one sparse-dense product that reads only the table rows it
        needs, instead of gathering a message row per edge (several times faster on CPU). Values
        are 1, or with ``gcn_norm`` GCN's ``1 / sqrt((d_src + 1)(d_dst + 1))`` from global degrees.
        Duplicate edges stay separate entries, so a mean counts them as the edge list does."""
        key = ("adj_t", self_loops, gcn_norm)
        if key not in self.cache:
            if self.csr is not None and not self_loops:
                crow, src = self.csr
                dst = None
            else:
                edges = self.with_self_loops() if self_loops else self.edges()
                order = torch.argsort(edges[1] * self.num_src + edges[0])
                src, dst = edges[0, order], edges[1, order]
                crow = torch.zeros(self.num_dst + 1, dtype=torch.int64, device=src.device)
                crow[1:] = torch.cumsum(torch.bincount(dst, minlength=self.num_dst), 0)
            if gcn_norm:
                if dst is None:
                    dst = _row_of_entries(crow)
                inv_sqrt = (self.src_degree + 1).rsqrt()
                values = inv_sqrt[src.long()] * inv_sqrt[dst + self.dst_start]
            else:
                values = torch.ones(src.shape[0], device=src.device)
            with warnings.catch_warnings():  # "sparse CSR support is in beta": PyG relies on it too
                warnings.simplefilter("ignore", UserWarning)
                self.cache[key] = torch.sparse_csr_tensor(crow, src, values, (self.num_dst, self.num_src))
        return self.cache[key]

    def compact(self) -> tuple[torch.Tensor, torch.Tensor]:
        """For layers that transform every source row before aggregating (GAT): the table rows the
        block reads, self loops included, and the edges (with self loops) renumbered into them."""
        if "compact" not in self.cache:
            edges = self.with_self_loops()
            sources, position = torch.unique(edges[0], return_inverse=True)
            self.cache["compact"] = (sources, torch.stack([position, edges[1]]))
        return self.cache["compact"]

    def to(self, device: torch.device) -> Block:
        """The block with its tensors on ``device`` (its cache is rebuilt there on use)."""
        return Block(
            self.num_src,
            self.num_dst,
            None if self.edge_index is None else self.edge_index.to(device),
            self.src_degree.to(device),
            self.dst_start,
            csr=None if self.csr is None else tuple(t.to(device) for t in self.csr),
        )


def _row_of_entries(crow: torch.Tensor) -> torch.Tensor:
    """Per entry of a compressed-row adjacency, its row (int64)."""
    rows = crow.shape[0] - 1
    return torch.repeat_interleave(torch.arange(rows, device=crow.device), (crow[1:] - crow[:-1]).long())
