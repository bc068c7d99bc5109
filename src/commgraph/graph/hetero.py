"""Heterogeneous graphs: typed nodes and relations, :class:`HeteroGraph`.

Each node type has its own id space ``0..N_t-1``, its own feature width (or no features), and one
type, the *target*, may carry labels and the split. Each relation ``(src_type, name, dst_type)`` is
a CSR whose rows are the destination type's nodes: ``indices[indptr[v]:indptr[v + 1]]`` are the
source-type ids ``u`` of the relation's edges ``u -> v``, the convention of :class:`Graph`.

Partitioners and the bridge read the *homogeneous view* (:meth:`HeteroGraph.homogeneous`): node
``offsets[t] + i`` is node ``i`` of type ``t`` (types in their order), every relation's edges are
one CSR, and ``node_type`` / ``edge_type`` say what each node and stored edge was. A typed id is
found back from a homogeneous one by a range lookup on the offsets (:meth:`HomogeneousView.typed`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from commgraph.errors import GraphValidationError
from commgraph.graph.core import MASK_NAMES, Graph, _as_array

EdgeType = tuple[str, str, str]


@dataclass(eq=False)
class Relation:
    """One relation's edges as a CSR over its destination type (see the module description).

    Args:
        indptr: row pointers over the destination type's nodes, ascending from 0 to ``E``.
        indices: the source-type id of every edge, row by row.
        features: a feature row per edge (float32), aligned with ``indices`` (a rating, a weight).

    Shapes:
        - **indptr:** ``[N_dst + 1]`` (int64); **indices:** ``[E]`` (int64)
        - **features:** ``[E, F_e]`` (float32)
    """

    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.indptr = _as_array(self.indptr, np.int64, "indptr")
        self.indices = _as_array(self.indices, np.int64, "indices")
        if self.features is not None:
            self.features = _as_array(self.features, np.float32, "edge features")

    @classmethod
    def from_edges(cls, src, dst, num_dst: int, features=None) -> Relation:
        """The CSR of the edges ``src[i] -> dst[i]``, rows sorted by destination, then source."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        if dst.size and (dst.min() < 0 or dst.max() >= num_dst):
            raise GraphValidationError(f"a destination id is out of range for a type of {num_dst} nodes")
        indptr = np.zeros(num_dst + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=num_dst), out=indptr[1:])
        low = int(src.min()) if src.size else 0
        key = dst * (int(src.max(initial=low)) - low + 1) + (src - low)  # (dst, src) as one sortable number
        if not np.all(key[1:] >= key[:-1]):
            order = np.argsort(key, kind="stable")
            src = src[order]
            features = None if features is None else np.asarray(features)[order]
        return cls(indptr, src, features)

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    def edge_list(self) -> tuple[np.ndarray, np.ndarray]:
        """``(src, dst)`` of every edge, in CSR order."""
        return self.indices, np.repeat(np.arange(self.indptr.shape[0] - 1, dtype=np.int64), np.diff(self.indptr))


