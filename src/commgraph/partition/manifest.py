"""The schema of a partition set's ``manifest.json``, checked when a set is opened, so that a
damaged or hand-edited manifest is refused in one line naming the field, not met later as an
internal error in a worker.

:data:`SCHEMA` says what every field the readers use must hold (a type, and for numbers a least
value; :data:`METRICS` the metrics, when there are any); beyond it the manifest must agree with
itself: ``parts`` is the number of ``part-<k>/`` folders its ``files`` list (each with its
``owned.npy``) and of its per-part metrics. Fields the
schema does not name are left alone (a later format may add some).
"""

from __future__ import annotations

import re
from pathlib import Path

from commgraph.errors import PartitionError

_NUMBER = (int, float)
# field -> (type(s), least value or None); a nested dict is a nested object
SCHEMA = {
    "format_version": (int, 1),
    "graph": {"name": (str, None), "checksum": (str, None), "num_nodes": (int, 0), "num_edges": (int, 0)},
    "method": (str, None),
    "parts": (int, 1),
    "seed": (int, None),
    "seconds": (_NUMBER, 0),
    "files": (dict, None),
    "metrics": (dict, None),
}
# the metrics `partition make` records (a set written from Python may record none)
METRICS = {
    "parts": (list, None),
    "total_remote": (int, 0),
    "edge_cut": (int, 0),
    "node_imbalance": (_NUMBER, 0),
    "edge_imbalance": (_NUMBER, 0),
    "remote_imbalance": (_NUMBER, 0),
    "remote_min_max": (_NUMBER, 0),
}
PART_METRICS = ("num_nodes", "num_edges", "num_remote")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_PART_FILE = re.compile(r"^part-(\d+)/")


def check_manifest(manifest: object, where: str | Path, version: int) -> None:
    """Refuse a manifest (``where``: its file, for the message) of another format ``version`` than
    this commgraph reads, or that does not follow :data:`SCHEMA` or disagrees with itself, with a
    :class:`PartitionError` naming the field."""
    if not isinstance(manifest, dict):
        _refuse(where, f"the manifest must be a JSON object, got {_kind(manifest)}")
    found = manifest.get("format_version")
    if found != version:
        raise PartitionError(
            f"{Path(where).parent} has partition format {found}; this commgraph reads format {version}: re-partition"
        )
    _check_object(manifest, SCHEMA, "", where)
    files = manifest["files"]
    for name, digest in files.items():
        if not (isinstance(name, str) and isinstance(digest, str) and _DIGEST.match(digest)):
            _refuse(where, f"files[{name!r}] must be a SHA-256 in hex, got {digest!r}")
    parts = manifest["parts"]
    listed = sorted({int(m.group(1)) for m in map(_PART_FILE.match, files) if m})
    if listed != list(range(parts)) or any(f"part-{k}/owned.npy" not in files for k in range(parts)):
        _refuse(where, f"parts is {parts} but files lists part folders {listed}")
    if not manifest["metrics"]:
        return
    _check_object(manifest["metrics"], METRICS, "metrics.", where)
    per_part = manifest["metrics"]["parts"]
    if len(per_part) != parts or not all(
        isinstance(p, dict) and all(_is(p.get(key), int, 0) for key in PART_METRICS) for p in per_part
    ):
        _refuse(where, f"metrics.parts must hold {parts} objects with {', '.join(PART_METRICS)} (counts >= 0)")


def _check_object(value: object, schema: dict, prefix: str, where: str | Path) -> None:
    if not isinstance(value, dict):
        _refuse(where, f"{prefix.rstrip('.') or 'the manifest'} must be a JSON object, got {_kind(value)}")
    for key, rule in schema.items():
        name = f"{prefix}{key}"
        if key not in value:
            _refuse(where, f"{name} is missing")
        if isinstance(rule, dict):
            _check_object(value[key], rule, f"{name}.", where)
        elif not _is(value[key], *rule):
            kinds, least = rule
            wanted = "a number" if kinds is _NUMBER else f"a JSON {_kind(kinds())}"
            _refuse(
                where, f"{name} must be {wanted}" + ("" if least is None else f" >= {least}") + f", got {value[key]!r}"
            )


def _is(value: object, kinds, least) -> bool:
    if isinstance(value, bool) or not isinstance(value, kinds):  # JSON true is not a count
        return False
    return least is None or value >= least


def _kind(value: object) -> str:
    return {
        dict: "object",
        list: "array",
        str: "string",
        int: "integer",
        float: "number",
        type(None): "null",
        bool: "boolean",
    }.get(type(value), type(value).__name__)


def _refuse(where: str | Path, message: str) -> None:
    raise PartitionError(f"{where}: {message}; the manifest is damaged: re-partition")
