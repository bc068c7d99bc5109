"""The dataset cache: named datasets downloaded, verified, unpacked and converted once.

Layout, under ``$COMMGRAPH_HOME`` (default ``~/.cache/commgraph``)::

    datasets/<name>/raw/<upstream file>      as downloaded (``.part`` while incomplete)
    datasets/<name>/unpacked/                a zip's contents (OGB, Reddit)
    datasets/<name>/graph.npz                the converted graph, stored uncompressed (memory-mapped)
    datasets/<name>/checksums.json           SHA-256 of every file above, recorded when it was made

Every step leaves either nothing or a complete result, so a process killed at any point is finished
by running it again: downloads resume from ``.part``; a zip is unpacked into a temporary folder that
is renamed to ``unpacked/``; ``graph.npz`` and ``checksums.json`` are written to temporary files and
renamed. A file whose digest is not recorded yet is checked (length, CRCs) and then recorded; a file
whose digest no longer matches is corrupt and is fetched or made again; a file whose SHA-256 the
registry pins must match it. The statistics the publisher gives are compared when the graph is
converted, and a disagreement is a warning (:func:`~commgraph.graph.registry.compare_count`). One
process at a time works on a dataset (a lock file); others wait for it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from commgraph.atomic import atomic_write
from commgraph.errors import DatasetError, Unreachable
from commgraph.graph.core import Graph
from commgraph.graph.download import MIRROR_ENV, Patience, check_archive, download, mirrored, sha256
from commgraph.graph.npz import load_npz, save_npz
from commgraph.graph.ogb import read_ogb
from commgraph.graph.planetoid import load_planetoid
from commgraph.graph.reddit import read_reddit
from commgraph.graph.registry import Dataset, RemoteFile, compare_count, lookup
from commgraph.graph.snap import EdgeFileLoad, read_snap

HOME_ENV = "COMMGRAPH_HOME"
GRAPH_FILE = "graph.npz"


def home() -> Path:
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".cache" / "commgraph")


def dataset_dir(name: str) -> Path:
    return home() / "datasets" / name


def dataset_record(entry: Dataset) -> dict:
    """A registry entry as plain data (``commgraph graph datasets list``): its name, kind, size,
    licence, stated counts, :func:`cache_state`, download URLs and notes."""
    stats = entry.stats
    return {
        "name": entry.name,
        "kind": entry.kind,
        "size": entry.size_text,
        "licence": entry.licence,
        "nodes": stats.nodes,
        "edges": stats.edges,
        "edges_counted": stats.edges_counted,
        "features": stats.features,
        "classes": stats.classes,
        "cached": cache_state(entry),
        "urls": [f.url for f in entry.files],
        "notes": entry.notes,
    }


def cache_state(entry: Dataset) -> str:
    """``converted``, ``downloaded``, ``partial`` (a download to resume) or ``-`` (nothing yet)."""
    root = dataset_dir(entry.name)
    recorded = _read_checksums(root)
    if GRAPH_FILE in recorded and (root / GRAPH_FILE).is_file():
        return "converted"
    raw = [root / "raw" / f.filename for f in entry.files]
    if all(p.is_file() for p in raw):
        return "downloaded"
    if any(p.with_name(p.name + ".part").is_file() or p.is_file() for p in raw):
        return "partial"
    return "-"


def fetch(entry: Dataset, *, progress: bool = True, patience: Patience | None = None) -> Path:
    """Download ``entry``'s files into the cache (or check those already there); returns its folder.
    ``patience``: how long a silent server is waited for (:class:`~commgraph.graph.download.Patience`)."""
    root = dataset_dir(entry.name)
    with _locked(root):
        _download_all(entry, root, progress, patience)
    return root


def load_dataset(name: str | Dataset, *, progress: bool = True, patience: Patience | None = None) -> Graph:
    """The graph of a registry dataset: from the cache's verified ``graph.npz`` (memory-mapped) when
    there is one, else downloaded (``patience``: as :func:`fetch`), checked and converted first."""
    entry = lookup(name) if isinstance(name, str) else name
    root = dataset_dir(entry.name)
    with _locked(root):
        graph_file = root / GRAPH_FILE
        recorded = _read_checksums(root).get(GRAPH_FILE)
        if recorded is not None and graph_file.is_file():
            if sha256(graph_file) == recorded:
                return load_npz(graph_file)
            _say(progress, f"commgraph: {graph_file} does not match its recorded SHA-256; converting again")
        _download_all(entry, root, progress, patience)
        _say(progress, f"commgraph: converting {entry.name} (once) -> {graph_file}")
        loaded = _read(entry, root)
        check_stats(entry, loaded)
        save_npz(loaded.graph, graph_file, compress=False)
        _record(root, GRAPH_FILE, sha256(graph_file))
    return load_npz(graph_file)


def check_stats(entry: Dataset, loaded: EdgeFileLoad) -> None:
    """Compare the loaded graph's node and edge counts, feature width and classes with the publisher's;
    each disagreement is a warning on stderr, never an error."""
    graph, stats = loaded.graph, entry.stats
    edges = loaded.rows if stats.edges_counted == "listed" else graph.num_edges
    edge_what = "edge lines" if stats.edges_counted == "listed" else "stored edges"
    checks = [("nodes", graph.num_nodes, stats.nodes), (edge_what, edges, stats.edges)]
    if stats.features:
        checks.append(("features", graph.num_features, stats.features))
    if stats.classes:
        checks.append(("classes", graph.num_classes, stats.classes))
    for what, got, published in checks:
        compare_count(entry.name, what, got, published, "the publisher")


def _download_all(entry: Dataset, root: Path, progress: bool, patience: Patience | None) -> None:
    recorded = _read_checksums(root)
    for remote in entry.files:
        key = f"raw/{remote.filename}"
        dest = root / key
        if dest.is_file() and key in recorded and sha256(dest) != recorded[key]:
            _say(progress, f"commgraph: {dest} does not match its recorded SHA-256; fetching it again")
            dest.unlink()
            shutil.rmtree(root / "unpacked", ignore_errors=True)
        if dest.is_file() and key in recorded:
            continue
        if dest.is_file():  # complete but never recorded (a run stopped right after the rename)
            check_archive(dest, dest.name)
        else:
            try:
                download(mirrored(remote.url), dest, progress=progress, patience=patience)
            except Unreachable as exc:
                missing = [f for f in entry.files if not (root / "raw" / f.filename).is_file()]
                raise DatasetError(_by_hand(entry.name, missing, root / "raw", str(exc))) from None
        if remote.size is not None:
            compare_count(remote.filename, "bytes", dest.stat().st_size, remote.size, "the registry")
        digest = sha256(dest)
        if remote.sha256 is not None and digest != remote.sha256:
            dest.unlink()
            raise DatasetError(
                f"{remote.filename} from {mirrored(remote.url)} has SHA-256 {digest}, expected "
                f"{remote.sha256}; it was deleted: run again, and if it persists the source serves "
                "other bytes than the registry expects"
            )
        _record(root, key, digest)


def _by_hand(name: str, files: list[RemoteFile], folder: Path, why: str) -> str:
    """One line saying why ``files`` cannot be downloaded and where each must go when fetched by hand."""
    urls = [mirrored(f.url) for f in files]
    if len(files) == 1:
        what, how = files[0].filename, f"fetch {urls[0]} yourself and put it at {folder / files[0].filename}"
    else:
        what, how = f"{name}'s {len(files)} files", f"fetch them yourself into {folder}: {', '.join(urls)}"
    return f"cannot download {what} ({why}): {how}, then run again (or set {MIRROR_ENV})"


def _read(entry: Dataset, root: Path) -> EdgeFileLoad:
    raw = root / "raw"
    if entry.kind == "planetoid":
        graph = load_planetoid(raw, entry.name)
        return EdgeFileLoad(graph, graph.num_edges)
    if entry.kind == "snap":
        return read_snap(raw / entry.files[0].filename, name=entry.name)
    unpacked = _unpack(raw / entry.files[0].filename, root / "unpacked")
    if entry.kind == "ogb":
        return read_ogb(unpacked / entry.folder, name=entry.name, split=entry.split, labels=entry.labels)
    return read_reddit(unpacked, name=entry.name)


def _unpack(archive: Path, target: Path) -> Path:
    """Extract ``archive`` into ``target`` all at once: into a temporary sibling, then renamed."""
    if target.is_dir():
        return target
    scratch = Path(tempfile.mkdtemp(prefix=".unpack-", dir=target.parent))
    try:
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(scratch)
        os.replace(scratch, target)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return target


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold the dataset's lock; clear what a killed run left (temporary files and folders)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for stale in root.glob(".unpack-*"):
            shutil.rmtree(stale, ignore_errors=True)
        for stale in root.glob(".*.tmp"):
            stale.unlink(missing_ok=True)
        yield


def _read_checksums(root: Path) -> dict[str, str]:
    path = root / "checksums.json"
    if not path.is_file():
        return {}
    try:
        return dict(json.loads(path.read_text()))
    except (ValueError, TypeError):
        return {}  # unreadable: every file is checked and recorded again


def _record(root: Path, key: str, digest: str) -> None:
    recorded = _read_checksums(root)
    recorded[key] = digest
    with atomic_write(root / "checksums.json") as handle:
        handle.write(json.dumps(recorded, indent=1, sort_keys=True).encode())


def _say(progress: bool, line: str) -> None:
    if progress:
        print(line, file=sys.stderr)
