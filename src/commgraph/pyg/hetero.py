r"""Heterogeneous graphs through the bridge, full-graph: a ``HeteroData``'s part and a ``to_hetero``
or ``HeteroConv`` model across ranks.

The nodes are split on the graph's homogeneous view (node types one after the other, type
:math:`t`'s node :math:`i` at :math:`o_t + i`), by METIS with one balance constraint per node type
(each type's nodes spread evenly over the parts, not only their total). A rank's part keeps, per
node type, the nodes of that type it owns (ascending typed id), then that type's halo; each
relation :math:`(s, r, d)` keeps every in-edge of an owned :math:`d` node, its source in type
:math:`s`'s local rows.

Before a relation's layer, its source type's rows are refreshed once per forward (a tensor met
again by another relation is not exchanged twice) by the job's all-gather plan restricted to that
type's rows (:meth:`~commgraph.plan.CommPlan.rows_within`); a layer that takes a (source,
destination) pair computes the owned destination rows only and gets zero rows in the halo's place
(the relations of a destination type sum their outputs, which then all hold the type's rows). With
the owned rows :math:`X^t_O` of each type and the restricted exchange :math:`P_t`,

.. math::
    X^t \leftarrow \begin{bmatrix} X^t_O \\ P_t(X^{t,(1)}_O, \ldots, X^{t,(R)}_O) \end{bmatrix}.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from commgraph.errors import BridgeError
from commgraph.graph.build import from_edges
from commgraph.graph.core import MASK_NAMES
from commgraph.partition.store import owned_positions
from commgraph.pyg.data import EdgeType, PartHandle, TypedLayout, _remember, check_edge_index, cut_graph
from commgraph.pyg.full import FullGraph, _normalising_gcn, _takes_pair
from commgraph.pyg.world import Session


def _check_relation(edge_type: EdgeType, edge_index, counts: dict[str, int]) -> np.ndarray:
    """The relation's ``edge_index`` as an int64 array, its sources within the source type's count
    and its destinations within the destination type's."""
    name = f"edge_index of {edge_type}"
    src, _, dst = edge_type
    array = check_edge_index(edge_index, max(counts[src], counts[dst], 1), name)
    for row, node_type in ((0, src), (1, dst)):
        ids = array[row]
        if ids.size and ids.max() >= counts[node_type]:
            raise BridgeError(
                f"{name} holds {node_type!r} id {int(ids.max())} but {node_type!r} has {counts[node_type]} nodes "
                f"(ids 0..{counts[node_type] - 1}): give data[{node_type!r}].num_nodes or fix the edges"
            )
    return array


