"""The partition set on disk: what each worker loads to train on its part.

Layout::

    DIR/manifest.json      format version, graph (name, checksum, sizes), method, parts, seed,
                           seconds, metrics, a SHA-256 of every array file (``files``) and its
                           dtype and shape (``arrays``)
    DIR/part-<k>/*.npy     owned.npy       global ids of the nodes part k owns (ascending)
                           halo.npy        global ids of its remote nodes, grouped by owner part
                           halo_owner.npy  the part owning each halo node
                           indptr.npy, indices.npy
                                           local CSR: one row per owned node (its in-neighbours),
                                           columns are local ids: 0..n_owned-1 owned, then halo
                                           (int32 while they fit)
                           recv_ptr.npy    halo[recv_ptr[q]:recv_ptr[q+1]] arrive from part q
                           send_ptr.npy, send_index.npy
                                           owned[send_index[send_ptr[q]:send_ptr[q+1]]] go to part
                                           q, in the order of q's halo segment from part k
                           degree.npy      global in-degree, self loops not counted, of owned
                                           then halo nodes (for normalisations such as GCN's
                                           that need the whole graph)
                           features.npy, labels.npy, train_mask.npy, ... of owned nodes, if any
                           weights.npy     the weight of each edge of the local CSR (aligned
                                           with indices.npy), if the graph has edge weights
    DIR/structure/*.npy    the whole graph's in-edges once, for every worker of a machine to
                           memory-map read-only (samplers reach remote nodes' neighbours here):
                           indptr.npy      int64 CSR row pointers, one row per node (its in-edges)
                           indices.npy     source of each in-edge, int32 while the ids fit
                           degree.npy      in-degree without self loops, int32
                           owner.npy       the part owning each node, in the narrowest integer
                                           type that holds the part count (int8 up to 127 parts)

The set is built in a temporary directory beside DIR and renamed into place when complete, so a
crash or an error never leaves a partial set behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from commgraph import __version__
from commgraph.atomic import NO_SPACE, disk_full
from commgraph.errors import OutputError, PartitionError
from commgraph.graph import Graph
from commgraph.graph.core import MASK_NAMES, loop_free_in_degrees
from commgraph.graph.nodefile import save_npy_in_chunks
from commgraph.partition.manifest import check_manifest
from commgraph.partition.metrics import check_assignment, remote_pairs
from commgraph.partition.validate import read_header, validate_set

FORMAT_VERSION = 2
MANIFEST = "manifest.json"
FEATURE_DTYPES = ("float32", "float16")  # what a set may store its features as
_REQUIRED = ("owned", "halo", "halo_owner", "indptr", "indices", "recv_ptr", "send_ptr", "send_index", "degree")
_OPTIONAL = ("features", "labels", *MASK_NAMES)
_EDGE_DATA = ("weights",)
STRUCTURE = ("indptr", "indices", "degree", "owner")


@dataclass
class Part:
    """One worker's share (the arrays the module's description lists), memory-mapped from disk,
    read-only. Local ids: ``0..num_owned-1`` are the owned nodes, then the halo nodes.

    Shapes:
        - **owned:** ``[num_owned]``; **halo, halo_owner:** ``[num_halo]`` (global ids, owner parts)
        - **indptr:** ``[num_owned + 1]``; **indices, weights:** ``[E_k]`` (local ids)
        - **recv_ptr, send_ptr:** ``[parts + 1]``; **degree:** ``[num_owned + num_halo]``
        - **features:** ``[num_owned, F]``; **labels** and masks: ``[num_owned]``
    """

    index: int
    owned: np.ndarray
    halo: np.ndarray
    halo_owner: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    recv_ptr: np.ndarray
    send_ptr: np.ndarray
    send_index: np.ndarray
    degree: np.ndarray
    features: np.ndarray | None = None
    labels: np.ndarray | None = None
    train_mask: np.ndarray | None = None
    val_mask: np.ndarray | None = None
    test_mask: np.ndarray | None = None
    weights: np.ndarray | None = None

    @property
    def num_owned(self) -> int:
        """Nodes the part owns (computes)."""
        return int(self.owned.shape[0])

    @property
    def num_halo(self) -> int:
        """Remote nodes whose rows the part receives every layer."""
        return int(self.halo.shape[0])

    def send_to(self, peer: int) -> np.ndarray:
        """Local ids of the owned rows sent to part ``peer``, in the order of ``peer``'s halo."""
        return self.send_index[self.send_ptr[peer] : self.send_ptr[peer + 1]]

    def recv_from(self, peer: int) -> slice:
        """The halo positions (local id minus ``num_owned``) the rows from part ``peer`` fill."""
        return slice(int(self.recv_ptr[peer]), int(self.recv_ptr[peer + 1]))