@dataclass
class HomogeneousView:
    """A :class:`HeteroGraph` as one :class:`Graph` (see the module description).

    Attributes:
        graph: every node and every relation's edges in one CSR; the target type's labels and split
            at its rows (-1 and False elsewhere); no features (each type has its own width).
        node_type: each node's type, an index into ``node_types``.
        edge_type: each stored edge's relation, an index into ``edge_types``, aligned with
            ``graph.indices``.
        offsets: where each type's ids start; ``offsets[-1]`` is the node count.
        node_types, edge_types: the names, in the graph's order.

    Shapes:
        - **node_type:** ``[N]`` (int16); **edge_type:** ``[E]`` (int16); **offsets:** ``[T + 1]``
    """

    graph: Graph
    node_type: np.ndarray
    edge_type: np.ndarray
    offsets: np.ndarray
    node_types: list[str]
    edge_types: list[EdgeType]

    def typed(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """``(type index, typed id)`` of homogeneous ids (a range lookup on the offsets)."""
        ids = np.asarray(ids, dtype=np.int64)
        types = np.searchsorted(self.offsets, ids, side="right") - 1
        return types, ids - self.offsets[types]

    def type_weights(self) -> np.ndarray:
        """One-hot node weights ``[N, T]`` (int64): a partitioner that balances every column
        balances every type across parts."""
        weights = np.zeros((self.graph.num_nodes, len(self.node_types)), dtype=np.int64)
        weights[np.arange(self.graph.num_nodes), self.node_type] = 1
        return weights


@dataclass(eq=False)
class HeteroGraph:
    """A graph of typed nodes and relations (see the module description); validated on construction.

    Args:
        num_nodes: every node type's node count, in the graph's type order.
        relations: every relation ``(src_type, name, dst_type)``'s :class:`Relation`.
        features: each type's node features (float32, its own width); types without are absent.
        target: the type that carries ``labels`` and the split (None: no labels).
        labels: the target type's classes ``0..C-1``, ``-1`` for unlabelled nodes.
        train_mask, val_mask, test_mask: the target type's split.
        name: the graph's name.

    Shapes:
        - **features[t]:** ``[N_t, F_t]``; **labels**, masks: ``[N_target]``

    Raises:
        GraphValidationError: a relation naming an unknown node type, a type with no nodes, features
            of the wrong row count, labels or masks without a target type (or of its wrong length),
            edge ids out of their types' range.
    """

    num_nodes: dict[str, int]
    relations: dict[EdgeType, Relation]
    features: dict[str, np.ndarray] = field(default_factory=dict)
    target: str | None = None
    labels: np.ndarray | None = None
    train_mask: np.ndarray | None = None
    val_mask: np.ndarray | None = None
    test_mask: np.ndarray | None = None
    name: str = "hetero"

    def __post_init__(self) -> None:
        self.num_nodes = {str(t): int(n) for t, n in self.num_nodes.items()}
        self.relations = {tuple(key): value for key, value in self.relations.items()}
        self.features = {t: _as_array(x, np.float32, f"features of {t!r}") for t, x in self.features.items()}
        if self.labels is not None:
            self.labels = _as_array(self.labels, np.int64, "labels")
        for mask in MASK_NAMES:
            if getattr(self, mask) is not None:
                setattr(self, mask, _as_array(getattr(self, mask), np.bool_, mask))
        self.validate()

    # -- shape ---------------------------------------------------------------------------------

    @property
    def node_types(self) -> list[str]:
        return list(self.num_nodes)

    @property
    def edge_types(self) -> list[EdgeType]:
        return list(self.relations)

    @property
    def total_nodes(self) -> int:
        return sum(self.num_nodes.values())

    @property
    def num_edges(self) -> int:
        """Edges over every relation."""
        return sum(relation.num_edges for relation in self.relations.values())

    @property
    def num_classes(self) -> int:
        if self.labels is None or self.labels.size == 0:
            return 0
        return int(self.labels.max()) + 1

    def num_features(self, node_type: str) -> int:
        """The feature width of ``node_type`` (0 without features)."""
        x = self.features.get(node_type)
        return 0 if x is None else int(x.shape[1])

    def nbytes(self) -> int:
        return sum(a.nbytes for _, a in self._arrays())

    def _arrays(self) -> list[tuple[str, np.ndarray]]:
        arrays = [(f"features/{t}", x) for t, x in self.features.items()]
        for key, relation in self.relations.items():
            name = "/".join(key)
            arrays += [(f"{name}/indptr", relation.indptr), (f"{name}/indices", relation.indices)]
            if relation.features is not None:
                arrays.append((f"{name}/features", relation.features))
        arrays += [(key, getattr(self, key)) for key in ("labels", *MASK_NAMES) if getattr(self, key) is not None]
        return arrays

    def checksum(self) -> str:
        """A digest of the types, counts, target and every array: sets derived from this graph
        record it and refuse to load against another one."""
        digest = hashlib.blake2b(digest_size=16)
        digest.update(repr((sorted(self.num_nodes.items()), self.edge_types, self.target)).encode())
        for name, array in sorted(self._arrays(), key=lambda item: item[0]):
            digest.update(f"{name}:{array.dtype.str}:{array.shape};".encode())
            digest.update(memoryview(np.ascontiguousarray(array)).cast("B"))
        return digest.hexdigest()

    def equals(self, other: HeteroGraph) -> bool:
        """Exact equality of the types, relations, target, name and every array."""
        mine, theirs = dict(self._arrays()), dict(other._arrays())
        return (
            (self.name, self.num_nodes, self.edge_types, self.target)
            == (other.name, other.num_nodes, other.edge_types, other.target)
            and mine.keys() == theirs.keys()
            and all(mine[k].dtype == theirs[k].dtype and np.array_equal(mine[k], theirs[k]) for k in mine)
        )

    # -- validation ----------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise :class:`GraphValidationError` naming the first inconsistency found."""
        if not self.num_nodes:
            raise GraphValidationError("a heterogeneous graph needs at least one node type")
        empty = [t for t, n in self.num_nodes.items() if n < 1]
        if empty:
            raise GraphValidationError(f"node type {empty[0]!r} has no nodes: drop it, or give it its node count")
        for key, relation in self.relations.items():
            self._check_relation(key, relation)
        for node_type, x in self.features.items():
            if node_type not in self.num_nodes:
                raise GraphValidationError(f"features are given for {node_type!r}, which is no node type")
            if x.ndim != 2 or x.shape[0] != self.num_nodes[node_type]:
                raise GraphValidationError(
                    f"features of {node_type!r} must have shape [{self.num_nodes[node_type]}, F] "
                    f"(one row per {node_type!r} node), got {list(x.shape)}"
                )
            if not np.isfinite(x).all():
                raise GraphValidationError(f"features of {node_type!r} contain NaN or inf")
        self._check_labels()

    def _check_relation(self, key: EdgeType, relation: Relation) -> None:
        if len(key) != 3:
            raise GraphValidationError(f"a relation is named (src_type, name, dst_type), got {key!r}")
        src, _, dst = key
        for end in (src, dst):
            if end not in self.num_nodes:
                raise GraphValidationError(
                    f"relation {key} names node type {end!r}, which the graph does not have "
                    f"(its types: {', '.join(self.num_nodes)})"
                )
        indptr, indices = relation.indptr, relation.indices
        if indptr.ndim != 1 or indptr.shape[0] != self.num_nodes[dst] + 1:
            raise GraphValidationError(
                f"relation {key}'s indptr must have {self.num_nodes[dst] + 1} entries (one row per {dst!r} node, "
                f"plus one), got {indptr.shape[0]}"
            )
        if indptr[0] != 0 or indptr[-1] != indices.shape[0] or np.any(np.diff(indptr) < 0):
            raise GraphValidationError(f"relation {key}'s indptr must rise from 0 to its edge count")
        if indices.size and (indices.min() < 0 or indices.max() >= self.num_nodes[src]):
            bad = int(indices.max() if indices.max() >= self.num_nodes[src] else indices.min())
            raise GraphValidationError(
                f"relation {key} has source id {bad}, out of range for {self.num_nodes[src]} {src!r} nodes"
            )
        if relation.features is not None and relation.features.shape[0] != indices.shape[0]:
            raise GraphValidationError(f"relation {key}'s edge features need one row per edge ({indices.shape[0]})")

    def _check_labels(self) -> None:
        split = {m: getattr(self, m) for m in MASK_NAMES if getattr(self, m) is not None}
        if self.labels is None and not split:
            return
        if self.target not in self.num_nodes:
            raise GraphValidationError(
                f"labels and masks belong to the target type, and target={self.target!r} is no node type: "
                f"name one of {', '.join(self.num_nodes)}"
            )
        rows = self.num_nodes[self.target]
        if self.labels is None or not split:
            raise GraphValidationError("give the target type both its labels and its train/val/test masks")
        for name, array in (("labels", self.labels), *split.items()):
            if array.shape != (rows,):
                raise GraphValidationError(
                    f"{name} must have one entry per {self.target!r} node ({rows}), got shape {list(array.shape)}: "
                    "labels live on the target type only"
                )
        if self.labels.min() < -1:
            raise GraphValidationError(f"label {int(self.labels.min())} is invalid: use 0..C-1, or -1 for unlabelled")
        for name, mask in split.items():
            if np.any(self.labels[mask] < 0):
                raise GraphValidationError(f"{name} selects unlabelled {self.target!r} nodes (label -1)")

    # -- the homogeneous view ------------------------------------------------------------------

    def homogeneous(self) -> HomogeneousView:
        """Every node and edge in one :class:`Graph` (see :class:`HomogeneousView`)."""
        types = self.node_types
        index = {t: i for i, t in enumerate(types)}
        counts = np.array([self.num_nodes[t] for t in types], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(counts)])
        total = int(offsets[-1])
        src_parts, dst_parts, kind_parts = [], [], []
        for k, ((src_type, _, dst_type), relation) in enumerate(self.relations.items()):
            src, dst = relation.edge_list()
            src_parts.append(src + offsets[index[src_type]])
            dst_parts.append(dst + offsets[index[dst_type]])
            kind_parts.append(np.full(src.shape[0], k, dtype=np.int16))
        empty = np.empty(0, dtype=np.int64)
        src = np.concatenate(src_parts) if src_parts else empty
        dst = np.concatenate(dst_parts) if dst_parts else empty
        kinds = np.concatenate(kind_parts) if kind_parts else np.empty(0, dtype=np.int16)
        order = np.lexsort((kinds, src, dst))
        indptr = np.zeros(total + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=total), out=indptr[1:])
        node_data = {}
        if self.target is not None:
            start = int(offsets[index[self.target]])
            rows = slice(start, start + self.num_nodes[self.target])
            labels = np.full(total, -1, dtype=np.int64)
            labels[rows] = self.labels
            node_data["labels"] = labels
            for mask in MASK_NAMES:
                value = np.zeros(total, dtype=np.bool_)
                value[rows] = getattr(self, mask)
                node_data[mask] = value
        graph = Graph(indptr, src[order], name=self.name, **node_data)
        node_type = np.repeat(np.arange(len(types), dtype=np.int16), counts)
        return HomogeneousView(graph, node_type, kinds[order], offsets, types, self.edge_types)

    # -- summary -------------------------------------------------------------------------------

    def stats(self) -> dict:
        """The figures ``commgraph graph info`` prints for a heterogeneous graph."""
        out: dict = {
            "name": self.name,
            "total_nodes": self.total_nodes,
            "num_edges": self.num_edges,
            "node_types": {
                t: {"num_nodes": n, "num_features": self.num_features(t), "labels": t == self.target}
                for t, n in self.num_nodes.items()
            },
            "relations": {
                "__".join(key): {"num_edges": r.num_edges, "edge_features": _width(r.features)}
                for key, r in self.relations.items()
            },
            "target": self.target,
            "num_classes": self.num_classes,
            "memory_bytes": self.nbytes(),
        }
        for mask in MASK_NAMES:
            value = getattr(self, mask)
            out[mask.replace("_mask", "_nodes")] = None if value is None else int(value.sum())
        return out


def _width(rows: np.ndarray | None) -> int:
    return 0 if rows is None else int(rows.shape[1])
