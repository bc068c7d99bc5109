r"""Sampled mini-batches of a heterogeneous graph in PyG's layout, each rank drawing its own seeds:
:class:`HeteroNeighborLoader`, what :class:`~commgraph.pyg.NeighborLoader` makes of a ``HeteroData``.

A batch is what ``torch_geometric.loader.NeighborLoader`` yields for a ``HeteroData``: per node type
``n_id`` (the input type's seeds first) and the batch's rows of every node attribute; per relation
``(src, rel, dst)`` an ``edge_index`` in batch-local ids of its two types, messages flowing from the
sampled neighbours towards the seeds, its ``e_id`` and every edge attribute. Hop :math:`h` visits
the relations in ``data.edge_types`` order; for relation :math:`r` it draws, for each node of type
``dst`` that hop :math:`h - 1` added (the seeds at hop 1), :math:`\min(k_{r,h}, d^r_v)` of its
:math:`d^r_v` in-neighbours over :math:`r` uniformly without replacement (all of them at
:math:`k_{r,h} = -1`): a node is expanded once, at the hop that added it, through every relation
into its type, and a type's new nodes are numbered in order of first draw, as pyg-lib's
``hetero_neighbor_sample`` numbers them.

Each relation samples on its own in-edge CSR (distinct edges sorted by target, then source) with
:func:`commgraph.sample.hetero.sample_hetero_hops`, one key per hop and relation drawn from the
loader's generator. Rows come from the ``HeteroData`` the loader was given.

With ``sampler="dgs"`` each relation's draws follow DGS's rule (thesis chapter 3, as
``commgraph train --model rgcn --sampler dgs`` draws them: :class:`~commgraph.sample.hetero.TypedDGS`):
a node draws fewer of its in-neighbours that another rank owns (node type :math:`t`'s node
:math:`v` is rank :math:`\lfloor vR / N_t \rfloor`'s, :func:`range_owners`) and keeps its own
(``dgs_rule``), each type's remote nodes weighted by its node mask, uniform until
:meth:`HeteroNeighborLoader.set_masks`. At fanout -1 it draws every neighbour, as ``"neighbor"`` does.
"""

from __future__ import annotations

import numpy as np
import torch

from commgraph.errors import BridgeError
from commgraph.pyg.batching import epoch_batches, local_positions, made_ahead, most_batches
from commgraph.pyg.hops import data_positions
from commgraph.pyg.link import PairSpace, _draw_rounds, _positive_keys, first_distinct
from commgraph.pyg.loader_checks import check_batching, check_num_neighbors, input_ids
from commgraph.pyg.world import session
from commgraph.sample.base import Scratch
from commgraph.sample.dgs import DGSMasks
from commgraph.sample.hetero import EdgeType, HeteroHops, Relation, TypedDGS, sample_hetero_hops
from commgraph.sample.options import EPSILON, RULES, relation_fanouts


def relation_of(edge_index: torch.Tensor, space: PairSpace, name: str) -> Relation:
    """The :class:`~commgraph.sample.hetero.Relation` of ``edge_index``'s distinct edges
    (:func:`~commgraph.pyg.batching.data_positions`: sorted by target, then source), its ids checked
    against ``space`` (:meth:`~commgraph.pyg.link.PairSpace.edges`); ``positions`` are the edges'
    in ``edge_index``."""
    edges = space.edges(edge_index, name)
    positions = data_positions(edge_index)
    indptr = np.zeros(space.num_dst + 1, dtype=np.int64)
    np.cumsum(np.bincount(edges[1][positions], minlength=space.num_dst), out=indptr[1:])
    return Relation(indptr, edges[0][positions], positions)


def node_counts(data) -> dict[str, int]:
    """Each node type's node count in the ``HeteroData`` ``data``, in ``data.node_types`` order.

    Raises:
        BridgeError: a type whose count PyG cannot tell (no node attribute, no ``num_nodes``).
    """
    counts = {t: data[t].num_nodes for t in data.node_types}
    unknown = [t for t, n in counts.items() if n is None]
    if unknown:
        raise BridgeError(f"node type {unknown[0]!r} has no node count: set data[{unknown[0]!r}].num_nodes")
    return {t: int(n) for t, n in counts.items()}


def relations_of(data, num_nodes: dict[str, int]) -> dict[EdgeType, Relation]:
    """Every relation of the ``HeteroData`` ``data`` (its types of ``num_nodes`` nodes), in
    ``data.edge_types`` order.

    Raises:
        BridgeError: a relation whose ``edge_index`` is not ``[2, E]`` ids inside its types' ranges.
    """
    return {
        (src, rel, dst): relation_of(
            data[src, rel, dst].edge_index,
            PairSpace(num_nodes[src], num_nodes[dst]),
            f"data[{(src, rel, dst)}].edge_index",
        )
        for src, rel, dst in data.edge_types
    }


