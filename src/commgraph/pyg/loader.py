r"""Sampled mini-batches in PyG's layout, each rank drawing its own seeds: :class:`NeighborLoader`.

A batch is what ``torch_geometric.loader.NeighborLoader`` yields: the seeds first in ``n_id``, then
the nodes each hop adds, ``edge_index`` in batch-local ids with messages flowing from the sampled
neighbours towards the seeds, and the batch's rows of every node attribute (given the whole
``Data``, also ``e_id`` and every edge attribute). Hop :math:`h` draws, for each node the previous
hop added (the seeds at hop 1), :math:`\min(k_h, d_v)` of its :math:`d_v` in-neighbours uniformly
without replacement: GraphSAGE's sampling with PyG's semantics, where a node is expanded once, at
the hop that added it (the blocks of :class:`~commgraph.sample.NeighborSampler` expand every node
of a hop's table again, DGL's semantics, so they are not reused whole).

The draws come from the whole graph's in-edges, the partition set's ``structure/`` files mapped
read-only (every rank of a machine shares one copy), through the samplers' keyed kernel
(:func:`commgraph.sample.keyed.keyed_slots`) and relabelling (:func:`commgraph.sample.base.relabel`).
Node rows come from the ``Data`` the loader was given when it holds the whole graph, else from the
set's parts: this rank's own rows, and the rows of the parts of this machine's ranks from their
mapped files. Where the job spans machines, the rows of ``x`` that another machine's ranks own
come from their owners through the feature fetch of ``commgraph train --sampler``
(:class:`~commgraph.train.fetch.FeatureFetch`: one all-to-all of the ids a step asks for, then
the rows by the batch's fetch plan), as they do for every rank with ``peer_rows="network"``.

With ``first_layer="owner"`` (P3, Gandhi and Iyer, OSDI'21; ``commgraph train --first-layer
owner``) a network row of ``x`` is not sent: its owner computes the model's first layer
transform of it, ``W x_u`` (``hidden`` wide, where the feature row is ``F`` wide), when the model
(wrapped by :func:`~commgraph.pyg.sampled`) runs that layer, and receives its gradient
back in the backward pass (:class:`~commgraph.train.owner_fetch.OwnerFetch`).

With ``sampler="dgs"`` the hops are drawn by DGS's sampler (:class:`~commgraph.sample.dgs.DGSSampler`,
thesis chapter 3, as ``commgraph train --sampler dgs`` draws them) once it has masks, from a file
``commgraph train --dgs-masks-out`` wrote or from :meth:`NeighborLoader.set_masks`: a remote node
(one another rank owns) whose node-mask probability is 0 is never drawn, a node draws
:math:`r_v` of its remote in-neighbours with probability proportional to the node mask and keeps
its local ones (``dgs_rule``), and a remote node's row of ``x`` holds only the
:math:`\lceil N_f F \rceil` columns of highest feature mask, the others zero. Until then it draws
as ``"neighbor"`` does.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from commgraph.errors import BridgeError
from commgraph.graph.core import MASK_NAMES
from commgraph.pyg.batching import (
    check_batching,
    check_num_neighbors,
    data_positions,
    epoch_batches,
    input_ids,
    most_batches,
)
from commgraph.pyg.data import PartHandle, find_handle
from commgraph.pyg.entry import partition
from commgraph.pyg.world import session
from commgraph.runtime.features import FeatureStore
from commgraph.runtime.job import Job
from commgraph.sample.base import LayerSample, SampledBatch, SamplingGraph, Scratch, draw_seed, relabel
from commgraph.sample.dgs import DGSMasks, DGSSampler
from commgraph.sample.keyed import keyed_slots
from commgraph.sample.maskfile import load_masks
from commgraph.sample.options import EPSILON, FEATURE_RATE, RULES
from commgraph.train.config import PEER_ROWS
from commgraph.train.fetch import FeatureFetch, Fetched, Request
from commgraph.train.owner_fetch import OwnerFetch

# a part's node attributes and the set's arrays that hold them
SET_ROWS = {"x": "features", "y": "labels", **{mask: mask for mask in MASK_NAMES}}
FIRST_LAYERS = ("features", "owner")


def check_fetching(first_layer: str, peer_rows: str) -> None:
    """Raises:
    BridgeError: a ``first_layer`` or ``peer_rows`` the loader does not know."""
    if first_layer not in FIRST_LAYERS:
        raise BridgeError(f"first_layer must be one of {', '.join(FIRST_LAYERS)}; got {first_layer!r}")
    if peer_rows not in PEER_ROWS:
        raise BridgeError(f"peer_rows must be one of {', '.join(PEER_ROWS)}; got {peer_rows!r}")


@dataclass
class PendingRows:
    """An owner-computed batch (``first_layer="owner"``) until its first layer runs: its ``x`` (the
    network rows zero), what it asked of the owners, its table, and whether a forward used it."""

    x: torch.Tensor
    request: Request
    fetched: Fetched
    used: bool = False


@dataclass
class Hops:
    """A batch's draws (:func:`sample_hops`).

    Shapes:
        - **nodes:** ``[n]`` global ids: the seeds, then each hop's new nodes in order of first draw
        - **edges:** ``[2, E]`` positions in ``nodes``, sources then targets, hop after hop
        - **slots:** ``[E]`` each edge's position in the graph's CSR
        - **num_nodes:** the seeds, then the nodes each hop added (PyG's ``num_sampled_nodes``);
          **num_edges:** the edges of each hop (PyG's ``num_sampled_edges``)
    """

    nodes: np.ndarray
    edges: np.ndarray
    slots: np.ndarray
    num_nodes: list[int]
    num_edges: list[int]


def uniform_draw(graph: SamplingGraph):
    """``draw(rows, fanout, rng)`` for :func:`sample_hops`: uniform draws without replacement."""
    return lambda rows, fanout, rng: keyed_slots(graph.indptr, rows, rows, fanout, draw_seed(rng))


def sample_hops(
    graph: SamplingGraph,
    seeds: np.ndarray,
    num_neighbors: list[int],
    rng: np.random.Generator,
    scratch: Scratch,
    draw=None,
) -> Hops:
    """PyG's neighbour sampling from ``seeds`` (distinct ids): hop ``h`` draws ``num_neighbors[h]``
    in-neighbours (all with -1) of each node the previous hop added, by ``draw(rows, fanout, rng)``
    (per-row counts and CSR positions; None: :func:`uniform_draw`)."""
    draw = draw or uniform_draw(graph)
    nodes, sources, targets, slots, added = seeds, [], [], [], [int(seeds.shape[0])]
    for fanout in num_neighbors:
        start = nodes.shape[0] - added[-1]  # the previous hop's nodes: the last ones added
        frontier = nodes[start:]
        counts, drawn = draw(frontier, fanout, rng)
        per_node = np.zeros(nodes.shape[0], dtype=np.int64)
        per_node[start:] = counts
        hop = relabel(nodes, graph.indices[drawn].astype(np.int64), per_node, scratch, graph.num_nodes)
        sources.append(hop.edge_src)
        targets.append(hop.edge_dst)
        slots.append(drawn)
        added.append(int(hop.src.shape[0] - nodes.shape[0]))
        nodes = hop.src
    edges = np.stack([np.concatenate(sources), np.concatenate(targets)])
    return Hops(nodes, edges, np.concatenate(slots), added, [int(e.shape[0]) for e in sources])


class NeighborLoader:
    r"""PyG's ``torch_geometric.loader.NeighborLoader`` for a job of ranks: each rank yields batches
    of the seeds it owns, so the ranks split an epoch's work (see the module description for what
    a batch holds and where its rows come from). A one-process script's loop runs unchanged::

        for batch in loader:
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            loss = F.cross_entropy(out, batch.y[: batch.batch_size])

    with the model wrapped in ``torch.nn.parallel.DistributedDataParallel``.

    Every rank makes the same number of batches per epoch, ``len(loader)``: the most any rank's
    seeds need (one small all-reduce when the loader is made), so that a loop with a collective per
    step (DDP's gradient all-reduce) never waits for a rank that has stopped. A rank that owns fewer
    seeds makes its extra batches again from its own seeds, this epoch's first batches first (a
    rank that owns none of ``input_nodes`` yields empty batches, ``batch_size`` 0). Seeds are
    visited in the order of ``input_nodes`` (ascending for a mask), or, with ``shuffle``, in an
    order drawn per rank and epoch from ``seed``; the hops' draws also come from that generator.

    With ``num_neighbors=[-1]`` and ``input_nodes=None`` the loader is the layer-wise inference
    loader of PyG's ``examples/reddit.py`` (``subgraph_loader``): every rank yields every node, in
    id order, with all its in-neighbours, so that ``torch.cat`` of each batch's first
    ``batch_size`` rows is the next layer's input for the whole graph on every rank.

    Args:
        data: a ``torch_geometric.data.HeteroData`` (the loader is then a
            :class:`~commgraph.pyg.hetero_loader.HeteroNeighborLoader`, with its arguments), or the
            whole graph as a ``torch_geometric.data.Data`` (partitioned here with
            :func:`~commgraph.pyg.partition`, which every rank calls; batches take every node
            attribute of ``data``, indexed by ``n_id``, and every edge attribute, by ``e_id``), a
            part that :func:`~commgraph.pyg.partition` returned, or a partition set's directory
            (batches take ``x``, ``y`` and the masks the part holds, from the set's rows).
        num_neighbors: in-neighbours drawn per node at hop 1 (the seeds'), hop 2, ...; ``-1`` takes
            every one. One entry per ``MessagePassing`` layer of the model (the loader cannot check
            that).
        batch_size: seeds per batch (the last batch of a rank may have fewer).
        input_nodes: the seeds of an epoch over all ranks: None (every node), a bool mask over
            every node, or a tensor of global node ids; each rank takes those it owns (so a rank
            may pass its own: ``part.n_id[part.train_mask]`` for a part).
        shuffle: visit each rank's seeds in a new random order every epoch.
        sampler: ``"neighbor"`` (uniform, as PyG's) or ``"dgs"`` (DGS's, see the module description).
        seed: the seed of the per-rank, per-epoch generators.
        dgs_masks: with ``"dgs"``, a mask file of this graph's partition set (``commgraph train
            --sampler dgs --dgs-masks-out FILE``), this rank's masks used from the first batch.
        feature_rate: with ``"dgs"``, :math:`N_f`, the share of columns a remote row keeps, in (0, 1].
        epsilon: with ``"dgs"``, remote draws dropped per node as a share of the fanout, in [0, 1].
        dgs_rule: with ``"dgs"``, ``"keep-local"`` (every local in-neighbour) or ``"split"``.
        first_layer: ``"features"`` (a network row of ``x`` arrives as its features) or
            ``"owner"`` (its owner computes the model's first layer of it: wrap the model with
            :func:`~commgraph.pyg.sampled`; see the module description).
        peer_rows: ``"map"`` (rows the ranks of this machine own are read from their mapped
            files) or ``"network"`` (fetched from their owners, as if every rank were a machine).
        **options: ``num_workers``, ``persistent_workers``, ``pin_memory``, ``prefetch_factor``:
            accepted for PyG scripts' sake, without effect (batches are made in this process).

    Attributes:
        data: the ``data`` given (a part for a set's directory).
        seeds: this rank's seeds (global ids), in the order of ``input_nodes``.
        fetch: the feature fetch a batch's rows of ``x`` come through (None: every row is read
            here, from the whole ``Data`` or this machine's mapped files).

    Shapes:
        A batch: **n_id** ``[n]`` (global ids, the ``batch_size`` seeds first), **edge_index**
        ``[2, E]`` (int64, batch-local ids, row 0 sources, row 1 targets), **x** ``[n, F]``,
        **y** ``[n]``, **input_id** ``[batch_size]`` (the seeds' positions in ``input_nodes``);
        given the whole ``Data``, **e_id** ``[E]`` (the edges' positions in its ``edge_index``) and
        each edge attribute ``[E, ...]``; **num_sampled_nodes** (the seeds, then the nodes each hop
        added) and **num_sampled_edges** (each hop's edges), lists of ints, as PyG's for
        ``trim_to_layer``.

    Raises:
        BridgeError: bad ``num_neighbors``, ``batch_size``, ``input_nodes``, ``sampler``,
            ``first_layer`` or ``peer_rows``, an option the loader does not know, DGS's options
            without ``sampler="dgs"``, or ``data`` of another kind.
        SamplingError: DGS's options out of range, or a mask file made for another partition set.
    """

    def __new__(cls, data, *args, **kwargs):
        from torch_geometric.data import HeteroData

        if isinstance(data, HeteroData):
            from commgraph.pyg.hetero_loader import HeteroNeighborLoader

            return HeteroNeighborLoader(data, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        data,
        num_neighbors=(15, 10),
        batch_size: int = 1024,
        input_nodes=None,
        shuffle: bool = False,
        sampler: str = "neighbor",
        seed: int = 0,
        dgs_masks: str | os.PathLike | None = None,
        feature_rate: float = FEATURE_RATE,
        epsilon: float = EPSILON,
        dgs_rule: str = RULES[0],
        first_layer: str = "features",
        peer_rows: str = "map",
        **options,
    ):
        self.batch_size = check_batching(batch_size, sampler, options)
        check_fetching(first_layer, peer_rows)
        if sampler != "dgs" and dgs_masks is not None:
            raise BridgeError(f"dgs_masks is DGS's: pass sampler='dgs' with it (sampler is {sampler!r})")
        self.num_neighbors = check_num_neighbors(num_neighbors)
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.rank = session().world.rank
        self.data, self.handle, self._whole = _source(data)
        self.graph = SamplingGraph.from_partition(self.handle.pset, self.rank)
        self._scratch = Scratch()
        ids = input_ids(input_nodes, self.graph.num_nodes)
        if input_nodes is None and self.num_neighbors == [-1]:
            self.positions = np.arange(ids.shape[0])
            self.steps = math.ceil(ids.shape[0] / batch_size)
        else:
            self.positions = np.flatnonzero(self.graph.owner[ids] == self.rank)
            self.steps = most_batches(self.positions.shape[0], self.batch_size)
        self.seeds = ids[self.positions]
        self.first_layer, self.local_bytes = first_layer, 0
        self.pending: PendingRows | None = None
        self.machine, self.fetch = self._feature_fetch(peer_rows)
        self.dgs = None
        if sampler == "dgs":
            self.dgs = DGSSampler(
                self.graph, self.num_neighbors, feature_rate=feature_rate, epsilon=epsilon, rule=dgs_rule
            )
            if dgs_masks is not None:
                width = self.data.x.shape[1] if self._whole else self.handle.part.features.shape[1]
                self.set_masks(load_masks(dgs_masks, self.handle.pset, width)[self.rank])

    def _feature_fetch(self, peer_rows: str) -> tuple[np.ndarray | None, FeatureFetch | None]:
        """The ranks of this machine when the job spans machines (None: every rank is here), and
        the fetch of ``x``'s rows when they do not all come from the loader's ``data`` and this
        machine's files (a collective: every rank makes its loader)."""
        world = session().world
        if world.size == 1:
            return None, None
        job = Job(world, self.handle.pset)
        machine = job.machine_ranks()
        machine = machine if machine.shape[0] < world.size else None
        if self.first_layer == "features" and peer_rows == "map" and (machine is None or self._whole):
            return machine, None
        features = self.handle.part.features
        if features is None:
            raise BridgeError(f"{self.handle.pset.path} holds no features to fetch: make the set from a graph with x")
        store = FeatureStore.create(np.asarray(features), job.device)
        if self.first_layer == "owner":
            return machine, OwnerFetch(job, store, self.graph, None, peer_rows)
        return machine, FeatureFetch(job, store, self.graph, peer_rows)

    @property
    def bytes(self) -> dict[str, int]:
        """Bytes this rank sent for its batches' rows, by what they carried (``requests``: ids;
        ``features``: feature rows; with ``first_layer="owner"``, ``activations`` and
        ``activation_grads``: first-layer rows and their gradients), and ``local``: bytes read
        from this machine's other parts' files; empty when no row goes through the fetch."""
        if self.fetch is None:
            return {}
        return {**self.fetch.comm.bytes, "local": self.local_bytes}

    def set_masks(self, masks: DGSMasks) -> None:
        """DGS's masks for this rank (``sampler="dgs"``), used from the next batch on."""
        if self.dgs is None:
            raise BridgeError("set_masks is DGS's: make the loader with sampler='dgs'")
        self.dgs.set_masks(masks)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        rng = np.random.default_rng((self.seed, self.rank, self.epoch))
        self.epoch += 1
        for picked in epoch_batches(self.seeds.shape[0], self.batch_size, self.steps, self.shuffle, rng):
            yield self._batch(picked, rng)

    def _batch(self, picked: np.ndarray, rng: np.random.Generator):
        """The batch of seeds ``self.seeds[picked]``."""
        from torch_geometric.data import Data

        seeds = self.seeds[picked]
        masks = None if self.dgs is None else self.dgs.masks
        draw = None if masks is None else lambda rows, fanout, rng: self.dgs.draw(rows, fanout, rng, masks)
        hops = sample_hops(self.graph, seeds, self.num_neighbors, rng, self._scratch, draw)
        n_id = hops.nodes
        batch = Data(edge_index=torch.from_numpy(hops.edges), num_nodes=n_id.shape[0])
        for key, value in self._rows(n_id):
            batch[key] = value
        if self.fetch is not None:
            batch.x = self._fetched(
                seeds, hops, None if masks is None else masks.feature_columns(self.dgs.feature_rate)
            )
        elif masks is not None:
            self._cut_remote_columns(batch, n_id, masks)
        if self._whole:
            e_id = torch.from_numpy(self._data_positions[hops.slots])
            for key, value in self.data.items():
                if key != "edge_index" and isinstance(value, torch.Tensor) and self.data.is_edge_attr(key):
                    batch[key] = value[e_id.to(value.device)]
            batch.e_id = e_id
        batch.n_id = torch.from_numpy(n_id)
        batch.input_id = torch.from_numpy(self.positions[picked])
        batch.batch_size = int(seeds.shape[0])
        batch.num_sampled_nodes, batch.num_sampled_edges = hops.num_nodes, hops.num_edges
        return batch

    def _fetched(self, seeds: np.ndarray, hops: Hops, columns: np.ndarray | None) -> torch.Tensor:
        """The batch's ``x`` through the feature fetch (a collective), remote rows cut to
        ``columns`` (None: all); with ``first_layer="owner"`` its network rows zero until the
        model's first layer receives their owners' transforms (:attr:`pending`)."""
        n_id = hops.nodes
        num_dst = n_id.shape[0] - hops.num_nodes[-1]  # the last hop's nodes feed no layer's kept rows
        layer = LayerSample(n_id[:num_dst], n_id, hops.edges[0], hops.edges[1])
        batch = SampledBatch(seeds, [layer], self.graph.is_remote(n_id), columns)
        if self.first_layer == "features":
            fetched = self.fetch(batch)
        else:
            if self.fetch.model is None:
                raise BridgeError(
                    "first_layer='owner': the owners compute the model's first layer, so wrap the model before the "
                    "first batch: model = cg.sampled(model, loader)"
                )
            request = self.fetch.request(batch)
            fetched = self.fetch.table(request, batch, self.fetch.device, None)
        self.local_bytes += fetched.local_bytes
        x = fetched.x
        if self.first_layer == "owner":
            self.pending = PendingRows(x, request, fetched)
        return x

    def _cut_remote_columns(self, batch, n_id: np.ndarray, masks: DGSMasks) -> None:
        """Zero the columns of the remote rows of ``batch.x`` outside DGS's feature columns."""
        dropped = np.setdiff1d(np.arange(batch.x.shape[1]), masks.feature_columns(self.dgs.feature_rate))
        remote = np.flatnonzero(self.graph.is_remote(n_id))
        if dropped.size and remote.size:
            batch.x[torch.from_numpy(remote)[:, None], torch.from_numpy(dropped)] = 0

    @cached_property
    def _data_positions(self) -> np.ndarray:
        """:func:`data_positions` of the whole ``Data`` given, made on first use."""
        return data_positions(self.data.edge_index)

    def _rows(self, n_id: np.ndarray):
        """``(name, rows)`` of each node attribute of the batch's nodes ``n_id``: from the whole
        ``Data`` when the loader has it, else from the set's parts."""
        if self._whole:
            index = torch.from_numpy(n_id)
            for key, value in self.data.items():
                if key != "n_id" and isinstance(value, torch.Tensor) and self.data.is_node_attr(key):
                    yield key, value[index.to(value.device)]
            return
        part = self.handle.part
        for key, name in SET_ROWS.items():
            values = getattr(part, name)
            if key in self.data and values is not None and not (key == "x" and self.fetch is not None):
                rows = self._machine_rows(name, n_id)
                yield key, torch.from_numpy(rows.astype(np.int64) if key == "y" else rows)

    def _machine_rows(self, name: str, n_id: np.ndarray) -> np.ndarray:
        """The set's ``name`` rows of ``n_id`` read from this machine's parts; rows of other
        machines' nodes (only ``x`` is fetched) are -1 (labels) or 0 (masks)."""
        pset = self.handle.pset
        if self.machine is None:
            return pset.rows(name, n_id)
        here = np.isin(self.graph.owner[n_id], self.machine)
        rows = pset.rows(name, n_id[here])
        out = np.full((n_id.shape[0], *rows.shape[1:]), -1 if name == "labels" else 0, dtype=rows.dtype)
        out[here] = rows
        return out


def _source(data) -> tuple[object, PartHandle, bool]:
    """The loader's ``data``, its part, and whether ``data`` is the whole graph (see
    :class:`NeighborLoader`'s ``data``)."""
    from torch_geometric.data import Data

    handle = find_handle(data)
    if handle is not None:
        return data, handle, False
    if isinstance(data, (str, os.PathLike)):
        part = partition(data)
        return part, find_handle(part), False
    if isinstance(data, Data):
        return data, find_handle(partition(data)), True
    raise BridgeError(
        "cg.NeighborLoader takes a torch_geometric Data or HeteroData, a part from cg.partition or a partition "
        f"set's path, got {type(data).__name__}"
    )
