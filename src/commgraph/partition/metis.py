"""METIS, two ways. The baseline (minimum edge cut, one balance constraint) goes through pymetis.
G3's stage 1 needs two balance constraints (nodes and degrees) and the communication-volume
objective; pymetis fixes ``ncon = 1`` and silently drops extra weights, so that call goes straight
to METIS's own ``METIS_PartGraphKway`` in the ``libmetis.so`` that the cmeel-metis wheel ships,
through ctypes."""

from __future__ import annotations

import ctypes
from functools import lru_cache
from importlib import metadata

import numpy as np

from commgraph.errors import PartitionError
from commgraph.graph import Graph

_NOPTIONS = 40
_OPTION_OBJTYPE, _OPTION_NCUTS, _OPTION_SEED, _OPTION_NUMBERING = 1, 8, 9, 19
_OBJTYPE_CUT, _OBJTYPE_VOL = 0, 1
_STATUS = {-2: "erroneous input or options", -3: "out of memory", -4: "internal error"}


def metis_edge_cut(adjacency: tuple[np.ndarray, np.ndarray], parts: int, seed: int) -> np.ndarray:
    """Plain METIS k-way: minimum edge cut, node counts balanced (pymetis)."""
    import pymetis

    xadj, adjncy = (np.ascontiguousarray(a, dtype=pymetis.zero_copy_dtype()) for a in adjacency)
    graph = pymetis.CSRAdjacency(adj_starts=xadj, adjacent=adjncy)
    _, membership = pymetis.part_graph(parts, adjacency=graph, options=pymetis.Options(seed=seed))
    return np.asarray(membership, dtype=np.int64)


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
    lib = _libmetis()
    xadj, adjncy = adjacency
    n, ncon = weights.shape
    idx = np.int32
    c_xadj = np.ascontiguousarray(xadj, dtype=idx)
    c_adjncy = np.ascontiguousarray(adjncy, dtype=idx)
    c_vwgt = np.ascontiguousarray(weights, dtype=idx)
    options = np.zeros(_NOPTIONS, dtype=idx)
    lib.METIS_SetDefaultOptions(options.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)))
    options[_OPTION_OBJTYPE] = _OBJTYPE_VOL if volume else _OBJTYPE_CUT
    options[_OPTION_SEED] = seed
    options[_OPTION_NUMBERING] = 0
    options[_OPTION_NCUTS] = tries
    ubvec = np.full(ncon, imbalance, dtype=np.float32)
    part = np.zeros(n, dtype=idx)
    objective = ctypes.c_int32(0)
    nvtxs, ncon_c, nparts = ctypes.c_int32(n), ctypes.c_int32(ncon), ctypes.c_int32(parts)
    status = lib.METIS_PartGraphKway(
        ctypes.byref(nvtxs), ctypes.byref(ncon_c), _ptr(c_xadj), _ptr(c_adjncy), _ptr(c_vwgt),
        None, None, ctypes.byref(nparts), None, ubvec.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
        _ptr(options), ctypes.byref(objective), _ptr(part),
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
    """(xadj, adjncy) of the graph made undirected and loop-free, as METIS requires."""
    from scipy.sparse import csr_matrix

    n = graph.num_nodes
    matrix = csr_matrix((np.ones(graph.num_edges, dtype=np.int8), graph.indices, graph.indptr), shape=(n, n))
    if (matrix != matrix.T).nnz:
        matrix = ((matrix + matrix.T) > 0).astype(np.int8).tocsr()
    matrix.setdiag(0)
    matrix.eliminate_zeros()
    matrix.sort_indices()
    return matrix.indptr.astype(np.int64), matrix.indices.astype(np.int64)
