"""The in-memory graph every other layer reads: CSR adjacency plus optional node data.

Rows of the CSR are *destinations*: ``indices[indptr[v]:indptr[v + 1]]`` are the sources ``u`` of the
edges ``u -> v``. A GNN layer aggregates over exactly that row, and a partition's edge count |E(V_i)|
(edges whose destination it owns) is a sum of its rows' lengths. For the symmetrised graphs used in
training the distinction vanishes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields

import numpy as np
from numba import njit

from commgraph.errors import GraphValidationError

MASK_NAMES = ("train_mask", "val_mask", "test_mask")


@dataclass(eq=False)
class Graph:
    """A graph in CSR form with optional features, labels, split masks, original node ids and edge
    weights: what every loader returns and every other layer reads.

    Row ``v`` of the CSR holds the sources of ``v``'s in-edges, ``indices[indptr[v]:indptr[v + 1]]``.
    ``node_ids`` keeps the original id of every node when a loader remapped sparse ids to 0..N-1
    (SNAP files), so results can be reported in the user's ids. Labels of -1 mark unlabelled nodes;
    no split mask may select one. Arrays are converted to the dtypes below (a lossy conversion is
    refused) and validated on construction (:meth:`validate`); :func:`from_edges` builds one from an
    edge list, :func:`~commgraph.graph.to_pyg` and :func:`~commgraph.graph.from_pyg` convert to and
    from PyG's ``Data``.

    Args:
        indptr: row pointers, ascending from 0 to ``E``.
        indices: the source node of every stored edge, row by row.
        features: node features (float32), if any.
        labels: node classes ``0..C-1``, ``-1`` for unlabelled nodes; given with the masks.
        train_mask, val_mask, test_mask: the split (bool); given with the labels.
        node_ids: every node's id in the source file, when the loader renumbered them.
        edge_weights: a weight per stored edge (float64), aligned with ``indices``.
        name: the graph's name (shown by ``commgraph graph info``, recorded in partition sets).

    Shapes:
        - **indptr:** ``[N + 1]`` (int64)
        - **indices, edge_weights:** ``[E]``
        - **features:** ``[N, F]`` (float32)
        - **labels, train_mask, val_mask, test_mask, node_ids:** ``[N]``

    Raises:
        GraphValidationError: an array of the wrong shape or range, NaN features, masks without labels.
    """

    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray | None = None
    labels: np.ndarray | None = None
    train_mask: np.ndarray | None = None
    val_mask: np.ndarray | None = None
    test_mask: np.ndarray | None = None
    node_ids: np.ndarray | None = None
    edge_weights: np.ndarray | None = None  # float64, one per stored edge, aligned with ``indices``
    name: str = "graph"

    def __post_init__(self) -> None:
        self.indptr = _as_array(self.indptr, np.int64, "indptr")
        self.indices = _as_array(self.indices, np.int64, "indices")
        if self.features is not None:
            self.features = _as_array(self.features, np.float32, "features")
        if self.labels is not None:
            self.labels = _as_array(self.labels, np.int64, "labels")
        for mask in MASK_NAMES:
            value = getattr(self, mask)
            if value is not None:
                setattr(self, mask, _as_array(value, np.bool_, mask))
        if self.node_ids is not None:
            self.node_ids = _as_array(self.node_ids, np.int64, "node_ids")
        if self.edge_weights is not None:
            self.edge_weights = _as_array(self.edge_weights, np.float64, "edge_weights")
        self.validate()

    # -- shape ---------------------------------------------------------------------------------

    @property
    def num_nodes(self) -> int:
        """Nodes ``N``: CSR rows, isolated nodes included."""
        return int(self.indptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        """Stored directed edges (an undirected edge counts twice once symmetrised)."""
        return int(self.indices.shape[0])

    @property
    def num_features(self) -> int:
        """Feature columns ``F`` (0 without features)."""
        return 0 if self.features is None else int(self.features.shape[1])

    @property
    def num_classes(self) -> int:
        """Classes ``C``: the largest label plus one (0 without labels)."""
        if self.labels is None or self.labels.size == 0:
            return 0
        return int(self.labels.max()) + 1

    def in_degrees(self) -> np.ndarray:
        """Every node's in-degree (stored edges into it, self loops included); shape ``[N]``."""
        return np.diff(self.indptr)

    def num_components(self) -> int:
        """Weakly connected components (an isolated node is one): union-find over the CSR, one
        node-indexed array, nothing edge-sized."""
        return int(_components(self.indptr, self.indices))

    def edge_list(self) -> tuple[np.ndarray, np.ndarray]:
        """``(src, dst)`` of every stored edge, in CSR order; each of shape ``[E]``."""
        dst = np.repeat(np.arange(self.num_nodes, dtype=np.int64), self.in_degrees())
        return self.indices, dst

    def nbytes(self) -> int:
        """Bytes held by the graph's arrays."""
        return sum(a.nbytes for a in self._arrays().values())

    def _arrays(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), np.ndarray)}

    def checksum(self) -> str:
        """A digest of every array (names, dtypes, shapes, bytes) and nothing else: files derived
        from this graph (partition sets) record it and refuse to load against another graph."""
        digest = hashlib.blake2b(digest_size=16)
        for name, array in sorted(self._arrays().items()):
            digest.update(f"{name}:{array.dtype.str}:{array.shape};".encode())
            digest.update(memoryview(np.ascontiguousarray(array)).cast("B"))
        return digest.hexdigest()

    def equals(self, other: Graph) -> bool:
        """Exact equality of every array (dtype included) and of the name."""
        mine, theirs = self._arrays(), other._arrays()
        return (
            self.name == other.name
            and mine.keys() == theirs.keys()
            and all(mine[k].dtype == theirs[k].dtype and np.array_equal(mine[k], theirs[k]) for k in mine)
        )

    # -- validation ----------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise :class:`GraphValidationError` naming the first inconsistency found."""
        indptr, indices = self.indptr, self.indices
        if indptr.ndim != 1 or indptr.shape[0] < 1:
            raise GraphValidationError("indptr must be a 1-D array of length num_nodes + 1")
        if indptr[0] != 0 or indptr[-1] != indices.shape[0]:
            raise GraphValidationError(
                f"indptr must start at 0 and end at len(indices)={indices.shape[0]}, got {indptr[0]} .. {indptr[-1]}"
            )
        if indptr.shape[0] > 1 and np.any(np.diff(indptr) < 0):
            raise GraphValidationError("indptr must be non-decreasing")
        n = self.num_nodes
        if indices.ndim != 1:
            raise GraphValidationError("indices must be a 1-D array")
        if indices.size:
            lo, hi = int(indices.min()), int(indices.max())
            if lo < 0:
                raise GraphValidationError(f"negative node id {lo} in indices")
            if hi >= n:
                raise GraphValidationError(f"node id {hi} in indices is out of range for a graph of {n} nodes")
        if self.features is not None:
            if self.features.ndim != 2 or self.features.shape[0] != n:
                raise GraphValidationError(f"features must have shape [num_nodes={n}, F], got {self.features.shape}")
            if not np.isfinite(self.features).all():
                bad = int(np.flatnonzero(~np.isfinite(self.features).all(axis=1))[0])
                raise GraphValidationError(f"features of node {bad} contain NaN or inf")
        if self.labels is not None:
            if self.labels.shape != (n,):
                raise GraphValidationError(f"labels must have shape [num_nodes={n}], got {self.labels.shape}")
            if self.labels.size and self.labels.min() < -1:
                raise GraphValidationError(
                    f"label {int(self.labels.min())} is invalid: use 0..C-1, or -1 for unlabelled"
                )
        masks = {m: getattr(self, m) for m in MASK_NAMES if getattr(self, m) is not None}
        for mask_name, mask in masks.items():
            if mask.shape != (n,):
                raise GraphValidationError(f"{mask_name} must have shape [num_nodes={n}], got {mask.shape}")
        if masks and self.labels is None:
            raise GraphValidationError("split masks were given but no labels: pass labels too")
        if self.labels is not None and not masks:
            raise GraphValidationError(
                "labels were given without train/val/test masks: pass masks "
                "(commgraph.graph.split_masks makes a random split)"
            )
        for mask_name, mask in masks.items():
            if self.labels is not None and np.any(self.labels[mask] < 0):
                raise GraphValidationError(f"{mask_name} selects unlabelled nodes (label -1)")
        if self.node_ids is not None and self.node_ids.shape != (n,):
            raise GraphValidationError(f"node_ids must have shape [num_nodes={n}], got {self.node_ids.shape}")
        if self.edge_weights is not None:
            if self.edge_weights.shape != indices.shape:
                raise GraphValidationError(
                    f"edge_weights must have one value per edge ({indices.shape[0]}), got {self.edge_weights.shape}"
                )
            if not np.isfinite(self.edge_weights).all():
                raise GraphValidationError("edge_weights contain NaN or inf")

    # -- summary -------------------------------------------------------------------------------

    def stats(self) -> dict:
        """The figures ``commgraph graph info`` prints, as plain JSON-ready values."""
        deg = self.in_degrees()
        out: dict = {
            "name": self.name,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "num_features": self.num_features,
            "num_classes": self.num_classes,
            "self_loops": int(_self_loops(self.indptr, self.indices).sum()),
            # no edge in or out: such a node is never sent, received or aggregated over
            "isolated_nodes": int(
                np.count_nonzero((deg == 0) & (np.bincount(self.indices, minlength=self.num_nodes) == 0))
            ),
            "components": self.num_components(),
            "degree": {
                "min": int(deg.min()) if deg.size else 0,
                "mean": float(deg.mean()) if deg.size else 0.0,
                "median": float(np.median(deg)) if deg.size else 0.0,
                "max": int(deg.max()) if deg.size else 0,
            },
            "memory_bytes": self.nbytes(),
        }
        for mask in MASK_NAMES:
            value = getattr(self, mask)
            out[mask.replace("_mask", "_nodes")] = None if value is None else int(value.sum())
        return out


