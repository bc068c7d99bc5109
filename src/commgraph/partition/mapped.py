"""A graph held as read-only file maps while it is partitioned, so that METIS's memory is not
added to the graph's.

METIS needs only the graph's undirected int32 adjacency; the graph itself (an int64 in-edge CSR and
a feature table: 2 GB for a products-sized graph) is read again only after it, to measure the parts
and write the set. :func:`map_graph` writes every array of the graph that lives in the heap to a
``.npy`` file and replaces it by a read-only map of that file (the heap copy is freed; the graph
reads the same values), and :func:`release_pages` hands the pages of those maps that reading has
brought in back to the kernel before METIS runs; they are read from the files again when touched.
:func:`advise_random` tells the kernel that a map is read at random (a sampler's mapped CSR under a
memory budget).
"""

from __future__ import annotations

import mmap
from dataclasses import fields
from pathlib import Path

import numpy as np

from commgraph.graph import Graph


def map_graph(graph: Graph, folder: Path) -> None:
    """Move every array of ``graph`` that is not a file map yet into ``folder`` (``<field>.npy``) and
    put a read-only map of the file in its place, in place: the caller's graph holds the same
    values, read from the file. The maps stay valid after ``folder`` is removed (the kernel keeps an
    unlinked file while it is mapped); writing into a mapped array raises ``ValueError``."""
    for name, array in _arrays(graph).items():
        if _file_map(array) is not None:
            continue
        path = folder / f"{name}.npy"
        np.save(path, array, allow_pickle=False)
        setattr(graph, name, np.load(path, mmap_mode="r", allow_pickle=False))


def release_pages(graph: Graph) -> int:
    """Hand back the resident pages of the graph's read-only file maps (a copy-on-write map, whose
    pages may hold the caller's writes, is left alone); returns the bytes of the maps released. The
    values stay readable: a page is read from its file again when next touched."""
    released = 0
    for array in _arrays(graph).values():
        found = _file_map(array)
        if found is not None and found[1] == "r":
            found[0].madvise(mmap.MADV_DONTNEED)
            released += len(found[0])
    return released


def advise_random(*arrays: np.ndarray) -> int:
    """Tell the kernel that the read-only file maps under ``arrays`` are read at random
    (``MADV_RANDOM``): a page fault then reads its own page, not the readahead window around it. A
    sampler touches a neighbour list of a hundred bytes here and there; where the map does not stay
    resident (under a memory budget), readahead would read tens of pages for each. Arrays that are
    not read-only file maps are left alone; returns the bytes advised."""
    advised = 0
    for array in arrays:
        found = _file_map(array)
        if found is not None and found[1] == "r":
            found[0].madvise(mmap.MADV_RANDOM)
            advised += len(found[0])
    return advised


def _arrays(graph: Graph) -> dict[str, np.ndarray]:
    return {f.name: getattr(graph, f.name) for f in fields(graph) if isinstance(getattr(graph, f.name), np.ndarray)}


def _file_map(array: np.ndarray) -> tuple[mmap.mmap, str] | None:
    """The file map under ``array`` and the mode of the ``np.memmap`` that made it, if any."""
    mode, base = None, array
    while base is not None:
        if isinstance(base, np.memmap) and mode is None:
            mode = base.mode
        if isinstance(base, mmap.mmap):
            return (base, mode) if mode is not None else None
        base = getattr(base, "base", None)
    return None
