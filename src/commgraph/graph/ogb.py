"""OGB node-property-prediction directories, exactly as the ``ogb`` package lays them out::

    ogbn_arxiv/
      raw/edge.csv.gz            one "src,dst" line per edge
      raw/num-node-list.csv.gz   the node count
      raw/node-feat.csv.gz       one comma-separated feature row per node (optional)
      raw/node-label.csv.gz      one label per node (optional; empty or NaN = unlabelled)
      split/<scheme>/{train,valid,test}.csv.gz   node ids, one per line

Pointing at the dataset folder or at its ``raw`` folder both work.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from commgraph.errors import GraphFormatError
from commgraph.graph.build import from_edges
from commgraph.graph.core import Graph
from commgraph.graph.textio import read_table


def is_ogb_dir(path: Path) -> bool:
    return (dataset_root(path) / "raw" / "edge.csv.gz").is_file()


def dataset_root(path: Path) -> Path:
    return path.parent if path.name == "raw" else path


def load_ogb(
    path: str | Path,
    *,
    name: str | None = None,
    split: str | None = None,
    symmetrize: bool = True,
    self_loops: bool = False,
) -> Graph:
    root = dataset_root(Path(path))
    raw = root / "raw"
    if not (raw / "edge.csv.gz").is_file():
        raise GraphFormatError(root, "not an OGB dataset directory: raw/edge.csv.gz is missing")
    edges = read_table(raw / "edge.csv.gz", dtype=np.int64, columns=2, delimiter=",",
                       non_negative=True, exact_columns=True)
    num_nodes = _node_count(raw, edges)
    features = None
    if (raw / "node-feat.csv.gz").is_file():
        features = _per_node(raw / "node-feat.csv.gz", num_nodes)
    labels = masks = None
    if (raw / "node-label.csv.gz").is_file():
        labels = _labels(raw / "node-label.csv.gz", num_nodes)
        masks = _split_masks(root, split, num_nodes)
    return from_edges(
        edges[:, 0],
        edges[:, 1],
        num_nodes,
        symmetrize=symmetrize,
        self_loops=self_loops,
        features=features,
        labels=labels,
        **(masks or {}),
        name=name or root.name,
    )


def _node_count(raw: Path, edges: np.ndarray) -> int:
    count_file = raw / "num-node-list.csv.gz"
    if not count_file.is_file():
        return int(edges.max(initial=-1)) + 1
    counts = read_table(count_file, dtype=np.int64, columns=1, exact_columns=True)
    if counts.shape[0] != 1:
        raise GraphFormatError(
            count_file, f"holds {counts.shape[0]} graphs; only single-graph datasets are supported"
        )
    declared = int(counts[0, 0])
    if edges.size:
        bad_rows = np.flatnonzero((edges >= declared).any(axis=1))
        if bad_rows.size:
            row = int(bad_rows[0])
            raise GraphFormatError(
                raw / "edge.csv.gz",
                f"node id {int(edges[row].max())} is beyond the declared node count {declared} "
                f"(raw/num-node-list.csv.gz)",
                line=row + 1,
            )
    return declared


def _per_node(path: Path, num_nodes: int) -> np.ndarray:
    table = read_table(path, dtype=np.float32, columns=None, delimiter=",")
    if table.shape[0] != num_nodes:
        raise GraphFormatError(path, f"has {table.shape[0]} rows but the graph has {num_nodes} nodes")
    return table


def _labels(path: Path, num_nodes: int) -> np.ndarray:
    values = _per_node(path, num_nodes)
    if values.shape[1] != 1:
        raise GraphFormatError(
            path, f"holds {values.shape[1]} label columns (multi-task); only one label per node is supported"
        )
    values = values[:, 0]
    labels = np.full(num_nodes, -1, dtype=np.int64)
    known = np.isfinite(values)
    labels[known] = values[known].astype(np.int64)
    return labels


def _split_masks(root: Path, split: str | None, num_nodes: int) -> dict[str, np.ndarray] | None:
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
        file = split_root / split / f"{part}.csv.gz"
        ids = read_table(file, dtype=np.int64, columns=1, non_negative=True, exact_columns=True)[:, 0]
        if ids.size and ids.max() >= num_nodes:
            line = int(np.flatnonzero(ids >= num_nodes)[0]) + 1
            raise GraphFormatError(file, f"node id {int(ids.max())} is out of range", line=line)
        mask = np.zeros(num_nodes, dtype=bool)
        mask[ids] = True
        masks[key] = mask
    return masks
