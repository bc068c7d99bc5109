"""The structure of a partition set, checked before any worker reads it: a checksum proves a file is
the one written, not that the set is whole (a valid ``.npy`` of half the edges, a ``(0, F)`` feature
table, ids at their type's maximum each pass one).

Each file's header is read (dtype, shape, the bytes its data take) and checked against the file's
length, against the manifest's record of it (``arrays``: dtype and shape of every file; a set
written before the manifest kept it is checked by the rules alone) and against a rule of
:data:`PART_RULES` or :data:`STRUCTURE_RULES`. A rule gives the dtype kinds a file may have, its shape in sizes such as
``n`` (nodes the part owns) or ``N + 1``, the bound its values lie below (ids) and, for a pointer
array, the size its last value gives. Sizes are the manifest's (``N`` nodes, ``E`` edges, ``P``
parts) or bound by the first file that gives them, so files disagreeing with each other are found.
Across files, the parts' owned nodes sum to ``N``, their edges to ``E``, and the owner map gives
each part its owned count.

The cost is O(files) header reads plus one vectorised pass (min and max) over each id array, all
memory-mapped. A new kind of file joins by adding a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from commgraph.errors import PartitionError

REMAKE = "the set is damaged: re-make it with `commgraph partition make`"


@dataclass(frozen=True)
class Rule:
    """What one file of a set must be.

    Args:
        kinds: the numpy dtype kinds it may have (``"iu"`` integers, ``"f"`` floats, ``"b"`` bool).
        shape: each dimension, a sum of sizes and integers (``"n + h"``); a single size not yet
            known is bound by this file.
        below: its values lie in ``[0, below)`` (a sum of sizes), checked with one min/max pass.
        pointer: a CSR-style pointer array: starts at 0, never decreases, and its last value is
            this size (bound here if not yet known).
    """

    kinds: str
    shape: tuple[str, ...]
    below: str | None = None
    pointer: str | None = None


# a part's files (`part-<k>/<name>.npy`); sizes: n owned, h halo, e local edges, s rows sent, F features
PART_RULES = {
    "owned": Rule("iu", ("n",), below="N"),
    "halo": Rule("iu", ("h",), below="N"),
    "halo_owner": Rule("iu", ("h",), below="P"),
    "indptr": Rule("iu", ("n + 1",), below="E + 1", pointer="e"),
    "indices": Rule("iu", ("e",), below="n + h"),
    "recv_ptr": Rule("iu", ("P + 1",), pointer="h"),
    "send_ptr": Rule("iu", ("P + 1",), below="N + 1", pointer="s"),
    "send_index": Rule("iu", ("s",), below="n"),
    "degree": Rule("iu", ("n + h",)),
    "features": Rule("f", ("n", "F")),
    "labels": Rule("iu", ("n",)),
    "train_mask": Rule("b", ("n",)),
    "val_mask": Rule("b", ("n",)),
    "test_mask": Rule("b", ("n",)),
    "weights": Rule("f", ("e",)),
}
# the whole graph's files (`structure/<name>.npy`)
STRUCTURE_RULES = {
    "indptr": Rule("iu", ("N + 1",), pointer="E"),
    "indices": Rule("iu", ("E",), below="N"),
    "degree": Rule("iu", ("N",)),
    "owner": Rule("iu", ("N",), below="P"),
}
_SET_SIZES = ("N", "E", "P", "F")  # sizes shared by every part; the others are a part's own


@dataclass(frozen=True)
class Header:
    """A ``.npy`` file's header: the array's dtype and shape, and where its data start."""

    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int

    @property
    def data_bytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def record(self) -> dict:
        """The manifest's record of the array (``arrays[file]``)."""
        return {"dtype": self.dtype.str, "shape": list(self.shape)}


_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def read_header(file: Path) -> Header:
    """The header of the ``.npy`` ``file``; a file that has none (empty, truncated, another format)
    is refused naming it."""
    if not file.is_file():
        _refuse(file, "is missing")
    if file.stat().st_size == 0:
        _refuse(file, "is empty (0 bytes)")
    try:
        with open(file, "rb") as handle:
            version = np.lib.format.read_magic(handle)
            read = _HEADER_READERS.get(version)
            if read is None:
                raise ValueError(f".npy format version {version}")
            shape, fortran, dtype = read(handle)
            offset = handle.tell()
    except (ValueError, EOFError, SyntaxError, OSError) as exc:
        raise PartitionError(f"{file}: not a .npy array ({_first_line(exc)}); {REMAKE}") from None
    if fortran or dtype.hasobject:
        raise PartitionError(f"{file}: a {'Fortran-ordered' if fortran else 'object'} array; {REMAKE}")
    return Header(dtype, tuple(shape), offset)


