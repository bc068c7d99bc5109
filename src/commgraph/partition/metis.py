"""METIS k-way (Karypis and Kumar), called straight in the ``libmetis.so`` that the cmeel-metis
wheel ships (32-bit indices), through ctypes: the baseline (minimum edge cut, node counts
balanced within METIS's default 3%) and G3's stage 1 (two balance constraints, nodes and degrees,
and the communication-volume objective). 32-bit indices hold METIS's copy of the graph and its
coarsened levels in half the memory of a 64-bit build (pymetis's)."""

from __future__ import annotations

import ctypes
from functools import lru_cache
from importlib import metadata

import numpy as np
from numba import njit

from commgraph.errors import PartitionError
from commgraph.graph import Graph

_NOPTIONS = 40
_OPTION_OBJTYPE, _OPTION_NCUTS, _OPTION_SEED, _OPTION_NUMBERING = 1, 8, 9, 19
_OBJTYPE_CUT, _OBJTYPE_VOL = 0, 1
_STATUS = {-2: "erroneous input or options", -3: "out of memory", -4: "internal error"}
_IDX = np.int32  # libmetis's idx_t in the cmeel-metis build


def metis_edge_cut(adjacency: tuple[np.ndarray, np.ndarray], parts: int, seed: int) -> np.ndarray:
    """Plain METIS k-way, as ``gpmetis`` runs it: minimum edge cut, node counts balanced within
    METIS's default imbalance (1.03)."""
    return _part_kway(adjacency, parts, seed, None, None, volume=False, tries=1)


def metis_multi_constraint(
    adjacency: tuple[np.ndarray, np.ndarray],
    weights: np.ndarray,
    parts: int,
    seed: int,
    imbalance: float,
    volume: bool = True,
    tries: int = 1,
) -> np.ndarray:
    """METIS k-way with one balance constraint per column of ``weights`` (each within
    ``imbalance``, e.g. 1.05), minimising communication volume (or edge cut); METIS keeps the best
    of ``tries`` runs."""
    return _part_kway(adjacency, parts, seed, weights, imbalance, volume=volume, tries=tries)


def _part_kway(
    adjacency: tuple[np.ndarray, np.ndarray],
    parts: int,
    seed: int,
    weights: np.ndarray | None,
    imbalance: float | None,
    *,
    volume: bool,
    tries: int,
) -> np.ndarray:
    """``METIS_PartGraphKway`` on (xadj, adjncy); ``weights`` ``[N, ncon]`` (None: unit node
    weights), each constraint within ``imbalance`` (None: METIS's default)."""
    lib = _libmetis()
    xadj, adjncy = adjacency
    n = xadj.shape[0] - 1
    if adjncy.shape[0] > np.iinfo(_IDX).max:
        raise PartitionError(
            f"the graph has {adjncy.shape[0]:,} adjacency entries, more than the 32-bit METIS build "
            f"numbers; use --method chunk or random"
        )
    ncon = 1 if weights is None else weights.shape[1]
    c_xadj = np.ascontiguousarray(xadj, dtype=_IDX)
    c_adjncy = np.ascontiguousarray(adjncy, dtype=_IDX)
    c_vwgt = None if weights is None else np.ascontiguousarray(weights, dtype=_IDX)
    options = np.zeros(_NOPTIONS, dtype=_IDX)
    lib.METIS_SetDefaultOptions(options.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)))
    options[_OPTION_OBJTYPE] = _OBJTYPE_VOL if volume else _OBJTYPE_CUT
    options[_OPTION_SEED] = seed
    options[_OPTION_NUMBERING] = 0
    options[_OPTION_NCUTS] = tries
    ubvec = None if imbalance is None else np.full(ncon, imbalance, dtype=np.float32)
    part = np.zeros(n, dtype=_IDX)
    objective = ctypes.c_int32(0)
    nvtxs, ncon_c, nparts = ctypes.c_int32(n), ctypes.c_int32(ncon), ctypes.c_int32(parts)
    status = lib.METIS_PartGraphKway(
        ctypes.byref(nvtxs),
        ctypes.byref(ncon_c),
        _ptr(c_xadj),
        _ptr(c_adjncy),
        None if c_vwgt is None else _ptr(c_vwgt),
        None,
        None,
        ctypes.byref(nparts),
        None,
        None if ubvec is None else ubvec.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
        _ptr(options),
        ctypes.byref(objective),
        _ptr(part),
    )
    if status != 1:
        raise PartitionError(f"METIS_PartGraphKway failed: {_STATUS.get(status, status)}")
    return part.astype(np.int64)


def _ptr(array: np.ndarray):
    return array.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))


@lru_cache(maxsize=1)
def _libmetis() -> ctypes.CDLL:
    try:
        files = {f.name: f for f in metadata.files("cmeel-metis") or []}
        gklib = {f.name: f for f in metadata.files("cmeel-gklib") or []}
    except metadata.PackageNotFoundError:
        raise PartitionError("METIS library missing: pip install cmeel-metis") from None
    if "libmetis.so" not in files:
        raise PartitionError("cmeel-metis is installed but ships no libmetis.so for this platform")
    if "libGKlib.so" in gklib:  # libmetis links against it by name
        ctypes.CDLL(str(gklib["libGKlib.so"].locate()), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(str(files["libmetis.so"].locate()))
    lib.METIS_PartGraphKway.restype = ctypes.c_int
    return lib


def undirected_adjacency(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(xadj, adjncy) of the graph made undirected and loop-free, as METIS requires: each node's
    in- and out-neighbours, sorted, without duplicates (``xadj`` int64, ``adjncy`` int32 while the
    ids fit). Compiled over the CSR: the edges of both directions are gathered once, then sorted
    and compacted row by row in place."""
    work = np.int32 if graph.num_nodes < 2**31 else np.int64
    return _undirected(graph.indptr, graph.indices, np.empty(0, dtype=work))


@njit(cache=True)
def _undirected(indptr, indices, typed):  # pragma: no cover - compiled
    n = indptr.shape[0] - 1
    starts = np.zeros(n + 1, np.int64)
    for v in range(n):
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if u != v:
                starts[v + 1] += 1
                starts[u + 1] += 1
    for v in range(n):
        starts[v + 1] += starts[v]
    both = np.empty(starts[n], typed.dtype)
    fill = starts[:n].copy()
    for v in range(n):
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if u != v:
                both[fill[v]] = u
                fill[v] += 1
                both[fill[u]] = v
                fill[u] += 1
    xadj = np.zeros(n + 1, np.int64)
    at = 0
    for v in range(n):
        row = np.sort(both[starts[v] : starts[v + 1]])
        for j in range(row.shape[0]):
            if j == 0 or row[j] != row[j - 1]:
                both[at] = row[j]
                at += 1
        xadj[v + 1] = at
    return xadj, both[:at].copy()