@dataclass
class PartRows:
    """The rows one part holds of a set of ids: ``pick``, their places among the ids (None: every
    one), and ``positions``, their rows in the part's arrays."""

    part: int
    pick: np.ndarray | None
    positions: np.ndarray


@dataclass
class RowPlaces:
    """Where the rows of ``count`` global nodes lie (:meth:`PartitionSet.locate`): the rows of each
    part owning some."""

    count: int
    parts: list[PartRows]


@dataclass
class PartitionSet:
    """The one read model of a partition set: its parts (opened once, each part's files checked
    against the manifest the first time it is read when ``verify`` is on, so a worker checks only
    what it reads), the whole graph's in-edges, and per-node data gathered from the parts."""

    path: Path
    manifest: dict
    verify: bool = True
    _parts: dict[int, Part] = field(default_factory=dict, repr=False)
    _structure: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def num_parts(self) -> int:
        """Parts of the set (one per worker)."""
        return int(self.manifest["parts"])

    def part(self, k: int, *, check: bool = True) -> Part:
        """Part ``k``, opened (and, with ``verify`` and ``check``, its files checked) on first use.
        A worker reading a peer's rows passes ``check=False``: that part's own worker checks it."""
        if not 0 <= k < self.num_parts:
            raise PartitionError(f"part {k} does not exist: {self.path} has parts 0..{self.num_parts - 1}")
        if k not in self._parts:
            if self.verify and check:
                _check_files(
                    self.path,
                    {name: digest for name, digest in self.manifest["files"].items() if name.startswith(f"part-{k}/")},
                )
            folder = self.path / f"part-{k}"
            missing = next((name for name in _REQUIRED if not (folder / f"{name}.npy").is_file()), None)
            if missing is not None:
                raise PartitionError(
                    f"{self.path}: part-{k}/{missing}.npy is missing; the set is incomplete, re-partition"
                )
            arrays = {
                name: np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False)
                for name in (*_REQUIRED, *_OPTIONAL, *_EDGE_DATA)
                if (folder / f"{name}.npy").is_file()
            }
            self._parts[k] = Part(index=k, **arrays)
        return self._parts[k]

    @property
    def digest(self) -> str:
        """A SHA-256 over every file's checksum: equal exactly for sets with the same files."""
        return hashlib.sha256(json.dumps(self.manifest["files"], sort_keys=True).encode()).hexdigest()

    def validate(self) -> None:
        """Check the set's structure now: every file's dtype, shape and length against the manifest
        and the others, and its ids' ranges (:mod:`commgraph.partition.validate`; the launcher does,
        once, before any worker starts and before anything reads the arrays)."""
        validate_set(self.path, self.manifest)

    def verify_all(self) -> None:
        """Check every file against the manifest now (the launcher does, once for all workers)."""
        _check_files(self.path, self.manifest["files"])

    def structure(self, name: str) -> np.ndarray:
        """The whole graph's array ``name`` (one of :data:`STRUCTURE`), memory-mapped read-only:
        the processes of a machine that map it share one copy (checked, with ``verify``, on first
        use)."""
        if name not in self._structure:
            relative = f"structure/{name}.npy"
            if self.verify:
                _check_files(self.path, {relative: self.manifest["files"][relative]})
            self._structure[name] = np.load(self.path / relative, mmap_mode="r", allow_pickle=False)
        return self._structure[name]

    def in_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """The whole graph's CSR (rows are destinations, global ids), memory-mapped read-only."""
        return self.structure("indptr"), self.structure("indices")

    def graph(self) -> Graph:
        """The whole graph rebuilt from the parts: edges, features, labels and masks (original node
        ids are not kept in a partition set)."""
        indptr, indices = self.in_edges()
        every = np.arange(indptr.shape[0] - 1)
        first = self.part(0)
        data = {name: self.rows(name, every) for name in _OPTIONAL if getattr(first, name) is not None}
        return Graph(indptr, indices, **data, name=self.manifest["graph"]["name"])

    def locate(self, ids: np.ndarray) -> RowPlaces:
        """Where the rows of global nodes ``ids`` lie in the parts, for :meth:`rows` to read any
        per-node data of them without finding the owners again."""
        owner = self.assignment()[ids]
        owners = np.unique(owner) if ids.shape[0] else np.zeros(1, np.int64)  # no ids: part 0 gives the shape
        places = []
        for k in owners:
            part = self.part(int(k))
            pick = None if owners.shape[0] == 1 else np.flatnonzero(owner == k)
            places.append(PartRows(int(k), pick, owned_positions(part.owned, ids if pick is None else ids[pick])))
        return RowPlaces(int(ids.shape[0]), places)

    def rows(self, name: str, ids: np.ndarray, places: RowPlaces | None = None) -> np.ndarray:
        """Per-node data ``name`` (``features``, ``labels``, ...) of global nodes ``ids``, from
        whichever parts own them (``places``: :meth:`locate` of ``ids``, found here when None)."""
        if places is None:
            places = self.locate(ids)
        result = None
        for held in places.parts:
            values = getattr(self.part(held.part), name)
            if values is None:
                raise PartitionError(f"{self.path} holds no {name}")
            chunk = np.asarray(values[held.positions])
            if held.pick is None:  # one part owns every id: its rows are the result
                return chunk
            if result is None:
                result = np.empty((places.count, *chunk.shape[1:]), dtype=chunk.dtype)
            result[held.pick] = chunk
        return result

    def assignment(self) -> np.ndarray:
        """Part id of every global node (memory-mapped read-only, in the narrowest integer type)."""
        return self.structure("owner")


