r"""Mini-batches of label edges with their sampled neighbourhoods: :class:`LinkNeighborLoader`.

As PyG's ``LinkNeighborLoader`` (GraphSAGE's sampling, Hamilton et al., `"Inductive Representation
Learning on Large Graphs" <https://arxiv.org/abs/1706.02216>`_, 2017, around both endpoints of each
label edge): a batch holds ``batch_size`` label edges (and, with ``neg_sampling_ratio``, as many
times that many random non-edges), the nodes of their endpoints, and for each layer up to
``num_neighbors[l]`` in-neighbours of the previous hop's new nodes, drawn without replacement. Given
a part (:func:`~commgraph.pyg.partition`), a rank loads the label edges whose destination it owns
and samples the whole graph's in-edges from the partition set (the training graph: validation and
test edges are in no block); node rows come from the set's files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from commgraph.errors import BridgeError
from commgraph.pyg.data import check_edge_index, handle_of
from commgraph.pyg.link import PairSpace, _draw_rounds, _owned_mask, _positive_keys, first_distinct, search


@dataclass
class SampledBlock:
    """The nodes of a sampled neighbourhood (seeds first, then each hop's new nodes) and its edges,
    ids into ``n_id``."""

    n_id: np.ndarray
    src: np.ndarray
    dst: np.ndarray


def _new_nodes(candidates: np.ndarray, known: np.ndarray) -> np.ndarray:
    """The distinct ``candidates`` not in ``known``, in order of first occurrence."""
    distinct = first_distinct(candidates)
    return distinct[~np.isin(distinct, known)]


def sample_neighbors(
    indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray, num_neighbors: list[int], rng: np.random.Generator
) -> SampledBlock:
    """Up to ``num_neighbors[l]`` in-neighbours (all of them for -1) of each node new at hop ``l``,
    without replacement: each frontier node's in-edges get random keys and the smallest are kept."""
    nodes, frontier = seeds, seeds
    src_parts, dst_parts = [], []
    for fanout in num_neighbors:
        starts = np.asarray(indptr[frontier], dtype=np.int64)
        degrees = np.asarray(indptr[frontier + 1], dtype=np.int64) - starts
        group = np.repeat(np.arange(frontier.shape[0]), degrees)
        offsets = np.repeat(np.cumsum(degrees) - degrees, degrees)
        within = np.arange(group.shape[0]) - offsets
        order = np.lexsort((rng.random(group.shape[0]), group))
        limit = degrees if fanout < 0 else np.minimum(degrees, fanout)
        chosen = order[within < limit[group]]
        src = np.asarray(indices[starts[group[chosen]] + within[chosen]], dtype=np.int64)
        src_parts.append(src)
        dst_parts.append(frontier[group[chosen]])
        frontier = _new_nodes(src, nodes)
        nodes = np.concatenate([nodes, frontier])
    src, dst = np.concatenate([np.empty(0, np.int64), *src_parts]), np.concatenate([np.empty(0, np.int64), *dst_parts])
    return SampledBlock(nodes, _local(nodes, src), _local(nodes, dst))


def _local(nodes: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Positions in ``nodes`` (distinct) of ``ids``."""
    sorter = np.argsort(nodes)
    return sorter[search(nodes[sorter], ids)]


def _in_edge_csr(edges: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(edges[1], kind="stable")
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(edges[1], minlength=num_nodes), out=indptr[1:])
    return indptr, edges[0][order]


class LinkNeighborLoader:
    r"""Batches of label edges with their sampled ``num_neighbors``-hop neighbourhoods, PyG's
    ``LinkNeighborLoader`` with its argument names (see the module description).

    Args:
        data: a ``HeteroData`` (the loader is then a
            :class:`~commgraph.pyg.hetero_loader.HeteroLinkNeighborLoader`, with its arguments), a
            ``Data`` (the training graph, e.g. ``train_data`` of :func:`~commgraph.pyg.edge_split`)
            or a part of it (:func:`~commgraph.pyg.partition`): a rank then loads its share of the
            label edges, those whose destination it owns.
        num_neighbors: the in-neighbours to sample per node at each hop (-1: all).
        edge_label_index: the label edges, global ids (default: ``data.edge_label_index``).
        edge_label: their labels (default: ones).
        neg_sampling_ratio: random non-edges per label edge in each batch, labelled 0.
        batch_size: label edges per batch.
        shuffle: a new order of the label edges each epoch.
        seed: the seed of the shuffles, the samples and the negatives (with the epoch and the rank).

    Yields:
        torch_geometric.data.Data: ``x``, ``edge_index`` (the sampled edges, batch ids), ``n_id``
        (global ids: the label edges' endpoints first), ``edge_label_index`` (batch ids),
        ``edge_label``, ``input_id`` (the batch's positions in ``edge_label_index``; -1 for negatives).

    Shapes:
        - **edge_label_index:** ``[2, B (1 + ratio)]``; **x:** ``[|n_id|, F]``

    Raises:
        BridgeError: no label edges, a bad fanout or ratio, node rows the set does not hold.
    """

    def __new__(cls, data, *args, **kwargs):
        from torch_geometric.data import HeteroData

        if isinstance(data, HeteroData):
            from commgraph.pyg.hetero_loader import HeteroLinkNeighborLoader

            return HeteroLinkNeighborLoader(data, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        data,
        num_neighbors: list[int],
        edge_label_index: torch.Tensor | None = None,
        edge_label: torch.Tensor | None = None,
        neg_sampling_ratio: float = 0.0,
        batch_size: int = 1,
        shuffle: bool = False,
        seed: int = 0,
    ):
        if not num_neighbors or any(not isinstance(k, int) or k == 0 or k < -1 for k in num_neighbors):
            raise BridgeError(f"num_neighbors must list a positive count (or -1: all) per layer, got {num_neighbors}")
        if neg_sampling_ratio < 0 or batch_size < 1:
            raise BridgeError(
                f"need neg_sampling_ratio >= 0 and batch_size >= 1, got {neg_sampling_ratio}, {batch_size}"
            )
        self.num_neighbors, self.batch_size, self.shuffle = list(num_neighbors), batch_size, shuffle
        self.neg_sampling_ratio, self.seed, self.epoch = neg_sampling_ratio, seed, 0
        self._graph(data)
        self._space = PairSpace(self.num_nodes, self.num_nodes)
        if edge_label_index is None:
            edge_label_index = getattr(data, "edge_label_index", None)
        if edge_label_index is None:
            raise BridgeError("pass edge_label_index (global ids): the edges to load")
        edges = check_edge_index(edge_label_index, self.num_nodes, "edge_label_index")
        labels = torch.ones(edges.shape[1]) if edge_label is None else edge_label
        if labels.shape[0] != edges.shape[1]:
            raise BridgeError(f"edge_label has {labels.shape[0]} entries for {edges.shape[1]} edges")
        self.input_id = np.flatnonzero(self._owned[edges[1]])
        self.edge_label_index, self.edge_label = edges, labels
        self._positives = _positive_keys(self._positive_edges(), self._space) if neg_sampling_ratio else None

    def _graph(self, data) -> None:
        """The in-edge CSR to sample, the node rows, and the nodes whose label edges this rank loads."""
        try:
            handle = handle_of(data)
        except BridgeError:
            handle = None
        if handle is None:
            self.num_nodes = int(data.num_nodes)
            self.indptr, self.indices = _in_edge_csr(check_edge_index(data.edge_index, self.num_nodes), self.num_nodes)
            if not isinstance(getattr(data, "x", None), torch.Tensor):
                raise BridgeError("the Data has no node features x to load")
            self._rows, self._owned = (lambda ids: data.x[torch.from_numpy(ids)]), np.ones(self.num_nodes, bool)
            return
        self.indptr, self.indices = handle.pset.in_edges()
        self.num_nodes = int(self.indptr.shape[0]) - 1
        self._owned = _owned_mask(data, self.num_nodes)
        if handle.part.features is None:
            raise BridgeError("the partition set holds no node features: partition a Data with a float x")
        self._rows = lambda ids: torch.from_numpy(np.asarray(handle.pset.rows("features", ids)))

    def __len__(self) -> int:
        return math.ceil(self.input_id.shape[0] / self.batch_size)

    def __iter__(self):
        from commgraph.pyg.world import session

        rng = np.random.default_rng((self.seed, self.epoch, session().world.rank))
        self.epoch += 1
        ids = rng.permutation(self.input_id) if self.shuffle else self.input_id
        for start in range(0, ids.shape[0], self.batch_size):
            yield self._batch(ids[start : start + self.batch_size], rng)

    def _positive_edges(self) -> np.ndarray:
        counts = np.diff(np.asarray(self.indptr, dtype=np.int64))
        return np.stack([np.asarray(self.indices, dtype=np.int64), np.repeat(np.arange(self.num_nodes), counts)])

    def _batch(self, input_id: np.ndarray, rng: np.random.Generator):
        from torch_geometric.data import Data

        pairs, labels = self.edge_label_index[:, input_id], self.edge_label[torch.from_numpy(input_id)]
        negatives = int(round(self.neg_sampling_ratio * input_id.shape[0]))
        if negatives:
            keys = _draw_rounds(rng, self._space, self._positives, negatives)
            pairs = np.concatenate([pairs, np.stack([keys // self.num_nodes, keys % self.num_nodes])], 1)
            labels = torch.cat([labels, labels.new_zeros(negatives)])
        seeds = _new_nodes(pairs.reshape(-1), np.empty(0, np.int64))
        block = sample_neighbors(self.indptr, self.indices, seeds, self.num_neighbors, rng)
        out = Data(x=self._rows(block.n_id), edge_index=torch.from_numpy(np.stack([block.src, block.dst])))
        out.n_id = torch.from_numpy(block.n_id)
        out.edge_label_index = torch.from_numpy(_local(block.n_id, pairs))
        out.edge_label = labels
        out.input_id = torch.from_numpy(np.concatenate([input_id, np.full(negatives, -1)]))
        return out
