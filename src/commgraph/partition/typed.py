"""Typed partition sets: a :class:`~commgraph.graph.HeteroGraph`'s set on disk.

The graph is partitioned on its homogeneous view (:meth:`~commgraph.graph.HeteroGraph.homogeneous`:
type :math:`t`'s node :math:`i` is node :math:`o_t + i`), METIS balancing each node type across the
parts, and the view's set is written as any set is (labels and masks live on the target type's rows;
no features). What makes the set typed is added beside it::

    DIR/manifest.json      "typed": node types, offsets o_0..o_T (a node's type is a range lookup
                           on them), relations (src, name, dst), target type, each type's feature
                           width, and per part each type's owned and halo nodes and each
                           relation's edges
    DIR/part-<k>/edge_type.npy
                           each stored edge's relation (int16, aligned with indices.npy)
    DIR/part-<k>/x-<t>.npy type t's feature rows of the part's owned nodes of type t (ascending
                           typed id; types without features have none)

The typed set is built in a temporary directory beside DIR and renamed into place when complete.
:func:`typed_bytes` measures a set's bytes by node type and by relation (``partition info`` and
``plan allgather`` report them).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from commgraph.errors import PartitionError
from commgraph.graph import HeteroGraph
from commgraph.partition.make import MadeSet, make_partition_set
from commgraph.partition.store import MANIFEST, PartitionSet, _replace, _save_rows, _sha256, owned_edges
from commgraph.partition.validate import read_header


def make_typed_partition_set(
    graph: HeteroGraph,
    parts: int,
    out: str | Path,
    *,
    method: str = "metis",
    seed: int = 0,
    force: bool = False,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> MadeSet:
    """Partition a heterogeneous graph, each node type balanced across ``parts``, and write its typed
    set to ``out`` (layout: the module's description).

    Args:
        graph: the heterogeneous graph.
        parts, seed: as :func:`~commgraph.partition.partition_graph` takes them.
        out: the set's directory.
        method: ``metis`` (the one method that balances each node type).
        force: replace an existing ``out``.
        progress: a progress bar over the parts.
        log: hears the partitioner's progress, a line each.

    Returns:
        MadeSet: the set, the partitioner's seconds and the metrics recorded (with each part's
        ``type_nodes`` and ``type_remote``).

    Raises:
        PartitionError: a method other than ``metis``, a part count no partition can have, or ``out``
            exists without ``force``.
    """
    out = Path(out)
    if out.exists() and not force:
        raise PartitionError(f"{out} already exists; pass --force to replace it")
    view = graph.homogeneous()
    tmp = out.parent / f".{out.name}.typed-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        made = make_partition_set(
            view.graph, parts, tmp, method=method, seed=seed, progress=progress, log=log, node_type=view.node_type
        )
        manifest = made.pset.manifest
        typed = {
            "node_types": view.node_types,
            "offsets": view.offsets.tolist(),
            "relations": [list(et) for et in view.edge_types],
            "target": graph.target,
            "num_features": {t: graph.num_features(t) for t in view.node_types},
            "owned": [],
            "halo": [],
            "relation_edges": [],
        }
        for k in range(parts):
            _write_typed_part(graph, view, made.pset, k, typed, manifest["files"])
        manifest["typed"] = typed
        manifest["arrays"] = {name: read_header(tmp / name).record() for name in manifest["files"]}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        _replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return MadeSet(PartitionSet(out, manifest), made.seconds, made.metrics)


def _write_typed_part(graph: HeteroGraph, view, pset: PartitionSet, k: int, typed: dict, files: dict) -> None:
    """Part ``k``'s typed files, their checksums into ``files`` and its counts into ``typed``."""
    part = pset.part(k, check=False)
    folder = pset.path / f"part-{k}"
    owned = np.asarray(part.owned, dtype=np.int64)
    edge_type = np.ascontiguousarray(view.edge_type[owned_edges(view.graph.indptr, owned)], dtype=np.int16)
    np.save(folder / "edge_type.npy", edge_type, allow_pickle=False)
    files[f"part-{k}/edge_type.npy"] = _sha256(folder / "edge_type.npy")
    bounds = np.searchsorted(owned, view.offsets)  # owned ids ascending: each type a slice
    for t, node_type in enumerate(view.node_types):
        if node_type in graph.features:
            typed_ids = owned[bounds[t] : bounds[t + 1]] - view.offsets[t]
            files[f"part-{k}/x-{t}.npy"] = _save_rows(folder / f"x-{t}.npy", graph.features[node_type], typed_ids)
    types = len(view.node_types)
    halo_types, _ = view.typed(np.asarray(part.halo, dtype=np.int64))
    typed["owned"].append(np.diff(bounds).tolist())
    typed["halo"].append(np.bincount(halo_types, minlength=types).tolist())
    typed["relation_edges"].append(np.bincount(edge_type, minlength=len(view.edge_types)).tolist())