def write_partition_set(
    graph: Graph,
    assignment: np.ndarray,
    parts: int,
    out: str | Path,
    *,
    method: str,
    seed: int,
    seconds: float,
    metrics: dict,
    force: bool = False,
    progress: bool = False,
    feature_dtype: str | None = None,
) -> PartitionSet:
    """Write the partition set of ``graph`` under ``assignment`` to directory ``out`` (layout: the
    module's description), built beside it and renamed into place when complete.

    Args:
        graph: the graph partitioned.
        assignment: every node's part, ``[N]``.
        parts: number of parts.
        out: the set's directory.
        method, seed, seconds, metrics: how it was made, recorded in the manifest
            (``metrics``: :func:`~commgraph.partition.partition_metrics`'s).
        force: replace an existing ``out``.
        progress: a progress bar over the parts.
        feature_dtype: the dtype the parts' ``features.npy`` are stored in (:data:`FEATURE_DTYPES`;
            None: the graph's own). ``float16`` halves a set's largest files; readers widen its
            rows to float32.

    Returns:
        PartitionSet: the set written.

    Raises:
        PartitionError: ``out`` exists (without ``force``), an assignment that does not fit, or an
            unknown ``feature_dtype``.
    """
    out = Path(out)
    assignment = check_assignment(graph, assignment, parts)
    check_set_output(out, force, feature_dtype)
    with building_set(out) as tmp:
        loop_free = loop_free_in_degrees(graph.indptr, graph.indices)
        files = _write_parts(graph, assignment, parts, tmp, progress, loop_free, feature_dtype)
        files.update(_write_structure(graph, assignment, parts, tmp, loop_free))
        made_from = {
            "name": graph.name,
            "checksum": graph.checksum(),
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
        }
        return finish_set(
            tmp, out, made_from, files, method=method, parts=parts, seed=seed, seconds=seconds, metrics=metrics
        )


def check_set_output(out: Path, force: bool, feature_dtype: str | None) -> None:
    """Refuse an unknown ``feature_dtype``, or an ``out`` that exists without ``force``."""
    if feature_dtype is not None and feature_dtype not in FEATURE_DTYPES:
        raise PartitionError(f"unknown feature dtype {feature_dtype!r}; choose one of {', '.join(FEATURE_DTYPES)}")
    if out.exists() and not force:
        raise PartitionError(f"{out} already exists; pass --force to replace it")


@contextmanager
def building_set(out: Path) -> Iterator[Path]:
    """The temporary folder a set for ``out`` is built in (beside it, empty); on any error it is
    removed, and a full disk is re-raised as one :class:`OutputError` line."""
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except OSError as exc:
        full = full_disk_error(exc, tmp, out)
        shutil.rmtree(tmp, ignore_errors=True)
        if full is None:
            raise
        raise full from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def finish_set(
    tmp: Path,
    out: Path,
    made_from: dict,
    files: dict,
    *,
    method: str,
    parts: int,
    seed: int,
    seconds: float,
    metrics: dict,
) -> PartitionSet:
    """Write the manifest of the set built in ``tmp`` (``made_from``: the graph's name, checksum and
    sizes; ``files``: every array file's SHA-256) and put the set at ``out``."""
    manifest = {
        "format_version": FORMAT_VERSION,
        "commgraph_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "graph": made_from,
        "method": method,
        "parts": parts,
        "seed": seed,
        "seconds": seconds,
        "metrics": metrics,
        "files": files,
        "arrays": {name: read_header(tmp / name).record() for name in files},
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    _replace(tmp, out)
    return PartitionSet(out, manifest)


def full_disk_error(exc: OSError, folder: Path, out: Path) -> OutputError | None:
    """The one-line error for ``out`` when ``exc``, raised writing into ``folder`` (still there),
    is a full disk's (``ENOSPC``, or numpy's short write, which carries no errno, on a disk with
    under :data:`_FULL` bytes left), naming the bytes ``folder`` took; None for another error."""
    if exc.errno not in NO_SPACE and not (exc.errno is None and shutil.disk_usage(folder).free < _FULL):
        return None
    return disk_full(out, sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()), more=True)


