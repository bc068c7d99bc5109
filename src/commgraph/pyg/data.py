"""This rank's part of a graph as a PyG ``Data``: :func:`partition`.

The layout is G3's and DGCL's: the nodes the rank owns come first (ascending global id), then its
*halo* (the remote in-neighbours of owned nodes, grouped by owner rank). ``edge_index`` holds
every in-edge of an owned node, in local ids, and nothing else: a layer computes exact rows for
the owned nodes, and the halo rows are what the planned all-gather refreshes before each
``MessagePassing`` (:func:`~commgraph.pyg.full_graph`).
"""

from __future__ import annotations

import os
import typing
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from commgraph.errors import BridgeError, GraphValidationError
from commgraph.graph.build import from_edges
from commgraph.graph.core import MASK_NAMES
from commgraph.partition import PartitionSet, is_partition_set, load_partition_set
from commgraph.partition.store import Part
from commgraph.pyg.world import Session, session

if typing.TYPE_CHECKING:
    from commgraph.pyg.hetero import TypedLayout

DEFAULT_METHOD = "metis"


@dataclass
class PartHandle:
    """What the bridge keeps of a partitioned ``Data``: the set, this rank's part, and, when the
    part was cut from a ``Data`` in memory, each local edge's position in that ``Data``'s
    ``edge_index`` (``edge_ids``); for a ``HeteroData``, its node types' rows (``types``)."""

    pset: PartitionSet
    part: Part
    edge_ids: np.ndarray | None = None
    types: TypedLayout | None = None  # a HeteroData's part: each node type's rows

    @property
    def num_owned(self) -> int:
        return self.part.num_owned

    @property
    def n_id(self) -> np.ndarray:
        return np.concatenate([np.asarray(self.part.owned, dtype=np.int64), np.asarray(self.part.halo, dtype=np.int64)])


_handles: dict[int, PartHandle] = {}


def find_handle(data) -> PartHandle | None:
    """The part behind a ``Data`` that :func:`partition` returned, or None for any other object."""
    return _handles.get(id(data))


def handle_of(data) -> PartHandle:
    """The part behind a ``Data`` that :func:`partition` returned.

    Raises:
        BridgeError: ``data`` did not come from :func:`partition`.
    """
    found = find_handle(data)
    if found is None:
        raise BridgeError("this Data is not a part: pass the Data that cg.partition(...) returned")
    return found


def _remember(data, handle: PartHandle) -> None:
    key = id(data)
    _handles[key] = handle
    weakref.finalize(data, _handles.pop, key, None)


def partition(data, *, method: str = DEFAULT_METHOD, seed: int = 0, folder: str | Path | None = None):
    """This rank's part of ``data``, as a PyG ``Data``.

    Every rank of the job calls it with the same graph. A machine partitions once: its first rank
    writes the set into the partition cache (``$COMMGRAPH_HOME/partitions``, keyed by the graph's
    content, method, part count and seed, as ``commgraph train`` does) and the others map it. For a
    graph too large to load in every rank, pass the directory of a set made by ``commgraph
    partition make`` instead: no rank then holds the whole graph.

    Args:
        data: a ``torch_geometric.data.Data`` (every rank's copy of the whole graph; edges as
            given, directed, self loops kept), a ``HeteroData`` (its part is a ``HeteroData``, see
            :func:`~commgraph.pyg.hetero.partition_hetero`), or a partition set's directory with
            one part per rank (a typed set's part is a ``HeteroData``, see
            :func:`~commgraph.pyg.hetero.partition_typed_set`).
        method: ``metis``, ``g3``, ``chunk`` or ``random`` (a ``Data`` only).
        seed: the partitioner's seed (a ``Data`` only).
        folder: where to write the set instead of the cache (a ``Data`` only).

    Returns:
        torch_geometric.data.Data: owned nodes first, then halo nodes, with ``edge_index`` (every
        in-edge of an owned node, local ids), ``x``, ``y``, each other node attribute, the masks
        (false on halo rows, so a loss over a mask counts each node on one rank only), each edge
        attribute (``edge_attr``, ``edge_weight``, ...) of those edges, ``n_id`` (global ids) and
        ``num_owned``; a link split's ``edge_label_index`` and ``edge_label`` as they are (global).

    Shapes:
        - **edge_index:** ``[2, E_r]`` (int64, local ids; destinations ``< num_owned``)
        - **x:** ``[num_owned + num_halo, F]``; **n_id**, **y**, masks: ``[num_owned + num_halo]``

    Raises:
        BridgeError: ``edge_index`` out of range, a set whose part count is not the job's.
    """
    from torch_geometric.data import Data, HeteroData

    s = session()
    if isinstance(data, HeteroData):
        from commgraph.pyg.hetero import partition_hetero

        return partition_hetero(s, data, method, seed, folder)
    if isinstance(data, (str, os.PathLike)):
        handle = _open_set(s, Path(data))
        if "typed" in handle.pset.manifest:
            from commgraph.pyg.hetero import partition_typed_set

            return partition_typed_set(s, handle.pset)
        source = None
    elif isinstance(data, Data):
        handle = _cut(s, data, method, seed, folder)
        source = data
    else:
        raise BridgeError(
            f"cg.partition takes a torch_geometric Data or a partition set's path, got {type(data).__name__}"
        )
    part = _as_data(handle, source)
    _remember(part, handle)
    return part


