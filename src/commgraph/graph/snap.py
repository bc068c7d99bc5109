"""SNAP edge lists: one ``src dst`` pair per line (tab or spaces), ``#`` comments, optionally gzipped.

SNAP ids are often sparse (web-Google's run to 916,427 for 875,713 nodes); they are remapped to
0..N-1 and the original ids kept in ``Graph.node_ids``. Dense ids (0..N-1 already) are kept as they
are, and a ``# Nodes: N`` header then also counts isolated nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from commgraph.errors import GraphFormatError
from commgraph.graph.core import Graph
from commgraph.graph.edgelist import compact_ids, csr_from_chunks, read_edge_chunks
from commgraph.graph.textio import declared_node_count

SUFFIXES = (".txt", ".txt.gz", ".tsv", ".tsv.gz", ".edges", ".edges.gz", ".el", ".el.gz")


@dataclass
class EdgeFileLoad:
    """A graph read from an edge file, with the number of edge lines the file held (what SNAP and
    OGB publish as the edge count, before symmetrisation and de-duplication)."""

    graph: Graph
    rows: int


def load_snap(
    path: str | Path, *, name: str | None = None, symmetrize: bool = True, self_loops: bool = False
) -> Graph:
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
    node_ids = compact_ids(edges, declared)
    num_nodes = int(node_ids.shape[0]) if node_ids is not None else edges.max_id + 1
    if declared is not None:
        if node_ids is None and num_nodes > declared:
            raise GraphFormatError(
                path,
                f"header declares {declared} nodes but edges use node id {num_nodes - 1}; "
                "fix the '# Nodes:' line or remove it",
            )
        if node_ids is not None and num_nodes > declared:
            raise GraphFormatError(
                path,
                f"header declares {declared} nodes but edges use {num_nodes} distinct ids; "
                "fix the '# Nodes:' line or remove it",
            )
        if node_ids is None:
            num_nodes = declared
    indptr, indices = csr_from_chunks(edges, num_nodes, symmetrize=symmetrize, self_loops=self_loops)
    graph = Graph(indptr=indptr, indices=indices, node_ids=node_ids, name=name or _stem(path))
    return EdgeFileLoad(graph, edges.rows)


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".txt", ".tsv", ".edges", ".el"):
        name = name.removesuffix(suffix)
    return name