def partition_hetero(s: Session, data, method: str, seed: int, folder):
    """This rank's part of a ``HeteroData`` (what :func:`~commgraph.pyg.partition` returns for one).

    Args:
        s: the bridge's session.
        data: the whole graph (every rank the same).
        method: ``metis`` (each node type balanced), ``chunk`` or ``random``.
        seed, folder: as :func:`~commgraph.pyg.partition` takes them.

    Returns:
        torch_geometric.data.HeteroData: per node type, owned rows then halo rows, with each node
        attribute (``x``, ``y``, ...) sliced, masks false on halo rows, ``n_id`` (typed global ids)
        and ``num_owned``; per relation, ``edge_index`` (every in-edge of an owned destination, in
        local ids of its two types) and each edge attribute of those edges.

    Shapes:
        - **data[t].x:** ``[num_owned_t + num_halo_t, F_t]``; **data[t].n_id:** ``[num_owned_t + num_halo_t]``
        - **data[r].edge_index:** ``[2, E_r]`` (destinations ``< num_owned`` of the destination type)

    Raises:
        BridgeError: an ``edge_index`` out of its types' range, or a method other than these.
    """
    from torch_geometric.data import HeteroData

    if method not in ("metis", "chunk", "random"):
        raise BridgeError(f"a HeteroData is partitioned with metis, chunk or random, not {method!r}")
    counts = {t: int(data[t].num_nodes) for t in data.node_types}
    edges = {et: _check_relation(et, data[et].edge_index, counts) for et in data.edge_types}
    homogeneous = data.to_homogeneous(node_attrs=[], edge_attrs=[], add_node_type=True, add_edge_type=False)
    offsets = np.concatenate([[0], np.cumsum([counts[t] for t in data.node_types])]).astype(np.int64)
    num_nodes = int(offsets[-1])
    src, dst = homogeneous.edge_index.numpy()
    shape = repr((list(data.node_types), list(data.edge_types), [counts[t] for t in data.node_types]))
    name = f"hetero-{hashlib.blake2b(shape.encode(), digest_size=6).hexdigest()}"
    graph = from_edges(src, dst, num_nodes, symmetrize=False, self_loops=True, name=name)
    node_type = homogeneous.node_type.numpy() if method == "metis" else None
    pset = cut_graph(s, graph, method, seed, folder, node_type=node_type)
    part = pset.part(s.world.rank)
    layout = _layout(tuple(data.node_types), tuple(data.edge_types), part, offsets)

    local = np.full(num_nodes, -1, dtype=np.int64)  # homogeneous id -> row within its type's rows
    for t in data.node_types:
        owned, halo = layout.owned[t], layout.halo[t]
        local[owned] = np.arange(owned.size)
        local[halo] = owned.size + np.arange(halo.size)
    out = HeteroData()
    for t in data.node_types:
        _node_rows(out[t], data[t], layout, t)
    assignment = np.asarray(pset.assignment())
    for et in data.edge_types:
        s_t, _, d_t = et
        array = edges[et]
        heads = array[1] + layout.bounds(d_t)[0]
        keep = assignment[heads] == s.world.rank
        tails = array[0][keep] + layout.bounds(s_t)[0]
        out[et].edge_index = torch.from_numpy(np.stack([local[tails], local[heads[keep]]]))
        kept = torch.from_numpy(np.flatnonzero(keep))
        for key, value in data[et].items():
            if key != "edge_index" and isinstance(value, torch.Tensor) and value.shape[:1] == (array.shape[1],):
                out[et][key] = value[kept.to(value.device)]
    _remember(out, PartHandle(pset, part, types=layout))
    return out


def _layout(node_types: tuple[str, ...], edge_types: tuple[EdgeType, ...], part, offsets: np.ndarray) -> TypedLayout:
    owned, halo = np.asarray(part.owned, dtype=np.int64), np.asarray(part.halo, dtype=np.int64)
    within = {}
    for i, t in enumerate(node_types):
        low, high = offsets[i], offsets[i + 1]
        within[t] = (owned[(owned >= low) & (owned < high)], halo[(halo >= low) & (halo < high)])
    return TypedLayout(
        node_types,
        edge_types,
        offsets,
        {t: rows[0] for t, rows in within.items()},
        {t: rows[1] for t, rows in within.items()},
    )


def partition_typed_set(s: Session, pset):
    """This rank's part of a typed partition set (:mod:`commgraph.partition.typed`), the
    ``HeteroData`` that :func:`partition_hetero` returns for the same partition, read from this
    part's files and, for halo rows, their owners' files (no rank loads the whole graph).

    Args:
        s: the bridge's session.
        pset: the typed set, one part per rank.

    Returns:
        torch_geometric.data.HeteroData: as :func:`partition_hetero`'s (``x`` of each type with
        features, the target's ``y`` and masks).
    """
    from torch_geometric.data import HeteroData

    typed = pset.manifest["typed"]
    part = pset.part(s.world.rank)
    offsets = np.asarray(typed["offsets"], dtype=np.int64)
    layout = _layout(tuple(typed["node_types"]), tuple(tuple(r) for r in typed["relations"]), part, offsets)
    out = HeteroData()
    row = np.empty(part.num_owned + part.num_halo, dtype=np.int64)  # part-local id -> row within its type
    halo_type = np.searchsorted(offsets, np.asarray(part.halo, dtype=np.int64), side="right") - 1
    first = 0
    for t, node_type in enumerate(layout.node_types):
        owned, halo = layout.owned[node_type], layout.halo[node_type]
        row[first : first + owned.size] = np.arange(owned.size)
        row[part.num_owned + np.flatnonzero(halo_type == t)] = owned.size + np.arange(halo.size)
        first += owned.size
        store = out[node_type]
        width = typed["num_features"][node_type]
        if width:
            x = np.concatenate([np.load(pset.path / f"part-{part.index}/x-{t}.npy"), _typed_rows(pset, t, halo, width)])
            store.x = torch.from_numpy(x)
        if node_type == typed["target"]:
            mine = slice(first - owned.size, first)
            labels = np.concatenate([np.asarray(part.labels[mine]), pset.rows("labels", halo)])
            store.y = torch.from_numpy(labels.astype(np.int64))
            for mask in MASK_NAMES:
                values = getattr(part, mask)
                if values is not None:
                    store[mask] = torch.from_numpy(np.concatenate([values[mine], np.zeros(halo.size, dtype=bool)]))
        store.n_id = torch.from_numpy(np.concatenate([owned, halo]) - offsets[t])
        store.num_owned = int(owned.size)
        store.num_nodes = int(owned.size + halo.size)
    edge_type = np.load(pset.path / f"part-{part.index}/edge_type.npy")
    src = row[np.asarray(part.indices, dtype=np.int64)]
    dst = row[np.repeat(np.arange(part.num_owned), np.diff(part.indptr))]
    for r, et in enumerate(layout.edge_types):
        keep = edge_type == r
        out[et].edge_index = torch.from_numpy(np.stack([src[keep], dst[keep]]))
    _remember(out, PartHandle(pset, part, types=layout))
    return out


