"""OGB node-property-prediction directories, exactly as the ``ogb`` package lays them out::

    ogbn_arxiv/
      raw/edge.csv.gz            one "src,dst" line per edge
      raw/num-node-list.csv.gz   the node count
      raw/node-feat.csv.gz       one comma-separated feature row per node (optional)
      raw/node-label.csv.gz      one label per node (optional; empty or NaN = unlabelled)
      split/<scheme>/{train,valid,test}.csv.gz   node ids, one per line

or OGB's binary layout (ogbn-papers100M): ``raw/data.npz`` (``edge_index``, ``node_feat``,
``num_nodes_list``) and ``raw/node-label.npz`` (``node_label``) with the same split folder.
Pointing at the dataset folder or at its ``raw`` folder both work. The edge CSV is parsed in chunks
straight into CSR (:mod:`commgraph.graph.edgelist`).

Heterogeneous datasets (ogbn-mag) are read into a :class:`~commgraph.graph.hetero.HeteroGraph` from
OGB's heterogeneous layout (the ``ogb`` package's ``read_csv_heterograph_raw``)::

    ogbn_mag/
      raw/num-node-dict.csv.gz        a header line of node types, one line of their counts
      raw/triplet-type-list.csv.gz    one "src_type,relation,dst_type" line per relation
      raw/relations/<src>___<rel>___<dst>/edge.csv.gz   "src,dst" per edge, ids of each end's type
      raw/node-feat/<type>/node-feat.csv.gz             a feature row per node of <type> (optional)
      raw/nodetype-has-label.csv.gz   a header line of node types, one line of True/False
      raw/node-label/<type>/node-label.csv.gz           a label per node of the labelled type
      split/<scheme>/nodetype-has-split.csv.gz, split/<scheme>/<type>/{train,valid,test}.csv.gz

Node types and relations come in sorted order, as ``ogb`` gives them; one type may carry labels.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from commgraph.errors import GraphFormatError
from commgraph.graph.core import Graph
from commgraph.graph.edgelist import EdgeChunks, csr_from_chunks, read_edge_chunks
from commgraph.graph.hetero import HeteroGraph, Relation
from commgraph.graph.snap import EdgeFileLoad
from commgraph.graph.textio import open_text, read_table

_BINARY_CHUNK = 1 << 24  # edges per chunk taken from a binary edge_index


def is_ogb_dir(path: Path) -> bool:
    raw = dataset_root(path) / "raw"
    return (raw / "edge.csv.gz").is_file() or (raw / "data.npz").is_file()


def is_ogb_hetero_dir(path: Path) -> bool:
    return (dataset_root(path) / "raw" / "num-node-dict.csv.gz").is_file()


def dataset_root(path: Path) -> Path:
    return path.parent if path.name == "raw" else path


def load_ogb(
    path: str | Path,
    *,
    name: str | None = None,
    split: str | None = None,
    symmetrize: bool = True,
    self_loops: bool = False,
    labels: bool = True,
) -> Graph:
    """Read an OGB node-property-prediction directory. ``labels=False`` skips the node labels and
    the split (ogbn-proteins, whose 112 binary tasks are no single class per node)."""
    return read_ogb(path, name=name, split=split, symmetrize=symmetrize, self_loops=self_loops, labels=labels).graph


def read_ogb(
    path: str | Path,
    *,
    name: str | None = None,
    split: str | None = None,
    symmetrize: bool = True,
    self_loops: bool = False,
    labels: bool = True,
) -> EdgeFileLoad:
    root = dataset_root(Path(path))
    raw = root / "raw"
    if (raw / "data.npz").is_file() and not (raw / "edge.csv.gz").is_file():
        edges, num_nodes, features, label_values = _binary(raw, labels)
        label_file = raw / "node-label.npz"
    elif (raw / "edge.csv.gz").is_file():
        edges = read_edge_chunks(raw / "edge.csv.gz", comma=True, exact_columns=True)
        num_nodes = _node_count(raw, edges)
        features = None
        if (raw / "node-feat.csv.gz").is_file():
            features = _per_node(raw / "node-feat.csv.gz", num_nodes)
        label_values = None
        label_file = raw / "node-label.csv.gz"
        if labels and label_file.is_file():
            label_values = _per_node(raw / "node-label.csv.gz", num_nodes)
    else:
        raise GraphFormatError(root, "not an OGB dataset directory: raw/edge.csv.gz is missing")
    rows = edges.rows
    node_labels = masks = None
    if label_values is not None:
        node_labels = _labels(label_file, label_values)
        masks = _split_masks(root, split, num_nodes)
    indptr, indices = csr_from_chunks(edges, num_nodes, symmetrize=symmetrize, self_loops=self_loops)
    graph = Graph(
        indptr=indptr, indices=indices, features=features, labels=node_labels, **(masks or {}), name=name or root.name
    )
    return EdgeFileLoad(graph, rows)


def _binary(raw: Path, labels: bool) -> tuple[EdgeChunks, int, np.ndarray | None, np.ndarray | None]:
    """OGB's binary layout: arrays in ``raw/data.npz`` and ``raw/node-label.npz``."""
    try:
        with np.load(raw / "data.npz", allow_pickle=False) as data:
            edge_index = data["edge_index"]
            num_nodes = int(np.asarray(data["num_nodes_list"]).ravel()[0])
            features = data["node_feat"] if "node_feat" in data.files else None
        label_values = None
        if labels and (raw / "node-label.npz").is_file():
            with np.load(raw / "node-label.npz", allow_pickle=False) as data:
                label_values = np.asarray(data["node_label"], dtype=np.float32).reshape(num_nodes, -1)
    except (KeyError, OSError, ValueError) as exc:
        raise GraphFormatError(raw, f"not a readable OGB binary dataset ({exc})") from None
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise GraphFormatError(raw / "data.npz", f"edge_index must have shape [2, E], got {edge_index.shape}")
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        raise GraphFormatError(raw / "data.npz", f"edge_index holds ids outside 0..{num_nodes - 1}")
    pairs = edge_index.T
    chunks = [pairs[i : i + _BINARY_CHUNK] for i in range(0, pairs.shape[0], _BINARY_CHUNK)]
    edges = EdgeChunks(chunks, int(pairs.shape[0]), int(edge_index.max(initial=-1)))
    if features is not None and features.shape[0] != num_nodes:
        raise GraphFormatError(
            raw / "data.npz", f"node_feat has {features.shape[0]} rows but the graph has {num_nodes} nodes"
        )
    return edges, num_nodes, features, label_values