def _open_set(s: Session, path: Path) -> PartHandle:
    if not is_partition_set(path):
        raise BridgeError(
            f"{path} is not a partition set: make one with `commgraph partition make GRAPH --parts N --out {path}`"
        )
    pset = load_partition_set(path)
    if pset.num_parts != s.world.size:
        raise BridgeError(
            f"{path} has {pset.num_parts} parts but the job has {s.world.size} ranks: run with "
            f"--workers {pset.num_parts} or make a set of {s.world.size} parts"
        )
    return PartHandle(pset, pset.part(s.world.rank))


def check_edge_index(edge_index: torch.Tensor, num_nodes: int, name: str = "edge_index") -> np.ndarray:
    """``edge_index`` as an int64 ``[2, E]`` array, every id in ``0..num_nodes-1``.

    Raises:
        BridgeError: another shape, or an id out of range.
    """
    array = edge_index.detach().cpu().numpy() if isinstance(edge_index, torch.Tensor) else np.asarray(edge_index)
    if array.ndim != 2 or array.shape[0] != 2:
        raise BridgeError(f"{name} must have shape [2, E], got {list(array.shape)}")
    if array.size and (array.min() < 0 or array.max() >= num_nodes):
        bad = int(array.max()) if array.max() >= num_nodes else int(array.min())
        raise BridgeError(f"{name} holds node id {bad} but the graph has {num_nodes} nodes (ids 0..{num_nodes - 1})")
    return array.astype(np.int64, copy=False)


def _cut(s: Session, data, method: str, seed: int, folder) -> PartHandle:
    num_nodes = int(data.num_nodes)
    edges = check_edge_index(data.edge_index, num_nodes)
    pset = cut_graph(s, _graph_of(data, edges, num_nodes), method, seed, folder)
    part = pset.part(s.world.rank)
    return PartHandle(pset, part, _edge_positions(part, edges, num_nodes))


def cut_graph(s: Session, graph, method: str, seed: int, folder, node_type: np.ndarray | None = None) -> PartitionSet:
    """The partition set of ``graph`` into the job's ranks: each machine's first rank makes it
    (in ``folder`` or the partition cache) unless a sound one is there, every rank maps it."""
    from commgraph.launch.cache import cached_partition_set, partition_cache_entry

    parts = s.world.size
    target = Path(folder) if folder is not None else partition_cache_entry(graph, method, parts, seed)
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        cached_partition_set(graph, parts, method, seed, target, node_type=node_type)
    if parts > 1:
        s.comm.barrier()  # every machine's first rank has written its set
    return load_partition_set(target, graph)