_FULL = 1 << 20  # free bytes under which a write that stopped short met a full disk


def _replace(tmp: Path, out: Path) -> None:
    """Put the finished set at ``out``; an old one is moved aside first and removed last."""
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


def _write_parts(
    graph: Graph,
    assignment: np.ndarray,
    parts: int,
    folder: Path,
    progress: bool,
    loop_free: np.ndarray,
    feature_dtype: str | None,
) -> dict:
    n = graph.num_nodes
    halo_part, halo_node = remote_pairs(graph, assignment)
    # within each part, halo nodes grouped by owner, ascending ids inside a group
    order = np.lexsort((halo_node, assignment[halo_node], halo_part))
    halo_part, halo_node = halo_part[order], halo_node[order]
    halo_bounds = np.searchsorted(halo_part, np.arange(parts + 1))
    owned_of = [np.flatnonzero(assignment == k) for k in range(parts)]
    degree = graph.in_degrees()
    local = np.empty(n, dtype=np.int64)
    files: dict[str, str] = {}
    from tqdm import tqdm

    for k in tqdm(range(parts), desc="writing parts", unit="part", disable=None if progress else True):
        owned = owned_of[k]
        halo = halo_node[halo_bounds[k] : halo_bounds[k + 1]]
        owner = assignment[halo]
        local[owned] = np.arange(owned.shape[0])
        local[halo] = owned.shape[0] + np.arange(halo.shape[0])
        rows = degree[owned]
        gather = owned_edges(graph.indptr, owned)
        send_ptr, send_index = _send_lists(k, owned, halo_node, halo_bounds, assignment, parts)
        arrays = {
            "owned": owned,
            "halo": halo,
            "halo_owner": owner,
            "indptr": np.concatenate([[0], np.cumsum(rows)]),
            "indices": local[graph.indices[gather]].astype(id_dtype(owned.shape[0] + halo.shape[0])),
            "recv_ptr": np.searchsorted(owner, np.arange(parts + 1)),
            "send_ptr": send_ptr,
            "send_index": send_index,
            "degree": np.concatenate([loop_free[owned], loop_free[halo]]),
        }
        if graph.edge_weights is not None:
            arrays["weights"] = graph.edge_weights[gather]
        part_dir = folder / f"part-{k}"
        part_dir.mkdir()
        for name, array in arrays.items():
            path = part_dir / f"{name}.npy"
            np.save(path, np.ascontiguousarray(array), allow_pickle=False)
            files[f"part-{k}/{name}.npy"] = _sha256(path)
        for name in _OPTIONAL:  # per-node data (features: most of the set) written without a copy
            values = getattr(graph, name)
            if values is not None:
                dtype = feature_dtype if name == "features" else None
                files[f"part-{k}/{name}.npy"] = _save_rows(part_dir / f"{name}.npy", values, owned, dtype)
    return files


def _write_structure(graph: Graph, assignment: np.ndarray, parts: int, folder: Path, loop_free: np.ndarray) -> dict:
    """The ``structure/`` files (layout: the module's description), written a chunk at a time;
    ``loop_free``: every node's in-degree without self loops."""
    (folder / "structure").mkdir()
    n = graph.num_nodes
    index_type = id_dtype(n)
    arrays = {
        "indptr": (np.int64, graph.indptr),
        "indices": (index_type, graph.indices),
        "degree": (np.int32, loop_free),
        "owner": (owner_dtype(parts), assignment),
    }
    files = {}
    for name, (dtype, values) in arrays.items():
        files[f"structure/{name}.npy"] = save_npy_in_chunks(
            folder / "structure" / f"{name}.npy", dtype, values.shape, lambda a, b, v=values: v[a:b]
        )
    return files


