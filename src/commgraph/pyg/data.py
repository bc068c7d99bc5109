"""This rank's part of a graph as a PyG ``Data``, what :func:`~commgraph.pyg.partition` returns for a
``Data`` or a set's directory, and the handle the bridge keeps of every part (:class:`PartHandle`).

The layout is G3's and DGCL's: the nodes the rank owns come first (ascending global id), then its
*halo* (the remote in-neighbours of owned nodes, grouped by owner rank). ``edge_index`` holds
every in-edge of an owned node, in local ids, and nothing else: a layer computes exact rows for
the owned nodes, and the halo rows are what the planned all-gather refreshes before each
``MessagePassing`` (:func:`~commgraph.pyg.full_graph`).
"""

from __future__ import annotations

import os
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
from commgraph.pyg.world import Session

DEFAULT_METHOD = "metis"
EdgeType = tuple[str, str, str]


@dataclass
class TypedLayout:
    """Each node type's rows in a rank's part, as homogeneous-view ids.

    Args:
        node_types, edge_types: the ``HeteroData``'s metadata, in its order.
        offsets: the homogeneous id of each type's first node, then the node count (``[T + 1]``).
        owned: per type, the owned nodes (ascending).
        halo: per type, the halo nodes (grouped by owner).
    """

    node_types: tuple[str, ...]
    edge_types: tuple[EdgeType, ...]
    offsets: np.ndarray
    owned: dict[str, np.ndarray]
    halo: dict[str, np.ndarray]

    def bounds(self, node_type: str) -> tuple[int, int]:
        """The homogeneous ids ``low..high-1`` of ``node_type``."""
        t = self.node_types.index(node_type)
        return int(self.offsets[t]), int(self.offsets[t + 1])

    def rows(self, node_type: str) -> int:
        """Rows of ``node_type`` in the part: owned, then halo."""
        return self.owned[node_type].size + self.halo[node_type].size


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


def open_set(s: Session, path: Path) -> PartHandle:
    """This rank's part of the partition set at ``path``, which must have one part per rank."""
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


def data_part(s: Session, handle: PartHandle, source):
    """The part ``handle`` holds as a PyG ``Data`` (:func:`~commgraph.pyg.partition`'s), its rows
    taken from ``source`` (the whole ``Data``) or, when None, from the set's files."""
    part = _as_data(handle, source)
    _remember(part, handle)
    return part


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


def cut_data(s: Session, data, method: str, seed: int, folder) -> PartHandle:
    """The partition set of the whole ``Data`` on every rank (cut once per machine), and this rank's part."""
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


EDGE_CHUNK = 1 << 22  # edges whose targets are written at a time by _edge_index


def _edge_index(part: Part) -> np.ndarray:
    """The part's ``edge_index`` in local ids (CSR order): ``[2, E]`` int64, written in place a
    chunk of rows at a time, so nothing edge-sized is made beside it."""
    indptr = np.asarray(part.indptr, dtype=np.int64)
    out = np.empty((2, int(indptr[-1])), dtype=np.int64)
    out[0] = part.indices
    row = 0
    while row < part.num_owned:
        end = min(int(np.searchsorted(indptr, indptr[row] + EDGE_CHUNK, side="right")) - 1, part.num_owned)
        end = max(end, row + 1)
        rows = np.arange(row, end, dtype=np.int64)
        out[1, indptr[row] : indptr[end]] = np.repeat(rows, np.diff(indptr[row : end + 1]))
        row = end
    return out


def _edge_positions(part: Part, edges: np.ndarray, num_nodes: int) -> np.ndarray:
    """Each local edge's position in the ``Data``'s ``edge_index`` (the first of repeated edges)."""
    n_id = np.concatenate([np.asarray(part.owned, dtype=np.int64), np.asarray(part.halo, dtype=np.int64)])
    src, dst = _edge_index(part)
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
    out = Data(edge_index=torch.from_numpy(_edge_index(part)), num_nodes=total)
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
    if part.features is not None and halo.shape[0] == 0:
        # the part's file mapped copy-on-write: its pages are the page cache's until written
        features = np.load(pset.path / f"part-{part.index}" / "features.npy", mmap_mode="c", allow_pickle=False)
        out.x = torch.from_numpy(np.asarray(features))
    elif part.features is not None:
        out.x = torch.from_numpy(np.concatenate([np.asarray(part.features), pset.rows("features", halo)]))
    if part.labels is not None:
        out.y = torch.from_numpy(np.concatenate([np.asarray(part.labels), pset.rows("labels", halo)]).astype(np.int64))
    for mask in MASK_NAMES:
        values = getattr(part, mask)
        if values is not None:
            out[mask] = torch.from_numpy(np.concatenate([np.asarray(values), np.zeros(halo.shape[0], dtype=bool)]))
    if part.weights is not None:
        out.edge_weight = torch.from_numpy(np.asarray(part.weights, dtype=np.float32))
