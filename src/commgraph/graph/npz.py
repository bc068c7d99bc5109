"""commgraph's own graph file: one ``.npz`` holding the Graph's arrays by name.

Loaded with ``allow_pickle=False``: a graph file can never run code. The round trip is exact (dtypes,
values, name and original node ids).

``commgraph convert`` writes compressed members (small files to copy around). The dataset cache
writes them stored (``compress=False``), and :func:`load_npz` then memory-maps each array where it
lies inside the zip (a stored member's bytes are a plain ``.npy`` file at a fixed offset): loading
costs no read, and a partitioner or worker pages in only the rows it touches. The maps are
copy-on-write, so code that modifies a loaded array never changes the file. Compressed members are
read into memory as before.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import numpy as np

from commgraph.atomic import atomic_write
from commgraph.errors import GraphFormatError, GraphValidationError
from commgraph.graph.core import MASK_NAMES, Graph

FORMAT_VERSION = 1
_OPTIONAL = ("features", "labels", *MASK_NAMES, "node_ids", "edge_weights")


def save_npz(graph: Graph, path: str | Path, *, compress: bool = True) -> None:
    """Write ``graph`` to ``path`` in commgraph's own format: every array by name, with a format
    marker; the round trip through :func:`load_npz` is exact.

    Args:
        graph: the graph to save.
        path: the ``.npz`` file; written atomically (a crash leaves no partial file).
        compress: deflate the members (small files to copy around); ``False`` stores them as they
            are, so that :func:`load_npz` memory-maps them instead of reading them.
    """
    arrays = {
        "commgraph_format": np.array(FORMAT_VERSION),
        "name": np.array(graph.name),
        "indptr": graph.indptr,
        "indices": graph.indices,
    }
    arrays.update({k: getattr(graph, k) for k in _OPTIONAL if getattr(graph, k) is not None})
    with atomic_write(path) as handle:
        (np.savez_compressed if compress else np.savez)(handle, **arrays)


def load_npz(path: str | Path, *, name: str | None = None) -> Graph:
    """Read a graph written by :func:`save_npz` (never unpickling: a graph file cannot run code).

    Args:
        path: the ``.npz`` file.
        name: rename the graph (default: the stored name).

    Returns:
        Graph: stored members memory-mapped copy-on-write, compressed ones read into memory.

    Raises:
        GraphFormatError: not a readable ``.npz``, not a commgraph graph, another format version,
            or arrays that do not make a valid graph.
    """
    path = Path(path)
    if not path.is_file():
        raise GraphFormatError(path, "no such file")
    try:
        mapped = _mapped_members(path)
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: mapped[k] if k in mapped else data[k] for k in data.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, struct.error) as exc:
        raise GraphFormatError(path, f"not a readable .npz file ({exc})") from None
    version = arrays.pop("commgraph_format", None)
    if version is None:
        raise GraphFormatError(path, "is an .npz file but not a commgraph graph (no format marker)")
    if int(version) != FORMAT_VERSION:
        raise GraphFormatError(path, f"has graph format {int(version)}; this commgraph reads format {FORMAT_VERSION}")
    missing = {"indptr", "indices"} - arrays.keys()
    if missing:
        raise GraphFormatError(path, f"lacks arrays {sorted(missing)}")
    stored_name = str(arrays.pop("name", path.stem))
    try:
        return Graph(
            **{k: v for k, v in arrays.items() if k in ("indptr", "indices", *_OPTIONAL)}, name=name or stored_name
        )
    except GraphValidationError as exc:
        raise GraphFormatError(path, str(exc)) from None


def _mapped_members(path: Path) -> dict[str, np.ndarray]:
    """Copy-on-write memory maps of the stored (uncompressed) non-empty arrays of an .npz."""
    mapped = {}
    with zipfile.ZipFile(path) as archive, open(path, "rb") as raw:
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                continue
            raw.seek(info.header_offset)
            local = raw.read(30)
            if local[:4] != b"PK\x03\x04":
                raise zipfile.BadZipFile(f"bad local header for {info.filename}")
            name_length, extra_length = struct.unpack("<HH", local[26:30])
            raw.seek(info.header_offset + 30 + name_length + extra_length)
            version = np.lib.format.read_magic(raw)
            if version not in ((1, 0), (2, 0)):
                continue
            read_header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(raw)
            if dtype.hasobject or not shape or 0 in shape:
                continue
            mapped[info.filename[:-4]] = np.memmap(
                path, dtype=dtype, mode="c", offset=raw.tell(), shape=shape, order="F" if fortran else "C"
            )
    return mapped