def owned_positions(owned: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The positions in ``owned`` (a part's owned global ids, ascending) of ``ids``, each of them
    owned: a subtraction where the part owns a range of ids (a 1-part set, a ``chunk`` part), else a
    binary search, over the ids in ascending order when ``owned`` is large (a search for ids in
    random order misses the cache at each step: 0.58 s against 0.05 s for 700k ids among 2.45M)."""
    if owned.shape[0] == 0 or int(owned[-1]) - int(owned[0]) + 1 == owned.shape[0]:
        return np.asarray(ids, dtype=np.int64) - (int(owned[0]) if owned.shape[0] else 0)
    if owned.shape[0] < _SEARCH_IN_ORDER or ids.shape[0] < 2:
        return np.searchsorted(owned, ids)
    order = np.argsort(ids)
    positions = np.empty(ids.shape[0], dtype=np.int64)
    positions[order] = np.searchsorted(owned, ids[order])
    return positions


_SEARCH_IN_ORDER = 1 << 16  # owned ids from which :func:`owned_positions` sorts its queries first


def id_dtype(count: int) -> np.dtype:
    """The narrowest of int32 and int64 that numbers ``count`` ids."""
    return np.dtype(np.int32 if count < 2**31 else np.int64)


def owner_dtype(parts: int) -> np.dtype:
    """The narrowest signed integer type that holds part ids ``0..parts-1``."""
    for dtype in (np.int8, np.int16, np.int32):
        if parts - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def _save_rows(path: Path, values: np.ndarray, rows: np.ndarray, dtype=None) -> str:
    """Save ``values[rows]`` as ``.npy`` of ``dtype`` (default: the values') a chunk at a time, so a
    part's copy of a large table is never held in memory; returns the file's sha256."""
    return save_npy_in_chunks(
        path,
        values.dtype if dtype is None else dtype,
        (rows.shape[0], *values.shape[1:]),
        lambda start, stop: values[rows[start:stop]],
    )


def owned_edges(indptr: np.ndarray, owned: np.ndarray) -> np.ndarray:
    """The positions in a CSR (``indptr``) of every in-edge of the ``owned`` rows, row by row: the
    edges a part stores, in its order."""
    rows = np.diff(indptr)[owned]
    firsts = np.concatenate([[0], np.cumsum(rows)[:-1]])
    return np.repeat(indptr[owned] - firsts, rows) + np.arange(rows.sum())


def _send_lists(k, owned, halo_node, halo_bounds, assignment, parts):
    """For every peer q: positions in ``owned`` of the nodes q's halo takes from part k, in q's order."""
    chunks, ptr = [], [0]
    for q in range(parts):
        theirs = halo_node[halo_bounds[q] : halo_bounds[q + 1]]
        mine = theirs[assignment[theirs] == k] if q != k else theirs[:0]
        chunks.append(np.searchsorted(owned, mine))
        ptr.append(ptr[-1] + mine.shape[0])
    return np.array(ptr, dtype=np.int64), np.concatenate(chunks).astype(np.int64)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def is_partition_set(path: str | Path) -> bool:
    """Whether ``path`` is a partition set's directory (it holds a manifest), not a graph."""
    return (Path(path) / MANIFEST).is_file()


def load_partition_set(path: str | Path, graph: Graph | None = None, *, verify: bool = True) -> PartitionSet:
    """Open a partition set, checking its format and, given ``graph``, that it was made from that
    very graph. With ``verify`` each part's files are checked against their checksums when the part
    is first read (``verify_all`` checks every file at once)."""
    path = Path(path)
    if not is_partition_set(path):
        raise PartitionError(f"{path} is not a partition set (no {MANIFEST}); make one with commgraph partition make")
    manifest_file = path / MANIFEST
    try:
        manifest = json.loads(manifest_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PartitionError(f"{manifest_file}: not valid JSON ({exc})") from None
    check_manifest(manifest, manifest_file, FORMAT_VERSION)
    if graph is not None:
        made_from = manifest["graph"]
        if made_from["checksum"] != graph.checksum():
            raise PartitionError(
                f"{path} was made from graph {made_from['name']!r} ({made_from['num_nodes']} nodes, "
                f"{made_from['num_edges']} edges), not from {graph.name!r} ({graph.num_nodes} nodes, "
                f"{graph.num_edges} edges): re-partition this graph"
            )
    if verify:  # files outside the parts and the structure now; the others when first read
        _check_files(
            path,
            {
                name: digest
                for name, digest in manifest["files"].items()
                if not name.startswith(("part-", "structure/"))
            },
        )
    return PartitionSet(path, manifest, verify)


def _check_files(path: Path, files: dict[str, str]) -> None:
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            raise PartitionError(f"{path}: {name} is missing; the set is incomplete, re-partition")
        if _sha256(file) != expected:
            raise PartitionError(f"{path}: {name} does not match its checksum; the set is damaged, re-partition")
