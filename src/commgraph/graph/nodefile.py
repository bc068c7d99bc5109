"""Per-node files: one value (or one row) per node of a graph, the one writer of each kind.

- :func:`write_node_values`: a result per node (a predicted class, a distance, a rank, a
  component), written atomically as ``.npy`` (one value per node, in load order) or ``.csv`` (a
  ``node,<column>`` header, then one row per node under the graph's original ids when its loader
  kept them, ``Graph.node_ids``).
- :func:`save_npy_in_chunks`: a large per-node table (a part's features) written as ``.npy``
  :data:`CHUNK_BYTES` at a time, so the writer never holds the whole table; :class:`NpyWriter`
  the same, fed a chunk at a time.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from commgraph.atomic import atomic_write
from commgraph.errors import CommgraphError

NODE_FILE_SUFFIXES = (".npy", ".csv")
CSV_CHUNK = 1 << 20  # rows formatted at a time: bounded memory on graphs of any size
CHUNK_BYTES = 1 << 26  # a per-node table is written this much at a time


def check_node_file(path: str | os.PathLike[str], error: type[CommgraphError], what: str = "--out") -> None:
    """Refuse a name :func:`write_node_values` cannot write, before any work is spent on the values.

    Args:
        path: the file to be written.
        error: the error raised, the caller's own (a training or an analytics error).
        what: how the message names the file (the option that gave it).
    """
    if Path(path).suffix not in NODE_FILE_SUFFIXES:
        raise error(f"{what} must end in .npy or .csv, got {str(path)!r}")


def write_node_values(
    path: str | os.PathLike[str], values: np.ndarray, node_ids: np.ndarray | None = None, *, column: str = "value"
) -> None:
    """Write one value per node to ``path``, atomically, in the format its suffix names.

    Args:
        path: a ``.npy`` or ``.csv`` file; any other suffix is refused (:func:`check_node_file`).
        values: the value of every node, in load order.
        node_ids: the original id of every node (``Graph.node_ids``); the CSV's ``node`` column is
            ``0..N-1`` without them. The ``.npy`` file holds ``values`` alone.
        column: the CSV's second header name (``class``, ``value``).

    Shapes:
        values, node_ids: ``[N]``
    """
    path = Path(path)
    check_node_file(path, CommgraphError, "a per-node file")
    with atomic_write(path) as handle:
        if path.suffix == ".npy":
            np.save(handle, values, allow_pickle=False)
            return
        ids = node_ids if node_ids is not None else np.arange(values.shape[0])
        handle.write(f"node,{column}\n".encode())
        for start in range(0, values.shape[0], CSV_CHUNK):  # str.format is 5x np.savetxt's speed
            rows = slice(start, start + CSV_CHUNK)
            handle.write("".join(map("{},{}\n".format, ids[rows].tolist(), values[rows].tolist())).encode())


def save_npy_in_chunks(
    path: str | os.PathLike[str], dtype, shape: tuple[int, ...], rows: Callable[[int, int], np.ndarray]
) -> str:
    """Write a ``.npy`` file (byte for byte what ``np.save`` writes) of ``shape`` whose rows
    ``start..stop-1`` are ``rows(start, stop)``, asked for :data:`CHUNK_BYTES` at a time, in order:
    a table larger than memory can be written from a memory map or made as it goes. Not atomic: the
    caller writes into a temporary place of its own.

    Args:
        path: the ``.npy`` file.
        dtype: the array's dtype; each chunk is converted to it.
        shape: the array's shape, rows first.
        rows: the rows of each chunk.

    Returns:
        str: the file's SHA-256 (hex), computed as it is written.

    Shapes:
        - **rows(start, stop):** ``[stop - start, *shape[1:]]``

    Raises:
        ValueError: a chunk of another shape.
    """
    dtype = np.dtype(dtype)
    row_bytes = max(int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize, 1)
    step = max(CHUNK_BYTES // row_bytes, 1)
    with NpyWriter(path, dtype, shape) as out:
        for start in range(0, shape[0], step):
            stop = min(start + step, shape[0])
            chunk = np.asarray(rows(start, stop))
            if chunk.shape != (stop - start, *shape[1:]):
                raise ValueError(
                    f"rows {start}..{stop - 1} of {path} came as shape {chunk.shape}, "
                    f"expected {(stop - start, *shape[1:])}"
                )
            out.write(chunk)
    return out.sha256


class NpyWriter:
    """A ``.npy`` file (byte for byte what ``np.save`` writes) of ``shape`` written as its rows
    come, in order, by :meth:`write`: the push-side of :func:`save_npy_in_chunks`, for a writer
    that fills several files from one pass. :meth:`close` (or leaving its ``with`` block) checks
    that every row came and gives the file's SHA-256. Not atomic: the caller writes into a
    temporary place of its own.

    Raises:
        ValueError: a chunk of another row shape, or fewer or more rows than ``shape[0]``.
    """

    def __init__(self, path: str | os.PathLike[str], dtype, shape: tuple[int, ...]):
        self.path, self.dtype, self.shape = path, np.dtype(dtype), tuple(shape)
        self.rows, self.sha256 = 0, ""
        self.handle = open(path, "wb")
        self.out = _Hashing(self.handle)
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": self.shape}
        np.lib.format.write_array_header_1_0(self.out, header)

    def write(self, chunk: np.ndarray) -> None:
        chunk = np.ascontiguousarray(chunk, dtype=self.dtype)
        if chunk.shape[1:] != self.shape[1:] or self.rows + chunk.shape[0] > self.shape[0]:
            raise ValueError(
                f"rows {self.rows}.. of {self.path} came as shape {chunk.shape}, "
                f"expected at most {(self.shape[0] - self.rows, *self.shape[1:])}"
            )
        self.out.write(memoryview(chunk).cast("B"))
        self.rows += chunk.shape[0]

    def close(self) -> str:
        """Close the file, checking that every row came; returns its SHA-256."""
        self.handle.close()
        if self.rows != self.shape[0]:
            raise ValueError(f"{self.path} got {self.rows} rows, expected {self.shape[0]}")
        self.sha256 = self.out.digest.hexdigest()
        return self.sha256

    def __enter__(self) -> NpyWriter:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.close()
        else:
            self.handle.close()


class _Hashing:
    """A binary file being written, and the sha256 of what was written to it."""

    def __init__(self, handle):
        self.handle, self.digest = handle, hashlib.sha256()

    def write(self, data) -> int:
        self.digest.update(data)
        return self.handle.write(data)