def relation_key(key) -> EdgeType | None:
    """A relation's ``(src, rel, dst)`` from a fanout dict's key, a tuple or PyG's ``"src__rel__dst"``
    (None for anything else)."""
    parts = tuple(key.split("__")) if isinstance(key, str) else key
    if isinstance(parts, tuple) and len(parts) == 3 and all(isinstance(p, str) for p in parts):
        return parts
    return None


def check_fanouts(num_neighbors, edge_types: list[EdgeType]) -> dict[EdgeType, list[int]]:
    """``num_neighbors`` as one list of fanouts per relation: a list is every relation's; a dict
    (keys ``(src, rel, dst)`` or PyG's ``"src__rel__dst"``) names each relation once.

    Raises:
        BridgeError: a dict that misses a relation or names one the graph lacks, lists of
            different lengths, or a list that :func:`~commgraph.pyg.batching.check_num_neighbors`
            refuses.
    """
    if not isinstance(num_neighbors, dict):
        return relation_fanouts(check_num_neighbors(num_neighbors), edge_types)
    given = {relation_key(key) or key: check_num_neighbors(value) for key, value in num_neighbors.items()}
    return relation_fanouts(given, edge_types, "num_neighbors", BridgeError)


def hetero_input(input_nodes, num_nodes: dict[str, int]) -> tuple[str, np.ndarray]:
    """``input_nodes`` of a ``HeteroData`` (a node type, or ``(node_type, None | mask | ids)``) as
    the input type and its seeds' ids (:func:`~commgraph.pyg.batching.input_ids`).

    Raises:
        BridgeError: no node type named, a type the graph lacks, or bad ids or mask for it.
    """
    if isinstance(input_nodes, str):
        input_nodes = (input_nodes, None)
    if not isinstance(input_nodes, (tuple, list)) or len(input_nodes) != 2 or not isinstance(input_nodes[0], str):
        raise BridgeError(
            f"input_nodes of a HeteroData must name the seeds' node type: pass 'paper' or ('paper', "
            f"data['paper'].train_mask); got {type(input_nodes).__name__}"
        )
    node_type, values = input_nodes
    if node_type not in num_nodes:
        raise BridgeError(
            f"input_nodes names node type {node_type!r} but the graph has {', '.join(map(repr, num_nodes))}: "
            "name one of them"
        )
    return node_type, input_ids(values, num_nodes[node_type])


def hetero_batch(data, relations: dict[EdgeType, Relation], hops: HeteroHops):
    """The ``HeteroData`` of ``hops`` drawn from ``data``: per type ``n_id`` and every node attribute
    at those rows; per relation ``edge_index``, ``e_id`` and every edge attribute; the hop counts."""
    from torch_geometric.data import HeteroData

    batch = HeteroData()
    for node_type, n_id in hops.nodes.items():
        store, index = data[node_type], torch.from_numpy(n_id)
        for key, value in store.items():
            if key != "n_id" and isinstance(value, torch.Tensor) and store.is_node_attr(key):
                batch[node_type][key] = value[index.to(value.device)]
        batch[node_type].n_id = index
        batch[node_type].num_nodes = int(n_id.shape[0])
    for edge_type, relation in relations.items():
        store = data[edge_type]
        e_id = torch.from_numpy(relation.positions[hops.slots[edge_type]])
        for key, value in store.items():
            if (
                key not in ("edge_index", "edge_label_index", "edge_label")
                and isinstance(value, torch.Tensor)
                and store.is_edge_attr(key)
            ):
                batch[edge_type][key] = value[e_id.to(value.device)]
        batch[edge_type].edge_index = torch.from_numpy(hops.edges[edge_type])
        batch[edge_type].e_id = e_id
    batch.set_value_dict("num_sampled_nodes", hops.num_nodes)
    batch.set_value_dict("num_sampled_edges", hops.num_edges)
    return batch


