"""Per-node result files: one value per node of a graph (a predicted class, a distance, a rank, a
component), written atomically as ``.npy`` (one value per node, in load order) or ``.csv``
(a ``node,<column>`` header, then one row per node under the graph's original ids when its loader
kept them, ``Graph.node_ids``)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from commgraph.atomic import atomic_write
from commgraph.errors import CommgraphError

NODE_FILE_SUFFIXES = (".npy", ".csv")
CSV_CHUNK = 1 << 20  # rows formatted at a time: bounded memory on graphs of any size


def check_node_file(path: str | os.PathLike[str], error: type[CommgraphError], what: str = "--out") -> None:
    """Refuse a name :func:`write_node_values` cannot write, before any work is spent on the values.

    Args:
        path: the file to be written.
        error: the error raised, the caller's own (a training or an analytics error).
        what: how the message names the file (the option that gave it).
    """
    if Path(path).suffix not in NODE_FILE_SUFFIXES:
        raise error(f"{what} must end in .npy or .csv, got {str(path)!r}")


def write_node_values(path: str | os.PathLike[str], values: np.ndarray, node_ids: np.ndarray | None = None, *,
                      column: str = "value") -> None:
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