def _node_count(raw: Path, edges: EdgeChunks) -> int:
    count_file = raw / "num-node-list.csv.gz"
    if not count_file.is_file():
        return edges.max_id + 1
    counts = read_table(count_file, dtype=np.int64, columns=1, exact_columns=True)
    if counts.shape[0] != 1:
        raise GraphFormatError(count_file, f"holds {counts.shape[0]} graphs; only single-graph datasets are supported")
    declared = int(counts[0, 0])
    if edges.max_id >= declared:
        before = 0
        for chunk in edges.chunks:
            bad_rows = np.flatnonzero((chunk >= declared).any(axis=1))
            if bad_rows.size:
                row = int(bad_rows[0])
                raise GraphFormatError(
                    raw / "edge.csv.gz",
                    f"node id {int(chunk[row].max())} is beyond the declared node count {declared} "
                    f"(raw/num-node-list.csv.gz)",
                    line=before + row + 1,
                )
            before += chunk.shape[0]
    return declared


def _per_node(path: Path, num_nodes: int) -> np.ndarray:
    table = read_table(path, dtype=np.float32, columns=None, delimiter=",")
    if table.shape[0] != num_nodes:
        raise GraphFormatError(path, f"has {table.shape[0]} rows but the graph has {num_nodes} nodes")
    return table


def _labels(path: Path, values: np.ndarray) -> np.ndarray:
    num_nodes = values.shape[0]
    if values.shape[1] != 1:
        raise GraphFormatError(
            path, f"holds {values.shape[1]} label columns (multi-task); only one label per node is supported"
        )
    values = values[:, 0]
    labels = np.full(num_nodes, -1, dtype=np.int64)
    known = np.isfinite(values)
    labels[known] = values[known].astype(np.int64)
    return labels


def _split_masks(
    root: Path, split: str | None, num_nodes: int, node_type: str | None = None
) -> dict[str, np.ndarray] | None:
    """The masks of ``split/<scheme>/`` (of ``split/<scheme>/<node_type>/`` for a heterogeneous dataset)."""
    split_root = root / "split"
    schemes = sorted(p.name for p in split_root.iterdir() if p.is_dir()) if split_root.is_dir() else []
    if not schemes:
        raise GraphFormatError(root, "has node labels but no split/<scheme>/ folder")
    if split is None:
        if len(schemes) > 1:
            raise GraphFormatError(root, f"has several splits {schemes}: choose one with --split")
        split = schemes[0]
    elif split not in schemes:
        raise GraphFormatError(root, f"has no split {split!r}; available: {schemes}")
    masks = {}
    for part, key in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
        file = split_root / split / (node_type or "") / f"{part}.csv.gz"
        ids = read_table(file, dtype=np.int64, columns=1, non_negative=True, exact_columns=True)[:, 0]
        if ids.size and ids.max() >= num_nodes:
            line = int(np.flatnonzero(ids >= num_nodes)[0]) + 1
            raise GraphFormatError(file, f"node id {int(ids.max())} is out of range", line=line)
        mask = np.zeros(num_nodes, dtype=bool)
        mask[ids] = True
        masks[key] = mask
    return masks


