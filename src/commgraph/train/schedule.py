"""G3's multi-level pipeline schedule for one part, as plain arrays (no torch, no processes).

Step 1 (section 4.4.3): order the part's nodes by BFS over the part, then move the nodes with remote
neighbours (they receive halo rows, or their rows are sent) to the front: the priority list. The
owned rows are renumbered in that order, so a bin is a range of rows. Step 2: the bin size. Step 3:
cut the list into bins; the boundary/interior split is always a bin edge, so the interior bins,
which need nothing from other workers, can run while the halo is in flight (eager computation)
even when memory allows a single bin.

A part's CSR has a row per owned node and columns that are table rows: owned rows ``< n_owned``,
halo rows after.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from commgraph.graph.build import unique_sorted

MAX_BINS = 1 << 15  # bins are message tags; keep them inside one tag span


def priority_order(
    indptr: np.ndarray, indices: np.ndarray, num_owned: int, sends: np.ndarray
) -> tuple[np.ndarray, int]:
    """Owned rows in G3's priority order, and how many of them (the front) are boundary nodes.

    The BFS is Cuthill-McKee's (scipy's reverse order, reversed back), which starts a BFS in every
    connected component; ``sends`` are the owned rows some peer needs."""
    rows = np.repeat(np.arange(num_owned), np.diff(indptr))
    local = indices < num_owned
    adjacency = sp.csr_matrix(
        (np.ones(int(local.sum()), dtype=np.int8), (rows[local], indices[local])), shape=(num_owned, num_owned)
    )
    bfs = reverse_cuthill_mckee((adjacency + adjacency.T).tocsr(), symmetric_mode=True)[::-1]
    boundary = np.zeros(num_owned, dtype=bool)
    boundary[rows[~local]] = True
    boundary[sends] = True
    order = np.concatenate([bfs[boundary[bfs]], bfs[~boundary[bfs]]]).astype(np.int64)
    return order, int(boundary.sum())


def bins(num_boundary: int, num_owned: int, bin_size: int) -> np.ndarray:
    """Bin edges over the renumbered rows: bin ``b`` is rows ``[edges[b], edges[b + 1])``, at most
    ``bin_size`` rows, boundary and interior apart."""
    bin_size = max(int(bin_size), 1, -(-num_owned // MAX_BINS))
    edges = np.concatenate(
        [np.arange(0, num_boundary, bin_size), np.arange(num_boundary, num_owned, bin_size), [num_owned]]
    )
    return edges.astype(np.int64)


def relabel(
    indptr: np.ndarray, indices: np.ndarray, num_owned: int, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The part's CSR with owned row ``order[i]`` renumbered ``i``, in its rows and its columns
    (halo columns keep their numbers; the columns keep the part's index dtype)."""
    counts, columns = in_neighbours(indptr, indices, order)
    position = np.empty(num_owned, dtype=np.int64)
    position[order] = np.arange(num_owned)
    owned = columns < num_owned  # columns is a fresh array in the part's index dtype (int32 while it fits)
    columns[owned] = position[columns[owned]]
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), columns


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
