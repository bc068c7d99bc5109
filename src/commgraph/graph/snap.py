"""SNAP edge lists: one ``src dst`` pair per line (tab or spaces), ``#`` comments, optionally gzipped.

The node count is the header's where the file has one: when every id lies in the range
0..N-1 of a ``# Nodes: N`` header, the ids are kept as they are and the graph has N nodes, those
that no edge names included (email-Enron's header says 36,692 and its edges name 36,691 of them:
it has 36,692 nodes, as SNAP publishes). Otherwise the nodes are the ids that occur: sparse ids
(web-Google's run to 916,427 for 875,713 nodes, as its header says) are remapped to 0..N-1 and the
original ids kept in ``Graph.node_ids``; dense ones (0..N-1 already) are kept as they are. A header
whose N disagrees with the ids the edges name is a warning on stderr, and the graph keeps those ids.

A file of exactly three columns is weighted (``src dst weight``); more columns (timestamps and the
like) are ignored. Unweighted files are parsed in chunks straight into CSR; a weighted file's edges
keep their weights through :func:`~commgraph.graph.build.from_edges`, which holds the edge list.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from commgraph.errors import GraphFormatError
from commgraph.graph.build import from_edges
from commgraph.graph.core import Graph
from commgraph.graph.edgelist import compact_ids, csr_from_chunks, read_edge_chunks
from commgraph.graph.registry import compare_count
from commgraph.graph.textio import declared_node_count, open_text, read_table

SUFFIXES = (".txt", ".txt.gz", ".tsv", ".tsv.gz", ".edges", ".edges.gz", ".el", ".el.gz")


@dataclass
class EdgeFileLoad:
    """A graph read from an edge file, with the number of edge lines the file held (what SNAP and
    OGB publish as the edge count, before symmetrisation and de-duplication)."""

    graph: Graph
    rows: int


def load_snap(path: str | Path, *, name: str | None = None, symmetrize: bool = True, self_loops: bool = False) -> Graph:
    """Read a SNAP edge list (chunked, straight into CSR; see :mod:`commgraph.graph.edgelist`)."""
    return read_snap(path, name=name, symmetrize=symmetrize, self_loops=self_loops).graph


def read_snap(
    path: str | Path, *, name: str | None = None, symmetrize: bool = True, self_loops: bool = False
) -> EdgeFileLoad:
    path = Path(path)
    edges = read_edge_chunks(path)
    if edges.rows == 0:
        raise GraphFormatError(path, "contains no edges (only comments or blank lines)")
    declared = declared_node_count(path)
    in_range = declared is not None and edges.max_id < declared  # the header's range names every node
    node_ids = None if in_range else compact_ids(edges, declared)
    if in_range:
        num_nodes = declared
    else:
        num_nodes = int(node_ids.shape[0]) if node_ids is not None else edges.max_id + 1
        if declared is not None:
            compare_count(str(path), "nodes (the ids its edges name)", num_nodes, declared, "its '# Nodes:' header")
    name = name or _stem(path)
    if _columns(path) == 3:
        pairs = np.concatenate(edges.chunks).astype(np.int64)  # already renumbered by compact_ids
        weights = read_table(path, dtype=np.float64, columns=None)[:, 2]
        graph = from_edges(
            pairs[:, 0],
            pairs[:, 1],
            num_nodes,
            symmetrize=symmetrize,
            self_loops=self_loops,
            weights=weights,
            node_ids=node_ids,
            name=name,
        )
        return EdgeFileLoad(graph, edges.rows)
    indptr, indices = csr_from_chunks(edges, num_nodes, symmetrize=symmetrize, self_loops=self_loops)
    return EdgeFileLoad(Graph(indptr=indptr, indices=indices, node_ids=node_ids, name=name), edges.rows)


def _columns(path: Path) -> int:
    """Columns of the first data line (0 for a file of comments only)."""
    with open_text(path) as handle:
        for raw in handle:
            text = raw.split("#", 1)[0].split()
            if text:
                return len(text)
    return 0


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".txt", ".tsv", ".edges", ".el"):
        name = name.removesuffix(suffix)
    return name
