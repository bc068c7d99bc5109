"""commgraph's own graph file: one compressed ``.npz`` holding the Graph's arrays by name.

Loaded with ``allow_pickle=False``: a graph file can never run code. The round trip is exact (dtypes,
values, name and original node ids).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from commgraph.atomic import atomic_write
from commgraph.errors import GraphFormatError, GraphValidationError
from commgraph.graph.core import MASK_NAMES, Graph

FORMAT_VERSION = 1
_OPTIONAL = ("features", "labels", *MASK_NAMES, "node_ids", "edge_weights")


def save_npz(graph: Graph, path: str | Path) -> None:
    """Write ``graph`` to ``path`` atomically (a crash leaves no partial file)."""
    arrays = {"commgraph_format": np.array(FORMAT_VERSION), "name": np.array(graph.name),
              "indptr": graph.indptr, "indices": graph.indices}
    arrays.update({k: getattr(graph, k) for k in _OPTIONAL if getattr(graph, k) is not None})
    with atomic_write(path) as handle:
        np.savez_compressed(handle, **arrays)


def load_npz(path: str | Path, *, name: str | None = None) -> Graph:
    path = Path(path)
    if not path.is_file():
        raise GraphFormatError(path, "no such file")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        raise GraphFormatError(path, f"not a readable .npz file ({exc})") from None
    version = arrays.pop("commgraph_format", None)
    if version is None:
        raise GraphFormatError(path, "is an .npz file but not a commgraph graph (no format marker)")
    if int(version) != FORMAT_VERSION:
        raise GraphFormatError(
            path, f"has graph format {int(version)}; this commgraph reads format {FORMAT_VERSION}"
        )
    missing = {"indptr", "indices"} - arrays.keys()
    if missing:
        raise GraphFormatError(path, f"lacks arrays {sorted(missing)}")
    stored_name = str(arrays.pop("name", path.stem))
    try:
        return Graph(**{k: v for k, v in arrays.items() if k in ("indptr", "indices", *_OPTIONAL)},
                     name=name or stored_name)
    except GraphValidationError as exc:
        raise GraphFormatError(path, str(exc)) from None
