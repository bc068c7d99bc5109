"""SNAP edge lists: one ``src dst`` pair per line (tab or spaces), ``#`` comments, optionally gzipped.
A file of exactly three columns is weighted (``src dst weight``); more columns (timestamps and the
like) are ignored.

SNAP ids are often sparse (web-Google's run to 916,427 for 875,713 nodes); they are remapped to
0..N-1 and the original ids kept in ``Graph.node_ids``. Dense ids (0..N-1 already) are kept as they
are, and a ``# Nodes: N`` header then also counts isolated nodes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from commgraph.errors import GraphFormatError
from commgraph.graph.build import from_edges, unique_sorted
from commgraph.graph.core import Graph
from commgraph.graph.textio import declared_node_count, open_text, read_table

SUFFIXES = (".txt", ".txt.gz", ".tsv", ".tsv.gz", ".edges", ".edges.gz", ".el", ".el.gz")


def load_snap(
    path: str | Path, *, name: str | None = None, symmetrize: bool = True, self_loops: bool = False
) -> Graph:
    path = Path(path)
    edges = read_table(path, dtype=np.int64, columns=2, non_negative=True)
    weights = read_table(path, dtype=np.float64, columns=None)[:, 2] if _columns(path) == 3 else None
    if edges.shape[0] == 0:
        raise GraphFormatError(path, "contains no edges (only comments or blank lines)")
    declared = declared_node_count(path)
    ids, node_ids = _compact_ids(edges.ravel(), declared)
    num_nodes = int(node_ids.shape[0]) if node_ids is not None else int(ids.max()) + 1
    if declared is not None:
        if num_nodes > declared and node_ids is None:
            raise GraphFormatError(
                path,
                f"header declares {declared} nodes but edges use node id {num_nodes - 1}; "
                "fix the '# Nodes:' line or remove it",
            )
        if node_ids is not None and node_ids.shape[0] > declared:
            raise GraphFormatError(
                path,
                f"header declares {declared} nodes but edges use {node_ids.shape[0]} distinct ids; "
                "fix the '# Nodes:' line or remove it",
            )
        if node_ids is None:
            num_nodes = declared
    pairs = ids.reshape(-1, 2)
    return from_edges(
        pairs[:, 0],
        pairs[:, 1],
        num_nodes,
        symmetrize=symmetrize,
        self_loops=self_loops,
        weights=weights,
        node_ids=node_ids,
        name=name or _stem(path),
    )


def _columns(path: Path) -> int:
    """Columns of the first data line (0 for a file of comments only)."""
    with open_text(path) as handle:
        for raw in handle:
            text = raw.split("#", 1)[0].split()
            if text:
                return len(text)
    return 0


def _compact_ids(raw: np.ndarray, declared: int | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Map ids to 0..N-1. Returns (mapped ids, original id per new id), or (raw, None) when the ids
    are already dense from 0 (every id below the maximum, or below the declared count, is used)."""
    largest = int(raw.max())
    limit = max(largest + 1, declared or 0)
    if limit <= 4 * raw.shape[0] + 1024:  # a presence bitmap is cheaper than sorting
        present = np.zeros(limit, dtype=bool)
        present[raw] = True
        if present[: largest + 1].all():
            return raw, None
        new_id = np.cumsum(present) - 1
        return new_id[raw], np.flatnonzero(present)
    node_ids = unique_sorted(raw)
    return np.searchsorted(node_ids, raw), node_ids


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".txt", ".tsv", ".edges", ".el"):
        name = name.removesuffix(suffix)
    return name
