"""Reddit (Hamilton et al., 2017, GraphSAGE) as PyG's ``Reddit`` downloads it: ``reddit.zip`` with

    reddit_data.npz    feature [N, 602] float, label [N] int, node_types [N] (1 train, 2 val, 3 test)
    reddit_graph.npz   the adjacency as scipy's ``save_npz`` writes a COO matrix (row, col, shape)

Read without pickles (both are plain-array .npz files). Split as PyG: the node types.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from commgraph.errors import GraphFormatError
from commgraph.graph.core import Graph
from commgraph.graph.edgelist import EdgeChunks, csr_from_chunks
from commgraph.graph.snap import EdgeFileLoad

_CHUNK = 1 << 24


def read_reddit(folder: str | Path, *, name: str = "reddit", self_loops: bool = False) -> EdgeFileLoad:
    folder = Path(folder)
    data_file, graph_file = folder / "reddit_data.npz", folder / "reddit_graph.npz"
    try:
        with np.load(data_file, allow_pickle=False) as data:
            features, labels, types = data["feature"], data["label"], data["node_types"]
        with np.load(graph_file, allow_pickle=False) as data:
            fmt = np.asarray(data["format"]).item() if "format" in data.files else "coo"
            fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
            if fmt != "coo":
                raise GraphFormatError(graph_file, f"holds a {fmt} matrix; expected coo (scipy.sparse.save_npz)")
            row, col, shape = data["row"], data["col"], tuple(int(v) for v in data["shape"])
    except (KeyError, OSError, ValueError) as exc:
        raise GraphFormatError(folder, f"not a readable Reddit dataset ({exc})") from None
    num_nodes = features.shape[0]
    if shape != (num_nodes, num_nodes) or row.shape != col.shape:
        raise GraphFormatError(graph_file, f"adjacency of shape {shape} does not fit {num_nodes} nodes")
    if row.size and min(row.min(), col.min()) < 0 or max(row.max(initial=0), col.max(initial=0)) >= num_nodes:
        raise GraphFormatError(graph_file, f"holds node ids outside 0..{num_nodes - 1}")
    # entry (row, col) is the edge row -> col of PyG's edge_index; the graph is symmetrised anyway
    chunks = [np.stack([row[i : i + _CHUNK], col[i : i + _CHUNK]], axis=1) for i in range(0, row.shape[0], _CHUNK)]
    edges = EdgeChunks(chunks, int(row.shape[0]), int(max(row.max(initial=-1), col.max(initial=-1))))
    del row, col
    indptr, indices = csr_from_chunks(edges, num_nodes, symmetrize=True, self_loops=self_loops)
    masks = {key: types == value for key, value in (("train_mask", 1), ("val_mask", 2), ("test_mask", 3))}
    graph = Graph(indptr=indptr, indices=indices, features=features, labels=labels, **masks, name=name)
    return EdgeFileLoad(graph, edges.rows)