def validate_set(path: Path, manifest: dict) -> None:
    """Check the structure of the set at ``path`` (its ``manifest``, already checked against its
    schema) as the module's description says; the first disagreement is refused with a
    :class:`PartitionError` naming the file."""
    sizes = {"N": manifest["graph"]["num_nodes"], "E": manifest["graph"]["num_edges"], "P": manifest["parts"]}
    recorded = manifest.get("arrays")
    if recorded is not None and not isinstance(recorded, dict):
        raise PartitionError(f"{path / 'manifest.json'}: arrays must be a JSON object; {REMAKE}")
    headers = {}
    for name in manifest["files"]:
        if name.endswith(".npy"):
            headers[name] = _checked_header(path, name, recorded)
    owned = []
    edges = 0
    for k in range(sizes["P"]):
        part_sizes = {key: sizes[key] for key in _SET_SIZES if key in sizes}
        _check_files(path, f"part-{k}/", PART_RULES, headers, part_sizes)
        sizes.update({key: part_sizes[key] for key in _SET_SIZES if key in part_sizes})
        owned.append(part_sizes["n"])
        edges += part_sizes["e"]
    if sum(owned) != sizes["N"]:
        _refuse(
            path / f"part-{sizes['P'] - 1}/owned.npy", f"the parts own {sum(owned)} nodes, the graph has {sizes['N']}"
        )
    if edges != sizes["E"]:
        _refuse(
            path / f"part-{sizes['P'] - 1}/indices.npy", f"the parts hold {edges} edges, the graph has {sizes['E']}"
        )
    _check_files(path, "structure/", STRUCTURE_RULES, headers, sizes)
    counts = np.bincount(_mapped(path / "structure/owner.npy"), minlength=sizes["P"])
    wrong = np.flatnonzero(counts != np.array(owned))
    if wrong.shape[0]:
        k = int(wrong[0])
        _refuse(path / "structure/owner.npy", f"gives part {k} {counts[k]} nodes, part-{k}/owned.npy holds {owned[k]}")


def _checked_header(path: Path, name: str, recorded: dict | None) -> Header:
    """The header of file ``name``, checked against the file's length and the manifest's record."""
    file = path / name
    header = read_header(file)
    length = file.stat().st_size
    if length != header.offset + header.data_bytes:
        _refuse(
            file,
            f"is {length} bytes long, its header says {header.shape} {header.dtype}: "
            f"{header.offset + header.data_bytes} bytes",
        )
    if recorded is not None and recorded.get(name) != header.record():
        _refuse(file, f"holds {_describe(header.record())}, the manifest records {_describe(recorded.get(name))}")
    return header


def _check_files(path: Path, folder: str, rules: dict[str, Rule], headers: dict[str, Header], sizes: dict) -> None:
    """Check the files of ``folder`` against ``rules``, binding the sizes they give in ``sizes``."""
    for name, rule in rules.items():
        header = headers.get(f"{folder}{name}.npy")
        if header is None:
            continue  # a required file missing is the manifest's check; optional ones may be absent
        file = path / folder / f"{name}.npy"
        if header.dtype.kind not in rule.kinds:
            _refuse(file, f"holds {header.dtype}, expected {_KIND_NAMES[rule.kinds]}")
        if len(header.shape) != len(rule.shape) or not all(
            _fits(dim, found, sizes) for dim, found in zip(rule.shape, header.shape, strict=False)
        ):
            expected = ", ".join(str(_value(dim, sizes)) if _known(dim, sizes) else dim for dim in rule.shape)
            _refuse(file, f"has shape {header.shape}, expected ({expected})")
        if rule.below is None and rule.pointer is None:
            continue
        values = _mapped(file)
        if values.shape[0] == 0:
            continue
        if rule.below is not None:
            bound = _value(rule.below, sizes)
            low, high = int(values.min()), int(values.max())
            if low < 0 or high >= bound:
                _refuse(file, f"holds ids {low}..{high}, outside 0..{bound - 1} ({rule.below})")
        if rule.pointer is not None:
            first, last = int(values[0]), int(values[-1])
            if first != 0 or np.any(values[1:] < values[:-1]):
                _refuse(file, "is not a pointer array (from 0, never decreasing)")
            if not _fits(rule.pointer, last, sizes):
                _refuse(file, f"ends at {last}, expected {_value(rule.pointer, sizes)} ({rule.pointer})")


_KIND_NAMES = {"iu": "integers", "f": "floating point", "b": "bool"}


def _fits(dim: str, found: int, sizes: dict) -> bool:
    """Whether ``found`` is the value of ``dim``, binding ``dim`` to it if it is a size not yet known."""
    if _known(dim, sizes):
        return _value(dim, sizes) == found
    sizes[dim.strip()] = found
    return True


def _known(dim: str, sizes: dict) -> bool:
    return all(term.strip().isdigit() or term.strip() in sizes for term in dim.split("+"))


def _value(dim: str, sizes: dict) -> int:
    return sum(int(term) if term.strip().isdigit() else int(sizes[term.strip()]) for term in dim.split("+"))


def _describe(record: object) -> str:
    """An ``arrays`` record as ``int64 (1354,)``, or as it is if it is not one."""
    try:
        return f"{np.dtype(record['dtype'])} {tuple(record['shape'])}"
    except (TypeError, KeyError, ValueError):
        return repr(record)


def _mapped(file: Path) -> np.ndarray:
    return np.load(file, mmap_mode="r", allow_pickle=False)


def _refuse(file: Path, what: str) -> None:
    raise PartitionError(f"{file} {what}; {REMAKE}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]