def _typed_rows(pset, t: int, ids: np.ndarray, width: int) -> np.ndarray:
    """Type ``t``'s feature rows (``width`` columns) of homogeneous ids ``ids``, from the parts that
    own them."""
    owner = np.asarray(pset.assignment())[ids]
    rows = np.empty((ids.size, width), np.float32)
    for k in np.unique(owner):
        part = pset.part(int(k), check=False)
        values = np.load(pset.path / f"part-{int(k)}/x-{t}.npy", mmap_mode="r")
        start = np.searchsorted(np.asarray(part.owned), pset.manifest["typed"]["offsets"][t])
        pick = owner == k
        rows[pick] = values[owned_positions(part.owned, ids[pick]) - start]
    return rows


def _node_rows(store, source, layout: TypedLayout, node_type: str) -> None:
    """``store`` (the part's node type): the type's owned, then halo rows of every node attribute
    of ``source``, ``n_id`` and ``num_owned``."""
    low = layout.bounds(node_type)[0]
    owned = layout.owned[node_type].size
    n_id = torch.from_numpy(np.concatenate([layout.owned[node_type], layout.halo[node_type]]) - low)
    count = int(source.num_nodes)
    for key, value in source.items():
        if key == "num_nodes" or not isinstance(value, torch.Tensor) or value.shape[:1] != (count,):
            continue
        rows = value[n_id.to(value.device)]
        if key in MASK_NAMES:
            rows[owned:] = False
        store[key] = rows
    store.n_id = n_id
    store.num_owned = owned
    store.num_nodes = int(n_id.shape[0])


def _relations_of(layers: dict[str, torch.nn.Module], layout: TypedLayout) -> dict[int, EdgeType]:
    """Each layer's relation, read from its name's last part as ``to_hetero`` (``src__rel__dst``)
    and ``HeteroConv`` (``<src___rel___dst>``) name them.

    Raises:
        BridgeError: a layer whose name names no relation of the part.
    """
    from torch_geometric.nn.to_hetero_transformer import key2str

    names = {}
    for et in layout.edge_types:
        names[key2str(et)] = et
        names["<" + "___".join(et) + ">"] = et
    relations = {}
    for name, layer in layers.items():
        et = names.get(name.rsplit(".", 1)[-1])
        if et is None:
            raise BridgeError(
                f"MessagePassing layer {name!r} is for no relation of this HeteroData part: build the model "
                "with torch_geometric.nn.to_hetero(model, part.metadata()) or HeteroConv({relation: conv})"
            )
        if _normalising_gcn(layer):
            raise BridgeError(
                f"{name!r} is a GCNConv that normalises by degree, which a heterogeneous part does not carry: "
                "give it normalize=False or use GraphConv / SAGEConv"
            )
        relations[id(layer)] = et
    return relations


