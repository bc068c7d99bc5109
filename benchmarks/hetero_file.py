"""One heterogeneous graph file both sides of ``benchmarks/dgl_compare.py rgcn`` read: numpy alone, so
the DGL environment (which has no commgraph) and commgraph's bridge script load the same arrays.

An uncompressed ``.npz``: ``nodes/<type>`` (a 0-d count per node type, in the graph's type order),
``features/<type>`` (float32 rows of the types that have them), ``<src>/<rel>/<dst>/indptr`` and
``.../indices`` (each relation's in-edge CSR over its destination type: row ``v`` lists the source
ids of ``v``'s in-edges), ``target`` (the labelled type's name), ``labels`` and ``train_mask`` (its
rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class HeteroArrays:
    """The file's arrays (see the module description)."""

    num_nodes: dict[str, int]
    relations: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]]  # (indptr, indices)
    features: dict[str, np.ndarray]
    target: str
    labels: np.ndarray
    train_mask: np.ndarray

    def save(self, path) -> None:
        arrays = {f"nodes/{t}": np.asarray(n, dtype=np.int64) for t, n in self.num_nodes.items()}
        arrays |= {f"features/{t}": x for t, x in self.features.items()}
        for key, (indptr, indices) in self.relations.items():
            arrays |= {f"{'/'.join(key)}/indptr": indptr, f"{'/'.join(key)}/indices": indices}
        arrays |= {"target": np.asarray(self.target), "labels": self.labels, "train_mask": self.train_mask}
        with open(path, "wb") as handle:
            np.savez(handle, **arrays)

    @classmethod
    def load(cls, path) -> HeteroArrays:
        with np.load(path, allow_pickle=False) as data:
            names = data.files
            num_nodes = {name.split("/", 1)[1]: int(data[name]) for name in names if name.startswith("nodes/")}
            features = {name.split("/", 1)[1]: data[name] for name in names if name.startswith("features/")}
            relations = {
                tuple(name.split("/")[:3]): (data[name], data[name.replace("/indptr", "/indices")])
                for name in names
                if name.endswith("/indptr")
            }
            return cls(num_nodes, relations, features, str(data["target"]), data["labels"], data["train_mask"])