def loop_free_in_degrees(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """In-degrees not counting self loops. GCN and GAT give every node exactly one self loop (PyG's
    ``add_remaining_self_loops``), so their normalisations count the other in-edges plus that one."""
    return np.diff(indptr) - _self_loops(indptr, indices)


@njit(cache=True)
def _self_loops(indptr, indices):  # pragma: no cover - compiled
    """Self loops of each row of a CSR."""
    n = indptr.shape[0] - 1
    loops = np.zeros(n, np.int64)
    for v in range(n):
        for e in range(indptr[v], indptr[v + 1]):
            if indices[e] == v:
                loops[v] += 1
    return loops


@njit(cache=True)
def _root(parent, x):  # pragma: no cover - compiled
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@njit(cache=True)
def _components(indptr, indices):  # pragma: no cover - compiled
    """Weakly connected components of a CSR graph (union-find with path halving)."""
    n = indptr.shape[0] - 1
    parent = np.arange(n)
    count = n
    for v in range(n):
        for e in range(indptr[v], indptr[v + 1]):
            a, b = _root(parent, v), _root(parent, indices[e])
            if a != b:
                parent[max(a, b)] = min(a, b)
                count -= 1
    return count


def _as_array(value, dtype, name: str) -> np.ndarray:
    """Convert to a contiguous array of ``dtype``, refusing lossy conversions (float ids, int masks
    with values other than 0/1) instead of silently truncating them."""
    array = np.asarray(value)
    if array.dtype == dtype:
        return np.ascontiguousarray(array)
    if dtype == np.bool_:
        if array.size and not np.isin(array, (0, 1)).all():
            raise GraphValidationError(f"{name} must be boolean (0/1), got other values")
    elif np.issubdtype(dtype, np.integer):
        if not (np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_):
            if array.size and not np.array_equal(array, np.round(array)):
                raise GraphValidationError(f"{name} must hold integers, got {array.dtype} values")
    elif not np.issubdtype(array.dtype, np.number) and array.dtype != np.bool_:
        raise GraphValidationError(f"{name} must be numeric, got {array.dtype}")
    return np.ascontiguousarray(array.astype(dtype))