@dataclass
class TypedBytes:
    """A typed set's bytes by node type and by relation, per part (``partition info``, ``plan
    allgather``). Rows are ``row_bytes[t]`` bytes for node type ``t``.

    Shapes:
        - **owned, halo:** ``[parts][types]``: the part's owned rows of each type (its ``x-<t>.npy``
          at the types' feature widths) and the halo rows of each type it receives
        - **edges:** ``[parts][relations]``: the part's stored in-edges of each relation (their
          ``indices.npy`` entry and ``edge_type.npy`` entry)
        - **relation_halo:** ``[parts][relations]``: the distinct halo rows each relation's edges
          read (a row two relations read counts in each, once in ``halo``)
    """

    node_types: list[str]
    relations: list[str]  # "src__rel__dst"
    row_bytes: list[int]
    owned: list[list[int]]
    halo: list[list[int]]
    edges: list[list[int]]
    relation_halo: list[list[int]]

    def to_dict(self) -> dict:
        """Totals over the parts by type and relation, and the per-part lists, JSON-ready."""
        return {
            "row_bytes": dict(zip(self.node_types, self.row_bytes, strict=True)),
            "node_types": {
                t: {"owned": o, "halo": h}
                for t, o, h in zip(self.node_types, _total(self.owned), _total(self.halo), strict=True)
            },
            "relations": {
                r: {"edges": e, "halo": h}
                for r, e, h in zip(self.relations, _total(self.edges), _total(self.relation_halo), strict=True)
            },
            "parts": [
                {"owned": o, "halo": h, "edges": e, "relation_halo": rh}
                for o, h, e, rh in zip(self.owned, self.halo, self.edges, self.relation_halo, strict=True)
            ],
        }


def _total(rows: list[list[int]]) -> list[int]:
    """Per-part lists summed over the parts."""
    return np.asarray(rows, dtype=np.int64).sum(axis=0).tolist()


def typed_bytes(pset: PartitionSet, row_width: int | None = None) -> TypedBytes:
    """The bytes of ``pset`` (a typed set) by node type and relation (:class:`TypedBytes`), a row
    of type ``t`` ``4 * row_width`` bytes (every type alike: a hidden-wide exchange) or, with
    ``row_width`` None, ``4 *`` the type's feature width (0 for a type without). Reads each part's
    ``indices.npy`` and ``edge_type.npy`` for the rows each relation reads.

    Raises:
        PartitionError: ``pset`` is not a typed set.
    """
    typed = pset.manifest.get("typed")
    if typed is None:
        raise PartitionError(f"{pset.path} is not a typed partition set: partition make it from a heterogeneous graph")
    types, relations = typed["node_types"], typed["relations"]
    widths = [row_width if row_width is not None else int(typed["num_features"][t]) for t in types]
    row_bytes = np.array([4 * w for w in widths], dtype=np.int64)
    src_type = np.array([types.index(src) for src, _, _ in relations], dtype=np.int64)
    owned, halo, edges, relation_halo = [], [], [], []
    for k in range(pset.num_parts):
        part = pset.part(k, check=False)
        edge_type = np.load(pset.path / f"part-{k}" / "edge_type.npy", mmap_mode="r")
        edge_bytes = np.asarray(part.indices).dtype.itemsize + edge_type.dtype.itemsize
        owned.append((row_bytes * typed["owned"][k]).tolist())
        halo.append((row_bytes * typed["halo"][k]).tolist())
        edges.append([edge_bytes * n for n in typed["relation_edges"][k]])
        relation_halo.append((row_bytes[src_type] * _relation_halo_rows(part, edge_type, len(relations))).tolist())
    return TypedBytes(types, ["__".join(r) for r in relations], row_bytes.tolist(), owned, halo, edges, relation_halo)


def _relation_halo_rows(part, edge_type: np.ndarray, relations: int) -> np.ndarray:
    """The distinct halo rows each relation's edges of ``part`` read."""
    indices = np.asarray(part.indices, dtype=np.int64)
    remote = indices >= part.num_owned
    keys = np.unique(
        np.asarray(edge_type, dtype=np.int64)[remote] * max(part.num_halo, 1) + indices[remote] - part.num_owned
    )
    return np.bincount(keys // max(part.num_halo, 1), minlength=relations)
