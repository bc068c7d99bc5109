r"""Mini-batches of label edges with their sampled neighbourhoods: :class:`LinkNeighborLoader`.

As PyG's ``LinkNeighborLoader`` (GraphSAGE's sampling, Hamilton et al., `"Inductive Representation
Learning on Large Graphs" <https://arxiv.org/abs/1706.02216>`_, 2017, around both endpoints of each
label edge): a batch holds ``batch_size`` label edges (and, with ``neg_sampling_ratio``, as many
times that many random non-edges), the nodes of their endpoints, and for each layer up to
``num_neighbors[l]`` in-neighbours of the previous hop's new nodes, drawn without replacement by
:class:`~commgraph.pyg.NeighborLoader`'s sampler (:func:`commgraph.pyg.loader.sample_hops`, the
samplers' keyed kernel), so the batch is laid out as PyG's: nodes hop by hop, edges hop by hop,
with their counts per hop for ``trim_to_layer``. Given
a part (:func:`~commgraph.pyg.partition`), a rank loads the label edges whose destination it owns
and samples the whole graph's in-edges from the partition set (the training graph: validation and
test edges are in no block); node rows come from the set's files.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from commgraph.errors import BridgeError
from commgraph.graph.core import loop_free_in_degrees
from commgraph.pyg.batching import local_positions, made_ahead, with_counts
from commgraph.pyg.data import check_edge_index, handle_of
from commgraph.pyg.hops import sample_hops
from commgraph.pyg.link import PairSpace, _draw_rounds, _owned_mask, first_distinct
from commgraph.pyg.trim import BatchCounts
from commgraph.sample.base import SamplingGraph, Scratch


def csr_keys(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The sorted distinct keys (:class:`~commgraph.pyg.link.PairSpace`'s ``src * N + dst``) of an
    in-edge CSR's edges, self loops left out: the positives a negative must avoid, made in place
    from the CSR (one key array and its sort; no ``[2, E]`` edge list)."""
    num_nodes = indptr.shape[0] - 1
    keys = np.asarray(indices, dtype=np.int64) * num_nodes
    keys += np.repeat(np.arange(num_nodes, dtype=np.int64), np.diff(np.asarray(indptr, dtype=np.int64)))
    keys = keys[keys % (num_nodes + 1) != 0]  # v * N + v = v (N + 1): the self loops
    keys.sort()
    keep = np.ones(keys.shape[0], dtype=bool)
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


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
        ``edge_label``, ``input_id`` (the batch's positions in ``edge_label_index``; -1 for negatives),
        ``num_sampled_nodes`` (the endpoints, then each hop's new nodes) and ``num_sampled_edges``
        (each hop's edges), PyG's counts for ``trim_to_layer``. Each batch is made by a thread of
        its own while the one before is in use (the same batches as made on time).

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
        self.yielded: BatchCounts | None = None
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
        self._positives = csr_keys(self.graph.indptr, self.graph.indices) if neg_sampling_ratio else None

    def _graph(self, data) -> None:
        """The in-edge CSR to sample, the node rows, and the nodes whose label edges this rank loads."""
        try:
            handle = handle_of(data)
        except BridgeError:
            handle = None
        self._scratch = Scratch()
        if handle is None:
            self.num_nodes = int(data.num_nodes)
            indptr, indices = _in_edge_csr(check_edge_index(data.edge_index, self.num_nodes), self.num_nodes)
            owner = np.zeros(self.num_nodes, dtype=np.int8)
            self.graph = SamplingGraph(indptr, indices, loop_free_in_degrees(indptr, indices), owner)
            if not isinstance(getattr(data, "x", None), torch.Tensor):
                raise BridgeError("the Data has no node features x to load")
            self._rows, self._owned = (lambda ids: data.x[torch.from_numpy(ids)]), np.ones(self.num_nodes, bool)
            return
        self.graph = SamplingGraph.from_partition(handle.pset, handle.part.index)
        self.num_nodes = self.graph.num_nodes
        self._owned = _owned_mask(data, self.num_nodes)
        if handle.part.features is None:
            raise BridgeError("the partition set holds no node features: partition a Data with a float x")
        self._rows = lambda ids: torch.from_numpy(np.asarray(handle.pset.rows("features", ids)))

    def __len__(self) -> int:
        return math.ceil(self.input_id.shape[0] / self.batch_size)

    def __iter__(self):
        return with_counts(self, self._batches())

    def _batches(self):
        """This epoch's batches (see :meth:`__iter__`)."""
        from commgraph.pyg.world import session

        rng = np.random.default_rng((self.seed, self.epoch, session().world.rank))
        self.epoch += 1
        ids = rng.permutation(self.input_id) if self.shuffle else self.input_id
        made = (
            self._batch(ids[start : start + self.batch_size], rng) for start in range(0, ids.shape[0], self.batch_size)
        )
        yield from made_ahead(made, "cg-link-loader")

    def _batch(self, input_id: np.ndarray, rng: np.random.Generator):
        from torch_geometric.data import Data

        pairs, labels = self.edge_label_index[:, input_id], self.edge_label[torch.from_numpy(input_id)]
        negatives = int(round(self.neg_sampling_ratio * input_id.shape[0]))
        if negatives:
            keys = _draw_rounds(rng, self._space, self._positives, negatives)
            pairs = np.concatenate([pairs, np.stack([keys // self.num_nodes, keys % self.num_nodes])], 1)
            labels = torch.cat([labels, labels.new_zeros(negatives)])
        seeds = first_distinct(pairs.reshape(-1))
        hops = sample_hops(self.graph, seeds, self.num_neighbors, rng, self._scratch)
        out = Data(x=self._rows(hops.nodes), edge_index=torch.from_numpy(hops.edges))
        out.n_id = torch.from_numpy(hops.nodes)
        out.edge_label_index = torch.from_numpy(local_positions(seeds, pairs))  # the seeds lead n_id
        out.edge_label = labels
        out.input_id = torch.from_numpy(np.concatenate([input_id, np.full(negatives, -1)]))
        out.num_sampled_nodes, out.num_sampled_edges = hops.num_nodes, hops.num_edges
        return out
