"""Conversion to and from PyTorch Geometric ``Data`` (``edge_index[0]`` = source, ``[1]`` = target).

torch and torch_geometric are imported here only, so that loading and inspecting graphs stays fast.
"""

from __future__ import annotations

import numpy as np

from commgraph.errors import GraphValidationError
from commgraph.graph.build import from_edges
from commgraph.graph.core import MASK_NAMES, Graph
from commgraph.graph.hetero import HeteroGraph, Relation


def to_pyg(graph: Graph | HeteroGraph):
    """``graph`` as a PyG ``torch_geometric.data.Data`` (a :class:`HeteroGraph` as a ``HeteroData``,
    see :func:`hetero_to_pyg`), sharing no memory with it (tensors are
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

    if isinstance(graph, HeteroGraph):
        return hetero_to_pyg(graph)
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


def from_pyg(
    data, *, name: str | None = None, symmetrize: bool = True, self_loops: bool = False
) -> Graph | HeteroGraph:
    """A :class:`Graph` from a PyG ``Data`` (a :class:`HeteroGraph` from a ``HeteroData``, see
    :func:`hetero_from_pyg`; ``symmetrize`` and ``self_loops`` then do not apply), built by
    :func:`~commgraph.graph.from_edges`: ``x``, ``y`` (class labels; a ``[N, 1]`` column is
    flattened), the three split masks and an optional ``node_ids`` attribute are carried over.
    ``to_pyg`` then ``from_pyg`` gives the graph back.

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
    from torch_geometric.data import HeteroData

    if isinstance(data, HeteroData):
        return hetero_from_pyg(data, name=name)
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


def hetero_to_pyg(graph: HeteroGraph):
    """``graph`` as a PyG ``HeteroData`` (copies): per node type ``num_nodes`` and ``x``; on the
    target type ``y`` and the split masks; per relation ``edge_index`` (CSR order) and ``edge_attr``
    where it has edge features."""
    import torch
    from torch_geometric.data import HeteroData

    data = HeteroData()
    for node_type, count in graph.num_nodes.items():
        data[node_type].num_nodes = count
        if node_type in graph.features:
            data[node_type].x = torch.from_numpy(graph.features[node_type].copy())
    if graph.target is not None:
        store = data[graph.target]
        store.y = torch.from_numpy(graph.labels.copy())
        for mask in MASK_NAMES:
            setattr(store, mask, torch.from_numpy(getattr(graph, mask).copy()))
    for key, relation in graph.relations.items():
        src, dst = relation.edge_list()
        data[key].edge_index = torch.from_numpy(np.stack([src, dst]))
        if relation.features is not None:
            data[key].edge_attr = torch.from_numpy(relation.features.copy())
    data.name = graph.name
    return data


def hetero_from_pyg(data, *, name: str | None = None) -> HeteroGraph:
    """A :class:`HeteroGraph` from a PyG ``HeteroData``: each type's ``x``, the one labelled type's
    ``y`` and masks (it becomes the target), each relation's ``edge_index`` and ``edge_attr``.
    ``hetero_to_pyg`` then ``hetero_from_pyg`` gives the graph back.

    Raises:
        GraphValidationError: a relation without an ``edge_index`` or with one out of its types'
            range, a type whose node count PyG cannot tell, labels on more than one type.
    """
    counts = {}
    for node_type in data.node_types:
        count = data[node_type].num_nodes
        if count is None:
            raise GraphValidationError(f"node type {node_type!r} has no node count: set data[{node_type!r}].num_nodes")
        counts[node_type] = int(count)
    labelled = [t for t in data.node_types if getattr(data[t], "y", None) is not None]
    if len(labelled) > 1:
        raise GraphValidationError(
            f"node types {', '.join(map(repr, labelled))} all carry labels (y): labels live on one target type"
        )
    relations = {}
    for key in data.edge_types:
        store = data[key]
        if getattr(store, "edge_index", None) is None:
            raise GraphValidationError(f"relation {key} has no edge_index")
        edge_index = store.edge_index.detach().cpu().numpy()
        if edge_index.ndim != 2 or edge_index.shape[0] != 2:
            shape = list(edge_index.shape)
            raise GraphValidationError(f"relation {key}'s edge_index must have shape [2, E], got {shape}")
        src_type, _, dst_type = key
        for row, node_type in ((0, src_type), (1, dst_type)):
            ids = edge_index[row]
            if ids.size and (ids.min() < 0 or ids.max() >= counts[node_type]):
                raise GraphValidationError(
                    f"relation {key}'s edge_index row {row} holds id {int(ids.max())}, out of range for "
                    f"{counts[node_type]} {node_type!r} nodes"
                )
        attr = getattr(store, "edge_attr", None)
        attr = None if attr is None else attr.detach().cpu().numpy().reshape(edge_index.shape[1], -1)
        relations[key] = Relation.from_edges(edge_index[0], edge_index[1], counts[dst_type], attr)
    features = {t: data[t].x.detach().cpu().numpy() for t in data.node_types if getattr(data[t], "x", None) is not None}
    split = {}
    target = labelled[0] if labelled else None
    if target is not None:
        store = data[target]
        y = store.y.detach().cpu().numpy()
        split["labels"] = y[:, 0] if y.ndim == 2 and y.shape[1] == 1 else y
        for mask in MASK_NAMES:
            if getattr(store, mask, None) is not None:
                split[mask] = getattr(store, mask).detach().cpu().numpy()
    return HeteroGraph(
        counts, relations, features, target=target, name=name or getattr(data, "name", None) or "hetero", **split
    )