class HeteroFullGraph(FullGraph):
    """``module`` run on this rank's ``HeteroData`` part, each relation's source rows refreshed
    before its layer (see the module description). Made by :func:`~commgraph.pyg.full_graph`.

    Its :attr:`bytes` count the halo rows by node type: ``halo_forward:<type>`` and
    ``halo_backward:<type>``.
    """

    def __init__(self, module: torch.nn.Module, handle: PartHandle, data, **options):
        super().__init__(module, handle, data, **options)
        self._types = handle.types
        self._relation = _relations_of(self._layers, self._types)
        self._wirings: dict[int, object] = {}
        self._typed_runners: dict[tuple[str, int], object] = {}
        self._fresh: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id(rows) -> (rows, refreshed rows)
        self._padded: list[int | None] = []  # per layer call in flight: zero rows its output gets (None: none)

    def forward(self, *args, **kwargs):
        try:
            return super().forward(*args, **kwargs)
        finally:  # a layer that raised leaves no call in flight
            self._fresh.clear()
            self._padded.clear()

    def _typed_runner(self, node_type: str, row_bytes: int):
        """The runner of the plan for ``row_bytes``-byte rows, restricted to ``node_type``'s rows."""
        key = (node_type, row_bytes)
        if key not in self._typed_runners:
            if row_bytes not in self._wirings:
                self._wirings[row_bytes] = self.job.wire(row_bytes)
                self.choices[row_bytes] = self._wirings[row_bytes].choice
            plan = self._wirings[row_bytes].plan.rows_within(*self._types.bounds(node_type))
            exchange = self.job.exchange(plan, self._types.owned[node_type], self._types.halo[node_type])
            self._typed_runners[key] = self.job.layerwise(exchange)
        return self._typed_runners[key]

    def refresh_type(self, x: torch.Tensor, node_type: str) -> torch.Tensor:
        """``x`` (``node_type``'s owned rows, then its halo rows) with its halo rows replaced by
        their owners' rows, differentiable; once per tensor within a forward."""
        from commgraph.runtime.halo import halo_table

        owned, expected = self._types.owned[node_type].size, self._types.rows(node_type)
        if x.dim() != 2 or x.shape[0] != expected:
            raise BridgeError(
                f"a layer got {node_type!r} rows of shape {list(x.shape)}, but this rank's part has {expected} "
                f"{node_type!r} rows ({owned} owned, then {expected - owned} halo): give each layer the part's rows"
            )
        hit = self._fresh.get(id(x))
        if hit is not None and hit[0] is x:
            return hit[1]
        data = self._data()
        if self._world.size == 1 or (data is not None and x is getattr(data[node_type], "x", None)):
            fresh = x  # the part's own x has its halo rows from the whole graph already
        else:
            runner = self._typed_runner(node_type, x.shape[1] * x.element_size())
            labels = (f"halo_forward:{node_type}", f"halo_backward:{node_type}")
            fresh = halo_table(x, runner, owned, len(self._fresh), labels)
        self._fresh[id(x)] = (x, fresh)
        return fresh

    def _before_layer(self, layer: torch.nn.Module, args: tuple, kwargs: dict):
        src, _, dst = self._relation[id(layer)]
        args, kwargs = list(args), dict(kwargs)
        x = args[0] if args else kwargs.get("x")
        x_src, x_dst = x if isinstance(x, tuple) else (x, x)
        if isinstance(x_src, torch.Tensor):
            x_src = self.refresh_type(x_src, src)
        pair = isinstance(x_src, torch.Tensor) and isinstance(x_dst, torch.Tensor) and _takes_pair(layer)
        if pair:  # only the owned destination rows are computed
            x = (x_src, x_dst[: self._types.owned[dst].size])
        elif isinstance(x, tuple):
            x = (x_src, x_dst)
        else:
            x = x_src
        if args:
            args[0] = x
        else:
            kwargs["x"] = x
        self._padded.append(self._types.halo[dst].size if pair else None)
        return tuple(args), kwargs

    def _part_rows(self, output):
        """The model's output as it is: its layers' outputs hold each type's part rows already."""
        return output

    def _after_layer(self, layer: torch.nn.Module, args, output):
        super()._after_layer(layer, args, output)
        halo = self._padded.pop()
        if halo is not None and isinstance(output, torch.Tensor):
            output = torch.cat([output, output.new_zeros((halo, *output.shape[1:]))])
        return output