def range_owners(num_nodes: dict[str, int], ranks: int) -> dict[str, np.ndarray]:
    r"""Each node type's owner of each node among ``ranks`` ranks: :math:`\lfloor vR / N_t \rfloor`
    (contiguous ranges of ids, as :func:`range_share` splits the seeds)."""
    return {t: np.arange(n, dtype=np.int64) * ranks // max(n, 1) for t, n in num_nodes.items()}


def range_share(ids: np.ndarray, num_nodes: int) -> np.ndarray:
    r"""The positions of the ``ids`` (of a node type of ``num_nodes`` nodes) that this rank takes:
    rank :math:`r` of :math:`R` takes :math:`v` with :math:`\lfloor vR / N \rfloor = r`."""
    world = session().world
    return np.flatnonzero(ids * world.size // max(num_nodes, 1) == world.rank)


class HeteroBatches:
    """What both heterogeneous loaders share: the graph's relations and their fanouts, and an
    epoch of ``len(self)`` batches of this rank's ``self.items`` positions (its own, then its first
    again: the same count on every rank), each made by ``self._batch(picked, rng)``, in a thread of
    its own while the one before is in use (:func:`~commgraph.pyg.batching.made_ahead`; DGS's on
    time)."""

    def _setup(self, data, num_neighbors, batch_size, shuffle: bool, seed: int, sampler: str, options: dict, dgs: dict):
        self.batch_size = check_batching(batch_size, sampler, options)
        self.data, self.shuffle, self.seed, self.epoch = data, shuffle, seed, 0
        world = session().world
        self.rank = world.rank
        self.num_nodes = node_counts(data)
        self.relations = relations_of(data, self.num_nodes)
        self.num_neighbors = check_fanouts(num_neighbors, list(self.relations))
        self._scratch = {t: Scratch() for t in self.num_nodes}
        self.dgs = TypedDGS(range_owners(self.num_nodes, world.size), self.rank, **dgs) if sampler == "dgs" else None

    def _count(self, items: int) -> None:
        """This rank has ``items`` to visit per epoch: the batch count of every rank, one all-reduce."""
        self.items, self.steps = items, most_batches(items, self.batch_size)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        rng = np.random.default_rng((self.seed, self.rank, self.epoch))
        self.epoch += 1
        made = (
            self._batch(picked, rng)
            for picked in epoch_batches(self.items, self.batch_size, self.steps, self.shuffle, rng)
        )
        # DGS draws by its masks of the moment, so its batches are made on time
        yield from made if self.dgs is not None else made_ahead(made, "cg-hetero-loader")

    def _sample(self, seeds: dict[str, np.ndarray], rng: np.random.Generator):
        """The batch (:func:`hetero_batch`) of the neighbourhoods of ``seeds``."""
        hops = sample_hetero_hops(
            self.relations, self.num_nodes, seeds, self.num_neighbors, rng, self._scratch, self.dgs
        )
        return hetero_batch(self.data, self.relations, hops)


class HeteroNeighborLoader(HeteroBatches):
    r"""PyG's ``torch_geometric.loader.NeighborLoader`` over a ``HeteroData`` for a job of ranks:
    each rank yields batches of its share of the input type's seeds, so the ranks split an epoch's
    work (see the module description for what a batch holds). Made by
    :class:`~commgraph.pyg.NeighborLoader` when its ``data`` is a ``HeteroData``; a one-process
    script's loop runs unchanged::

        for batch in loader:
            out = model(batch.x_dict, batch.edge_index_dict)["paper"][: batch["paper"].batch_size]

    Rank :math:`r` of :math:`R` owns the input type's nodes :math:`v` with
    :math:`\lfloor vR / N_t \rfloor = r` (contiguous ranges of ids). Every rank makes the same
    number of batches per epoch, ``len(loader)``, and visits its seeds as
    :class:`~commgraph.pyg.NeighborLoader` does (the order of ``input_nodes``, or with ``shuffle``
    an order drawn per rank and epoch from ``seed``; a rank short of seeds makes its first batches
    again).

    Args:
        data: the whole graph, a ``torch_geometric.data.HeteroData`` on every rank.
        num_neighbors: in-neighbours drawn per node at hop 1, hop 2, ... (``-1``: every one): one list
            for every relation, or a dict naming each relation (``(src, rel, dst)`` or
            ``"src__rel__dst"``) with lists of one length.
        batch_size: seeds per batch (the last batch of a rank may have fewer).
        input_nodes: the seeds of an epoch over all ranks: a node type (its every node) or
            ``(node_type, None | bool mask | ids)``.
        shuffle: visit each rank's seeds in a new random order every epoch.
        sampler: ``"neighbor"`` (uniform, as PyG's) or ``"dgs"`` (DGS's rule per relation, see the
            module description).
        seed: the seed of the per-rank, per-epoch generators (the same seed gives the same batches).
        epsilon: with ``"dgs"``, remote draws dropped per node as a share of the fanout, in [0, 1].
        dgs_rule: with ``"dgs"``, ``"keep-local"`` (every local in-neighbour) or ``"split"``.
        **options: ``num_workers``, ``persistent_workers``, ``pin_memory``, ``prefetch_factor``:
            accepted for PyG scripts' sake, without effect: batches are made in this process, each
            by a thread of its own while the one before is in use (DGS's on time).

    Attributes:
        input_type: the seeds' node type; **seeds:** this rank's seeds, in the order of
            ``input_nodes``.

    Shapes:
        A batch, per node type ``t``: **n_id** ``[n_t]`` and each node attribute ``[n_t, ...]``; per
        relation ``r``: **edge_index** ``[2, E_r]`` (int64; row 0 in ``r``'s source type's batch ids,
        row 1 in its target type's), **e_id** ``[E_r]`` (positions in ``data[r].edge_index``) and each
        edge attribute ``[E_r, ...]``; on the input type **batch_size**, **input_id**
        ``[batch_size]`` (positions in ``input_nodes``); **num_sampled_nodes** and
        **num_sampled_edges** per type and relation, as PyG's for ``trim_to_layer``.

    Raises:
        BridgeError: bad ``num_neighbors`` (a relation missed or unknown, lists of different
            lengths), ``input_nodes``, ``batch_size``, ``sampler`` or option, or an
            ``edge_index`` out of its types' ranges.
        SamplingError: DGS's ``epsilon`` or ``dgs_rule`` out of range.
    """

    def __init__(
        self,
        data,
        num_neighbors=(15, 10),
        batch_size: int = 1024,
        input_nodes=None,
        shuffle: bool = False,
        sampler: str = "neighbor",
        seed: int = 0,
        epsilon: float = EPSILON,
        dgs_rule: str = RULES[0],
        **options,
    ):
        dgs = {"epsilon": epsilon, "rule": dgs_rule}
        self._setup(data, num_neighbors, batch_size, shuffle, seed, sampler, options, dgs)
        self.input_type, ids = hetero_input(input_nodes, self.num_nodes)
        self.positions = range_share(ids, self.num_nodes[self.input_type])
        self.seeds = ids[self.positions]
        self._count(self.seeds.shape[0])

    def set_masks(self, masks: dict[str, DGSMasks]) -> None:
        """DGS's node masks for this rank (``sampler="dgs"``), one per node type, used from the next
        batch on (:meth:`~commgraph.sample.hetero.TypedDGS.set_masks`)."""
        if self.dgs is None:
            raise BridgeError("set_masks is DGS's: make the loader with sampler='dgs'")
        self.dgs.set_masks(masks)

    def _batch(self, picked: np.ndarray, rng: np.random.Generator):
        """The batch of seeds ``self.seeds[picked]``."""
        batch = self._sample({self.input_type: self.seeds[picked]}, rng)
        batch[self.input_type].input_id = torch.from_numpy(self.positions[picked])
        batch[self.input_type].batch_size = int(picked.shape[0])
        return batch


class HeteroLinkNeighborLoader(HeteroBatches):
    r"""PyG's ``torch_geometric.loader.LinkNeighborLoader`` over a ``HeteroData``: batches of one
    relation's label edges (and, with ``neg_sampling_ratio``, that many times as many random
    non-edges of it, :func:`~commgraph.pyg.negative_sampling`'s pairs) with the neighbourhoods of
    their endpoints, sampled as :class:`HeteroNeighborLoader` samples from its seeds (here the
    endpoints: the label edges' sources among their type's seeds, their targets among theirs). Made
    by :class:`~commgraph.pyg.LinkNeighborLoader` when its ``data`` is a ``HeteroData``.

    Rank :math:`r` of :math:`R` loads the label edges whose target :math:`v` has
    :math:`\lfloor vR / N_{dst} \rfloor = r`; every rank makes ``len(loader)`` batches, the most
    any rank's edges need, as :class:`HeteroNeighborLoader` does.

    Args:
        data: the training graph, a ``HeteroData`` on every rank (e.g. ``train_data`` of
            :func:`~commgraph.pyg.edge_split` with its ``edge_type``): its relations are sampled.
        num_neighbors: as :class:`HeteroNeighborLoader`'s: one list for every relation or one per
            relation.
        edge_label_index: the relation and its label edges: ``edge_type``, or ``(edge_type, ids)``
            with ``ids`` ``[2, P]`` (default: ``data[edge_type].edge_label_index``).
        edge_label: the label edges' labels (default: ones).
        neg_sampling_ratio: random non-edges of the relation per label edge in each batch, labelled 0.
        batch_size: label edges per batch.
        shuffle: a new order of each rank's label edges every epoch.
        seed: the seed of the shuffles, the samples and the negatives (with the rank and the epoch).

    Yields:
        torch_geometric.data.HeteroData: what :class:`HeteroNeighborLoader` yields (``n_id``,
        ``x``, ... per type; ``edge_index``, ``e_id`` per relation), the label edges' endpoints the
        first ``n_id`` of their types, and on ``edge_type``: ``edge_label_index`` (batch ids),
        ``edge_label`` and ``input_id`` (positions in ``edge_label_index``; -1 for negatives).

    Raises:
        BridgeError: no relation named or an unknown one, label edges out of their types' range,
            labels of another count, a bad fanout, ratio or ``batch_size``.
    """

    def __init__(
        self,
        data,
        num_neighbors,
        edge_label_index=None,
        edge_label: torch.Tensor | None = None,
        neg_sampling_ratio: float = 0.0,
        batch_size: int = 1,
        shuffle: bool = False,
        seed: int = 0,
    ):
        if (
            isinstance(neg_sampling_ratio, bool)
            or not isinstance(neg_sampling_ratio, (int, float))
            or neg_sampling_ratio < 0
        ):
            raise BridgeError(f"neg_sampling_ratio must be a number >= 0, got {neg_sampling_ratio!r}")
        self._setup(data, num_neighbors, batch_size, shuffle, seed, "neighbor", {}, {})
        self.neg_sampling_ratio = float(neg_sampling_ratio)
        self.edge_type, ids = _label_edges(data, edge_label_index)
        src, _, dst = self.edge_type
        self.space = PairSpace(self.num_nodes[src], self.num_nodes[dst], loops=src != dst)
        self.edge_label_index = self.space.edges(ids, "edge_label_index")
        self.edge_label = torch.ones(self.edge_label_index.shape[1]) if edge_label is None else edge_label
        if self.edge_label.shape[0] != self.edge_label_index.shape[1]:
            raise BridgeError(
                f"edge_label has {self.edge_label.shape[0]} entries for {self.edge_label_index.shape[1]} edges"
            )
        self.input_id = range_share(self.edge_label_index[1], self.space.num_dst)
        self._positives = _positive_keys(data[self.edge_type].edge_index, self.space)
        self._count(self.input_id.shape[0])

    def _batch(self, picked: np.ndarray, rng: np.random.Generator):
        """The batch of label edges ``self.input_id[picked]`` and its negatives."""
        input_id = self.input_id[picked]
        pairs, labels = self.edge_label_index[:, input_id], self.edge_label[torch.from_numpy(input_id)]
        negatives = int(round(self.neg_sampling_ratio * input_id.shape[0]))
        if negatives:
            drawn = self.space.pairs(_draw_rounds(rng, self.space, self._positives, negatives))
            pairs = np.concatenate([pairs, drawn], 1)
            labels = torch.cat([labels, labels.new_zeros(negatives)])
        src, _, dst = self.edge_type
        if src == dst:
            seeds = {src: first_distinct(pairs.reshape(-1))}
        else:
            seeds = {src: first_distinct(pairs[0]), dst: first_distinct(pairs[1])}
        batch = self._sample(seeds, rng)
        store = batch[self.edge_type]
        store.edge_label_index = torch.from_numpy(
            np.stack([local_positions(seeds[src], pairs[0]), local_positions(seeds[dst], pairs[1])])
        )
        store.edge_label = labels
        store.input_id = torch.from_numpy(np.concatenate([input_id, np.full(negatives, -1)]))
        return batch


def _label_edges(data, edge_label_index) -> tuple[EdgeType, torch.Tensor]:
    """The relation and label edges ``edge_label_index`` names (see :class:`HeteroLinkNeighborLoader`).

    Raises:
        BridgeError: no relation of ``data`` named, or no label edges given or stored.
    """
    if isinstance(edge_label_index, tuple) and len(edge_label_index) == 3:
        edge_label_index = (edge_label_index, None)
    edge_type = relation_key(edge_label_index[0]) if isinstance(edge_label_index, (tuple, list)) else None
    if edge_type is None or edge_type not in data.edge_types or len(edge_label_index) != 2:
        raise BridgeError(
            "edge_label_index of a HeteroData must name a relation: pass edge_type or (edge_type, ids), edge_type "
            f"one of {data.edge_types}"
        )
    ids = edge_label_index[1]
    if ids is None:
        ids = getattr(data[edge_type], "edge_label_index", None)
    if ids is None:
        raise BridgeError(f"pass edge_label_index=({edge_type}, ids): data[{edge_type}] holds no edge_label_index")
    return edge_type, ids