def load_ogb_hetero(path: str | Path, *, name: str | None = None, split: str | None = None) -> HeteroGraph:
    """Read an OGB heterogeneous node-property-prediction directory (see the module description)
    into a :class:`HeteroGraph` whose target is the labelled type (none without labels)."""
    root = dataset_root(Path(path))
    raw = root / "raw"
    counts = _header_row(raw / "num-node-dict.csv.gz")
    num_nodes = {t: _count(raw / "num-node-dict.csv.gz", t, counts[t]) for t in sorted(counts)}
    triplets = _triplets(raw / "triplet-type-list.csv.gz", num_nodes)
    relations = {triplet: _relation(raw, triplet, num_nodes) for triplet in triplets}
    features = {
        t: _per_node(raw / "node-feat" / t / "node-feat.csv.gz", n)
        for t, n in num_nodes.items()
        if (raw / "node-feat" / t / "node-feat.csv.gz").is_file()
    }
    target = _labelled_type(raw / "nodetype-has-label.csv.gz", num_nodes)
    node_data: dict = {}
    if target is not None:
        label_file = raw / "node-label" / target / "node-label.csv.gz"
        node_data["labels"] = _labels(label_file, _per_node(label_file, num_nodes[target]))
        node_data.update(_split_masks(root, split, num_nodes[target], node_type=target) or {})
    return HeteroGraph(
        num_nodes, relations, features=features, target=target, name=name or root.name.replace("_", "-"), **node_data
    )


def _header_row(path: Path) -> dict[str, str]:
    """OGB's per-type tables: a header line of node types above one line of values."""
    with open_text(path) as handle:
        rows = [row for row in csv.reader(handle) if row]
    if len(rows) < 2 or len(rows[0]) != len(rows[1]):
        raise GraphFormatError(path, "must hold a header line of node types and one line of values under it")
    if len(rows) > 2:
        raise GraphFormatError(path, f"holds {len(rows) - 1} graphs; only single-graph datasets are supported")
    return dict(zip((t.strip() for t in rows[0]), (v.strip() for v in rows[1])))


def _count(path: Path, node_type: str, value: str) -> int:
    try:
        return int(float(value))
    except ValueError:
        raise GraphFormatError(path, f"the node count of {node_type!r} is {value!r}, not a number", line=2) from None


def _triplets(path: Path, num_nodes: dict[str, int]) -> list[tuple[str, str, str]]:
    with open_text(path) as handle:
        rows = [tuple(field.strip() for field in row) for row in csv.reader(handle) if row]
    for line, row in enumerate(rows, start=1):
        if len(row) != 3:
            got = ",".join(row)
            raise GraphFormatError(path, f"a relation is 'src_type,relation,dst_type', got {got!r}", line=line)
        unknown = [t for t in (row[0], row[2]) if t not in num_nodes]
        if unknown:
            raise GraphFormatError(
                path, f"names node type {unknown[0]!r}, absent from raw/num-node-dict.csv.gz", line=line
            )
    return sorted(rows)


def _relation(raw: Path, triplet: tuple[str, str, str], num_nodes: dict[str, int]) -> Relation:
    file = raw / "relations" / "___".join(triplet) / "edge.csv.gz"
    edges = read_edge_chunks(file, comma=True, exact_columns=True)
    pairs = np.concatenate(edges.chunks) if edges.chunks else np.empty((0, 2), dtype=np.int64)
    limits = np.array([num_nodes[triplet[0]], num_nodes[triplet[2]]], dtype=np.int64)
    bad = np.flatnonzero((pairs >= limits).any(axis=1))
    if bad.size:
        row = int(bad[0])
        end = 0 if pairs[row, 0] >= limits[0] else 1
        node_type = triplet[2 * end]
        raise GraphFormatError(
            file,
            f"{node_type!r} id {int(pairs[row, end])} is out of range for its {int(limits[end])} nodes "
            f"(raw/num-node-dict.csv.gz)",
            line=row + 1,
        )
    return Relation.from_edges(pairs[:, 0], pairs[:, 1], num_nodes[triplet[2]])


def _labelled_type(path: Path, num_nodes: dict[str, int]) -> str | None:
    if not path.is_file():
        return None
    labelled = sorted(t for t, flag in _header_row(path).items() if flag.lower() == "true")
    unknown = [t for t in labelled if t not in num_nodes]
    if unknown:
        raise GraphFormatError(path, f"labels node type {unknown[0]!r}, absent from raw/num-node-dict.csv.gz")
    if len(labelled) > 1:
        raise GraphFormatError(path, f"labels several node types {labelled}; only one target type is supported")
    return labelled[0] if labelled else None
