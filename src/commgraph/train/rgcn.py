"""R-GCN's full-graph pass over a part of a typed partition set (:mod:`commgraph.partition.typed`).

Every node type is brought to the hidden width where it is owned (:class:`~commgraph.nn.rgcn.TypedInput`:
a projection of the type's features, ``x-<t>.npy``, or its embedding rows), so every layer's table
is hidden wide, whatever the types' feature widths, and no halo row ever crosses at a type's own
width. Each layer then exchanges its input's halo rows layer-wise through the job's all-gather plan
(:func:`~commgraph.runtime.halo_exchange`, the barrier exchange: their gradients return to their
owners, an embedding row's too) and computes the part's owned rows on its
:class:`~commgraph.nn.rgcn.RelationBlock` (HGT: its :class:`~commgraph.nn.hgt.HGTBlock`). The
exchanges are layers ``0..L-1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from commgraph.errors import TrainingError
from commgraph.nn.hgt import HGT, HGTBlock
from commgraph.nn.rgcn import RGCN, LinearTerm, RelationBlock, TypedModel, linear_argmax, linear_cross_entropy
from commgraph.runtime import halo_exchange
from commgraph.runtime.job import Job, Wiring


@dataclass
class TypedPart:
    """What a worker reads of its typed part beside the ordinary part: each node type's range of
    owned rows (``bounds[t]..bounds[t + 1] - 1``), its owned typed ids, its feature width and
    feature rows (None without), each relation's destination type, the target type, and the
    types' offsets in the homogeneous view."""

    bounds: np.ndarray
    owned_ids: list[np.ndarray]
    widths: list[int]
    features: list[np.ndarray | None]
    relation_dst: list[int]
    target: int
    offsets: np.ndarray

    @classmethod
    def read(cls, job: Job) -> TypedPart:
        """Part ``job.world.rank``'s typed files."""
        typed = job.pset.manifest.get("typed")
        if typed is None:
            raise TrainingError(
                f"{job.pset.path} is not a typed partition set: --model rgcn or hgt trains a heterogeneous graph "
                "(mag-shaped:scale=F, or a set partition make wrote of one)"
            )
        part, types = job.part, typed["node_types"]
        owned = np.asarray(part.owned, dtype=np.int64)
        offsets = np.asarray(typed["offsets"], dtype=np.int64)
        bounds = np.searchsorted(owned, offsets)
        folder = job.pset.path / f"part-{part.index}"
        widths = [int(typed["num_features"][t]) for t in types]
        features = [np.load(folder / f"x-{t}.npy") if width else None for t, width in enumerate(widths)]
        return cls(
            bounds=bounds,
            owned_ids=[owned[bounds[t] : bounds[t + 1]] - offsets[t] for t in range(len(types))],
            widths=widths,
            features=features,
            relation_dst=[types.index(dst) for _, _, dst in typed["relations"]],
            target=types.index(typed["target"]),
            offsets=offsets,
        )

    @property
    def target_rows(self) -> slice:
        """The target type's owned rows."""
        return slice(int(self.bounds[self.target]), int(self.bounds[self.target + 1]))

    def dst_ranges(self) -> list[tuple[int, int]]:
        """Each relation's destination rows among the owned rows (its destination type's range)."""
        return [(int(self.bounds[t]), int(self.bounds[t + 1])) for t in self.relation_dst]


def build_typed_model(typed: TypedPart, config, classes: int) -> TypedModel:
    """The run's R-GCN or HGT (``config``: the :class:`~commgraph.train.config.TrainConfig`), its
    embeddings this part's rows."""
    return typed_model(config, typed.widths, len(typed.relation_dst), typed.owned_ids, classes)


def typed_model(config, widths: list[int], relations: int, owned_ids: list[np.ndarray], classes: int) -> TypedModel:
    """The run's R-GCN or HGT over node types of input ``widths`` and ``relations`` relations, its
    embeddings the rows ``owned_ids`` (each type's typed ids)."""
    gnn = config.gnn
    shape = dict(layers=gnn.layers, dropout=gnn.dropout, seed=config.optim.seed)
    if gnn.model == "hgt":
        return HGT(widths, gnn.hidden, classes, relations, owned_ids, heads=gnn.heads, **shape)
    return RGCN(widths, gnn.hidden, classes, relations, owned_ids, num_bases=gnn.bases, **shape)


class TypedExecutor:
    """The full-graph pass of :class:`~commgraph.nn.rgcn.RGCN` or :class:`~commgraph.nn.hgt.HGT`
    over a part (see the module's description): the loss and the predictions of the target type's
    owned rows (``rows`` of the owned rows), the last layer computed for them alone (the other
    types' rows there reach no loss), its logits a chunk of rows at a time."""

    name = "barrier"

    def __init__(self, job: Job, wiring: Wiring, typed: TypedPart, model: str):
        part, device = job.part, job.device
        self.features = [None if x is None else torch.from_numpy(x).to(device) for x in typed.features]
        edge_type = np.load(job.pset.path / f"part-{part.index}" / "edge_type.npy")
        if model == "hgt":
            table = np.concatenate([np.asarray(part.owned), np.asarray(part.halo)])
            row_type = np.searchsorted(typed.offsets, table, side="right") - 1
            block = HGTBlock.from_csr(part.indptr, part.indices, edge_type, row_type, len(typed.relation_dst))
        else:
            num_src = part.num_owned + part.num_halo
            block = RelationBlock.from_csr(part.indptr, part.indices, edge_type, num_src, typed.dst_ranges())
        self.block = block.to(device)
        self.rows = typed.target_rows
        self.last = self.block.rows(self.rows.start, self.rows.stop)
        self.runner = job.layerwise(job.exchange(wiring.plan, part.owned, part.halo))
        widths = ", ".join(f"{w}" if w else "embedding" for w in typed.widths)
        self.feature_note = f"node types' inputs ({widths}) projected to the hidden width where owned"

    def loss(self, model: TypedModel, train: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The summed cross-entropy of the target rows in ``train`` (a mask over them) against their
        ``labels``, a chunk of logits at a time (:func:`~commgraph.nn.rgcn.linear_cross_entropy`)."""
        rows = train.nonzero().flatten()
        return linear_cross_entropy(self._head(model), rows, labels[rows])

    def predict(self, model: TypedModel) -> torch.Tensor:
        """Each target row's predicted class, a chunk of logits at a time, without autograd."""
        with torch.no_grad():
            return linear_argmax(self._head(model))

    def _head(self, model: TypedModel) -> list[LinearTerm]:
        """The layers to the last one's :class:`~commgraph.nn.rgcn.LinearTerm` s (the target rows')."""
        last = model.num_layers - 1
        h = model.input(self.features)
        for index in range(last):
            h = model.layer(index, self._table(h, index), self.block)
        return model.head(self._table(h, last), self.last)

    def _table(self, h: torch.Tensor, index: int) -> torch.Tensor:
        """Layer ``index``'s table: the owned rows ``h``, then their halo rows exchanged."""
        return h if self.runner.exchange.idle else torch.cat([h, halo_exchange(h, self.runner, index)])
