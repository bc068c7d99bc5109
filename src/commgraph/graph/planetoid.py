"""Planetoid raw files (Cora, CiteSeer, PubMed): ``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}``.

These files are Python pickles by definition (Yang et al., 2016), so they are the one place commgraph
unpickles anything. The unpickler is restricted: it builds only numpy arrays, a stand-in for scipy's
``csr_matrix`` (its arrays are read out, no scipy code runs) and the adjacency ``defaultdict(list)``;
any other object in the file is refused. Split and node order follow PyG's ``Planetoid`` ("public"
split): train = the first ``len(y)`` nodes, val = the next 500, test = ``test.index``. CiteSeer's
test index has gaps (isolated test nodes absent from ``tx``): those rows get zero features and no
label, exactly as PyG does.
"""

from __future__ import annotations

import collections
import itertools
import pickle
import re
from pathlib import Path

import numpy as np

from commgraph.errors import GraphFormatError
from commgraph.graph.build import from_edges
from commgraph.graph.core import Graph

PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph")
_FILE = re.compile(r"^ind\.([A-Za-z0-9_-]+)\.(x|y|tx|ty|allx|ally|graph|test\.index)$")


class _SparseMatrixState:
    """Receives the pickled attributes of a scipy CSR matrix without running scipy code."""

    def to_dense(self, path: Path) -> np.ndarray:
        state = self.__dict__
        try:
            shape = state.get("_shape", state.get("shape"))
            data, indices, indptr = state["data"], state["indices"], state["indptr"]
        except KeyError as exc:
            raise GraphFormatError(path, f"sparse matrix without {exc}") from None
        dense = np.zeros(shape, dtype=np.float32)
        rows = np.repeat(np.arange(shape[0]), np.diff(indptr))
        dense[rows, indices] = data
        return dense


def _reconstruct(cls, shape, dtype):
    """numpy's pickled-array constructor, limited to plain ndarrays."""
    if cls is not np.ndarray:
        raise pickle.UnpicklingError(f"refusing to build {cls!r}: not part of the Planetoid format")
    return np.ndarray.__new__(cls, shape, dtype)


def _latin1_bytes(text: str, encoding: str) -> bytes:
    """How Python 3 writes bytes (array buffers) into a protocol-2 pickle."""
    if encoding != "latin1":
        raise pickle.UnpicklingError(f"refusing to encode with {encoding!r}")
    return text.encode("latin1")


class _RestrictedUnpickler(pickle.Unpickler):
    _ALLOWED = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("scipy.sparse.csr", "csr_matrix"): _SparseMatrixState,
        ("scipy.sparse._csr", "csr_matrix"): _SparseMatrixState,
        ("collections", "defaultdict"): collections.defaultdict,
        ("_codecs", "encode"): _latin1_bytes,
        ("__builtin__", "list"): list,
        ("builtins", "list"): list,
    }

    def find_class(self, module: str, name: str):
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refusing to load {module}.{name}: not part of the Planetoid format"
            ) from None


def find_planetoid(path: Path, name: str | None) -> tuple[Path, str] | None:
    """Resolve a folder (with ``name`` or a single dataset in it), or a path like ``dir/ind.cora`` or
    ``dir/ind.cora.x``, to (folder, dataset name); None if it is not Planetoid."""
    if path.is_dir():
        names = sorted({m.group(1) for p in path.iterdir() if (m := _FILE.match(p.name))})
        if name is not None:
            return (path, name) if name in names else None
        return (path, names[0]) if len(names) == 1 else None
    match = _FILE.match(path.name) or re.match(r"^ind\.([A-Za-z0-9_-]+)$", path.name)
    if match and (path.parent / f"ind.{match.group(1)}.graph").is_file():
        return path.parent, match.group(1)
    return None


def load_planetoid(folder: str | Path, name: str, *, self_loops: bool = False) -> Graph:
    folder = Path(folder)
    objects = {part: _unpickle(folder / f"ind.{name}.{part}") for part in PARTS}
    index_file = folder / f"ind.{name}.test.index"
    try:
        test_index = np.loadtxt(index_file, dtype=np.int64, ndmin=1)
    except (OSError, ValueError) as exc:
        raise GraphFormatError(index_file, f"cannot read test index ({exc})") from None

    allx, tx = (_dense(objects[p], folder / f"ind.{name}.{p}") for p in ("allx", "tx"))
    ally, ty = (np.asarray(objects[p], dtype=np.float32) for p in ("ally", "ty"))
    if tx.shape[0] != test_index.shape[0] or ty.shape[0] != test_index.shape[0]:
        raise GraphFormatError(index_file, f"lists {test_index.shape[0]} test nodes but tx has {tx.shape[0]} rows")
    sorted_test = np.sort(test_index)
    span = int(sorted_test[-1] - sorted_test[0] + 1)
    if span != sorted_test.shape[0]:  # CiteSeer: isolated test nodes have no row in tx/ty
        tx_full = np.zeros((span, tx.shape[1]), dtype=np.float32)
        ty_full = np.zeros((span, ty.shape[1]), dtype=np.float32)
        tx_full[sorted_test - sorted_test[0]] = tx
        ty_full[sorted_test - sorted_test[0]] = ty
        tx, ty = tx_full, ty_full

    features = np.concatenate([allx, tx])
    onehot = np.concatenate([ally, ty])
    # test rows are stored in sorted order but belong to the nodes test.index names
    features[test_index] = features[sorted_test]
    onehot[test_index] = onehot[sorted_test]
    labels = np.where(onehot.any(axis=1), onehot.argmax(axis=1), -1).astype(np.int64)

    num_nodes = features.shape[0]
    n_train = int(np.asarray(objects["y"]).shape[0])
    masks = {k: np.zeros(num_nodes, dtype=bool) for k in ("train_mask", "val_mask", "test_mask")}
    masks["train_mask"][:n_train] = True
    masks["val_mask"][n_train : n_train + 500] = True
    masks["test_mask"][test_index] = True
    masks = {k: m & (labels >= 0) for k, m in masks.items()}

    adjacency = objects["graph"]
    if not isinstance(adjacency, dict):
        raise GraphFormatError(folder / f"ind.{name}.graph", "is not an adjacency dict")
    lengths = np.fromiter(map(len, adjacency.values()), dtype=np.int64, count=len(adjacency))
    src = np.repeat(np.fromiter(adjacency.keys(), dtype=np.int64, count=len(adjacency)), lengths)
    dst = np.fromiter(itertools.chain.from_iterable(adjacency.values()), dtype=np.int64, count=src.shape[0])
    return from_edges(
        src,
        dst,
        num_nodes,
        symmetrize=True,
        self_loops=self_loops,
        features=features,
        labels=labels,
        **masks,
        name=name,
    )


def _unpickle(path: Path):
    try:
        with open(path, "rb") as handle:
            return _RestrictedUnpickler(handle, encoding="latin1").load()
    except FileNotFoundError:
        raise GraphFormatError(path, "missing Planetoid file") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise GraphFormatError(path, f"not a valid Planetoid pickle ({exc})") from None


def _dense(obj, path: Path) -> np.ndarray:
    if isinstance(obj, _SparseMatrixState):
        return obj.to_dense(path)
    return np.asarray(obj, dtype=np.float32)