def _graph_of(data, edges: np.ndarray, num_nodes: int):
    """The ``Data`` as a :class:`~commgraph.graph.Graph` to partition: its edges as given, with the
    features, class labels and masks the set can hold (the samplers' feature fetch reads them from
    the set), structure and features alone where the labels are not one class per node."""
    name = getattr(data, "name", None) or "data"
    node_data = {}
    x = getattr(data, "x", None)
    if isinstance(x, torch.Tensor) and x.dim() == 2 and x.is_floating_point():
        node_data["features"] = x.detach().cpu().numpy()
    y = getattr(data, "y", None)
    labelled = dict(node_data)
    if isinstance(y, torch.Tensor) and y.dim() == 1 and not y.is_floating_point() and y.shape[0] == num_nodes:
        labelled["labels"] = y.detach().cpu().numpy()
        for mask in MASK_NAMES:
            value = getattr(data, mask, None)
            if isinstance(value, torch.Tensor) and value.dtype == torch.bool:
                labelled[mask] = value.detach().cpu().numpy()
    try:
        return from_edges(edges[0], edges[1], num_nodes, symmetrize=False, self_loops=True, name=name, **labelled)
    except GraphValidationError:
        return from_edges(edges[0], edges[1], num_nodes, symmetrize=False, self_loops=True, name=name, **node_data)


def _local_edges(part: Part) -> tuple[np.ndarray, np.ndarray]:
    """Sources and destinations of the part's edges, in local ids (CSR order)."""
    counts = np.diff(np.asarray(part.indptr, dtype=np.int64))
    dst = np.repeat(np.arange(part.num_owned, dtype=np.int64), counts)
    return np.asarray(part.indices, dtype=np.int64), dst


def _edge_positions(part: Part, edges: np.ndarray, num_nodes: int) -> np.ndarray:
    """Each local edge's position in the ``Data``'s ``edge_index`` (the first of repeated edges)."""
    n_id = np.concatenate([np.asarray(part.owned, dtype=np.int64), np.asarray(part.halo, dtype=np.int64)])
    src, dst = _local_edges(part)
    keys = edges[1] * num_nodes + edges[0]
    order = np.argsort(keys, kind="stable")
    wanted = n_id[dst] * num_nodes + n_id[src]
    return order[np.searchsorted(keys[order], wanted)]


def _as_data(handle: PartHandle, source):
    """The part as a ``Data`` (see :func:`partition`)."""
    from torch_geometric.data import Data

    part = handle.part
    n_id = handle.n_id
    owned, total = part.num_owned, n_id.shape[0]
    src, dst = _local_edges(part)
    out = Data(edge_index=torch.from_numpy(np.stack([src, dst])), num_nodes=total)
    out.n_id = torch.from_numpy(n_id)
    out.num_owned = owned
    if source is None:
        _from_set(out, handle)
        return out
    positions = torch.from_numpy(n_id)
    edge_positions = torch.from_numpy(handle.edge_ids)
    for key, value in source.items():
        if key in ("edge_index", "num_nodes") or not isinstance(value, torch.Tensor):
            continue
        if key.startswith("edge_label"):  # a split's label edges: global ids, every rank the same
            out[key] = value
        elif key in MASK_NAMES:
            mask = value[positions].clone()
            mask[owned:] = False
            out[key] = mask
        elif source.is_node_attr(key):
            out[key] = value[positions.to(value.device)]
        elif source.is_edge_attr(key):
            out[key] = value[edge_positions.to(value.device)]
    return out


def _from_set(out, handle: PartHandle) -> None:
    """Node data from the set's files: owned rows from this part, halo rows from their owners'
    mapped files."""
    part, pset = handle.part, handle.pset
    halo = np.asarray(part.halo, dtype=np.int64)
    if part.features is not None:
        out.x = torch.from_numpy(np.concatenate([np.asarray(part.features), pset.rows("features", halo)]))
    if part.labels is not None:
        out.y = torch.from_numpy(np.concatenate([np.asarray(part.labels), pset.rows("labels", halo)]).astype(np.int64))
    for mask in MASK_NAMES:
        values = getattr(part, mask)
        if values is not None:
            out[mask] = torch.from_numpy(np.concatenate([np.asarray(values), np.zeros(halo.shape[0], dtype=bool)]))
    if part.weights is not None:
        out.edge_weight = torch.from_numpy(np.asarray(part.weights, dtype=np.float32))
