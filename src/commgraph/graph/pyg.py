"""Conversion to and from PyTorch Geometric ``Data`` (``edge_index[0]`` = source, ``[1]`` = target).

torch and torch_geometric are imported here only, so that loading and inspecting graphs stays fast.
"""

from __future__ import annotations

import numpy as np

from commgraph.errors import GraphValidationError
from commgraph.graph.build import from_edges
from commgraph.graph.core import MASK_NAMES, Graph


def to_pyg(graph: Graph):
    """``graph`` as a PyG ``torch_geometric.data.Data``, sharing no memory with it (tensors are
    copies): ``edge_index`` (row 0 sources, row 1 destinations, in CSR order), ``x``, ``y``, the
    three split masks, ``node_ids`` and ``name``, each where the graph has it. Edge weights are not
    carried over.

    Args:
        graph: the graph to convert.

    Returns:
        torch_geometric.data.Data: with ``num_nodes`` set, so isolated nodes survive.

    Shapes:
        - **edge_index:** ``[2, E]`` (int64)
        - **x:** ``[N, F]`` (float32); **y**, masks, **node_ids:** ``[N]``
    """
    import torch
    from torch_geometric.data import Data

    src, dst = graph.edge_list()
    data = Data(edge_index=torch.from_numpy(np.stack([src, dst])), num_nodes=graph.num_nodes)
    if graph.features is not None:
        data.x = torch.from_numpy(graph.features.copy())
    if graph.labels is not None:
        data.y = torch.from_numpy(graph.labels.copy())
    for mask in MASK_NAMES:
        if getattr(graph, mask) is not None:
            setattr(data, mask, torch.from_numpy(getattr(graph, mask).copy()))
    if graph.node_ids is not None:
        data.node_ids = torch.from_numpy(graph.node_ids.copy())
    data.name = graph.name
    return data


def from_pyg(data, *, name: str | None = None, symmetrize: bool = True, self_loops: bool = False) -> Graph:
    """A :class:`Graph` from a PyG ``Data``, built by :func:`~commgraph.graph.from_edges`: ``x``,
    ``y`` (class labels; a ``[N, 1]`` column is flattened), the three split masks and an optional
    ``node_ids`` attribute are carried over. ``to_pyg`` then ``from_pyg`` gives the graph back.

    Args:
        data: a ``torch_geometric.data.Data`` with ``edge_index`` (tensors may be on any device).
        name: the graph's name (default: ``data.name``, else ``"graph"``).
        symmetrize: add every reverse edge, as training expects.
        self_loops: keep self loops (dropped by default, as PyG's datasets do).

    Returns:
        Graph: duplicate edges removed, validated.

    Shapes:
        - **data.edge_index:** ``[2, E]``; **data.x:** ``[N, F]``; **data.y:** ``[N]`` or ``[N, 1]``

    Raises:
        GraphValidationError: no ``edge_index``, a malformed one, or multi-column labels.
    """
    if getattr(data, "edge_index", None) is None:
        raise GraphValidationError("PyG Data has no edge_index")
    edge_index = data.edge_index.detach().cpu().numpy()
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise GraphValidationError(f"edge_index must have shape [2, E], got {edge_index.shape}")
    node_data = {}
    if getattr(data, "x", None) is not None:
        node_data["features"] = data.x.detach().cpu().numpy()
    y = getattr(data, "y", None)
    if y is not None:
        y = y.detach().cpu().numpy()
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.ndim != 1:
            raise GraphValidationError(f"only 1-D class labels are supported, got y of shape {y.shape}")
        node_data["labels"] = y
    for key in (*MASK_NAMES, "node_ids"):
        if getattr(data, key, None) is not None:
            node_data[key] = getattr(data, key).detach().cpu().numpy()
    return from_edges(
        edge_index[0],
        edge_index[1],
        data.num_nodes,
        symmetrize=symmetrize,
        self_loops=self_loops,
        name=name or getattr(data, "name", None) or "graph",
        **node_data,
    )
