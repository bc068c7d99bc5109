"""G3's multi-level pipeline schedule for one part, as plain arrays (no torch, no processes).

Step 1 (section 4.4.3): order the part's nodes by BFS over the part, then move the nodes with remote
neighbours (they receive halo rows, or their rows are sent) to the front: the priority list. Step 2:
the bin size. Step 3: cut the list into bins; the boundary/interior split is always a bin edge, so
the interior bins, which need nothing from other workers, can run while the halo is in flight
(eager computation) even when memory allows a single bin.

A bin's ``Block`` arrays list its sources destination-first, as table rows (owned rows ``< n_owned``,
halo rows after), with every in-edge of every destination.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from commgraph.graph.build import unique_sorted

MAX_BINS = 1 << 15  # bins are message tags; keep them inside one tag span


@dataclass
class BlockArrays:
    dst: np.ndarray  # owned rows this block computes, in output order
    src: np.ndarray  # table rows it reads, ``src[:len(dst)] == dst``
    edge_src: np.ndarray  # positions in ``src``
    edge_dst: np.ndarray  # positions in ``dst``


def priority_order(indptr: np.ndarray, indices: np.ndarray, num_owned: int,
                   sends: np.ndarray) -> tuple[np.ndarray, int]:
    """Owned rows in G3's priority order, and how many of them (the front) are boundary nodes.

    The BFS is Cuthill-McKee's (scipy's reverse order, reversed back), which starts a BFS in every
    connected component; ``sends`` are the owned rows some peer needs."""
    rows = np.repeat(np.arange(num_owned), np.diff(indptr))
    local = indices < num_owned
    adjacency = sp.csr_matrix((np.ones(int(local.sum()), dtype=np.int8), (rows[local], indices[local])),
                              shape=(num_owned, num_owned))
    bfs = reverse_cuthill_mckee((adjacency + adjacency.T).tocsr(), symmetric_mode=True)[::-1]
    boundary = np.zeros(num_owned, dtype=bool)
    boundary[rows[~local]] = True
    boundary[sends] = True
    order = np.concatenate([bfs[boundary[bfs]], bfs[~boundary[bfs]]]).astype(np.int64)
    return order, int(boundary.sum())


def bins(order: np.ndarray, num_boundary: int, bin_size: int) -> list[np.ndarray]:
    """Cut the priority list into bins of at most ``bin_size`` rows, boundary and interior apart."""
    bin_size = max(int(bin_size), 1, -(-order.shape[0] // MAX_BINS))
    pieces = []
    for segment in (order[:num_boundary], order[num_boundary:]):
        pieces += [segment[i : i + bin_size] for i in range(0, segment.shape[0], bin_size)]
    return pieces


def bin_size_for_memory(available_bytes: int, widths: list[int], mean_degree: float) -> int:
    """Section 4.4.3, step 2: half the memory over one node's footprint in the widest layer (its
    output row, its own input row and its neighbours' gathered input rows, float32)."""
    per_node = max((2 + mean_degree) * w * 4 for w in widths)
    return max(1, int(available_bytes // 2 // per_node))


def in_neighbours(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """In-degree of each of ``rows`` and their in-neighbours, row after row."""
    counts = indptr[rows + 1] - indptr[rows]
    starts = np.repeat(indptr[rows] - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return counts, indices[starts + np.arange(int(counts.sum()))]


def block_arrays(indptr: np.ndarray, indices: np.ndarray, dst: np.ndarray, mark: np.ndarray) -> BlockArrays:
    """The block of ``dst`` rows. ``mark`` is scratch of table length filled with -1 (left so)."""
    counts, src_of_edge = in_neighbours(indptr, indices, dst)
    mark[dst] = np.arange(dst.shape[0])
    others = unique_sorted(src_of_edge[mark[src_of_edge] < 0])
    mark[others] = dst.shape[0] + np.arange(others.shape[0])
    result = BlockArrays(dst, np.concatenate([dst, others]), mark[src_of_edge],
                         np.repeat(np.arange(dst.shape[0]), counts))
    mark[result.src] = -1
    return result


def hop_sets(indptr: np.ndarray, indices: np.ndarray, owned: np.ndarray, hops: int) -> tuple[np.ndarray, list[int]]:
    """For L-hop replication: the owned nodes followed by each further hop of in-neighbours, as one
    array of global ids, and the cumulative sizes ``[|S_0|, |S_1|, ...]``."""
    seen = np.zeros(indptr.shape[0] - 1, dtype=bool)
    seen[owned] = True
    layers, frontier, sizes = [owned], owned, [owned.shape[0]]
    for _ in range(hops):
        neighbours = unique_sorted(in_neighbours(indptr, indices, frontier)[1])
        frontier = neighbours[~seen[neighbours]]
        seen[frontier] = True
        layers.append(frontier)
        sizes.append(sizes[-1] + frontier.shape[0])
    return np.concatenate(layers), sizes
