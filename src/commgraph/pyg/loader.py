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
(:func:`commgraph.sample.keyed.keyed_slots`) and relabelling (:func:`commgraph.sample.base.relabel`);
or, with ``structure="partitioned"`` (the default when the job spans machines, as for ``commgraph
train --structure``), from the in-edges of this machine's parts only, a hop's nodes that other
machines own drawn by their owners with the same key
(:class:`~commgraph.sample.partitioned.PartitionedGraph`): the same batches, and no machine maps
the whole graph's CSR.
Node rows come from the ``Data`` the loader was given when it holds the whole graph, else from the
set's parts: this rank's own rows, and the rows of the parts of this machine's ranks from their
mapped files. Where the job spans machines, the rows of ``x`` that another machine's ranks own
come from their owners through the feature fetch of ``commgraph train --sampler``
(:class:`~commgraph.train.fetch.FeatureFetch`: one all-to-all of the ids a step asks for, then
the rows by the batch's fetch plan), as they do for every rank with ``peer_rows="network"``; so do those
nodes' rows of ``y`` and the masks, 4 bytes a column, asked by the same request (no rank reads
another machine's part).

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
from commgraph.partition.store import RowPlaces, owned_positions
from commgraph.plan.memory import JobShape, MemoryEstimate
from commgraph.pyg.batching import epoch_batches, made_ahead, most_batches, with_counts
from commgraph.pyg.data import PartHandle, find_handle
from commgraph.pyg.entry import partition
from commgraph.pyg.hops import Hops, data_positions, sample_hops, with_sources
from commgraph.pyg.loader_checks import (
    budget_bytes,
    budget_estimate,
    check_batching,
    check_fetching,
    check_num_neighbors,
    check_structure,
    input_ids,
)
from commgraph.pyg.trim import BatchCounts
from commgraph.pyg.world import session
from commgraph.runtime.feature_cache import CacheCounts
from commgraph.runtime.features import FeatureStore
from commgraph.runtime.job import Job
from commgraph.runtime.traffic import Traffic, global_traffic
from commgraph.sample.base import LayerSample, SampledBatch, SamplingGraph, Scratch
from commgraph.sample.dgs import DGSMasks, DGSSampler
from commgraph.sample.maskfile import load_masks
from commgraph.sample.options import EPSILON, FEATURE_RATE, RULES
from commgraph.sample.partitioned import PartitionedGraph
from commgraph.train.config import ModelOptions
from commgraph.train.fetch import FeatureFetch, Fetched, Request
from commgraph.train.minibatch import sampling_graph
from commgraph.train.owner_fetch import OwnerFetch

# a part's node attributes and the set's arrays that hold them
SET_ROWS = {"x": "features", "y": "labels", **{mask: mask for mask in MASK_NAMES}}
NODE_KEYS = ("y", *MASK_NAMES)  # what a batch takes from other machines beside x (label_fetch)
EXACT_FLOAT32 = 2**24  # integers of smaller magnitude are exact in float32


@dataclass
class PendingRows:
    """An owner-computed batch (``first_layer="owner"``) until its first layer runs: its ``x`` (the
    network rows zero), what it asked of the owners, its table, and whether a forward used it."""

    x: torch.Tensor
    request: Request
    fetched: Fetched
    used: bool = False


@dataclass
class NodeRows:
    """A batch's rows of ``y`` and the masks that crossed the network: ``rows[i]`` (one float32
    column per :attr:`NeighborLoader.node_keys` entry) is the batch node at position ``at[i]``."""

    at: np.ndarray
    rows: np.ndarray


def node_table(part, keys: list[str]) -> np.ndarray:
    """A part's owned rows of ``keys`` (``y`` and masks, :data:`SET_ROWS`'s names) as float32
    columns, which hold every label exactly.

    Raises:
        BridgeError: a label of magnitude ``2**24`` or more (not exact in float32).
    """
    columns = [np.asarray(getattr(part, SET_ROWS[key])) for key in keys]
    labels = columns[0] if keys[0] == "y" else np.zeros(0)
    if labels.size and np.abs(labels).max() >= EXACT_FLOAT32:
        raise BridgeError(
            f"labels reach {int(np.abs(labels).max())}, beyond the 2**24 a fetched float32 row holds exactly: "
            "number the classes from 0"
        )
    return np.stack(columns, axis=1).astype(np.float32)


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
        structure: where the hops' in-edges come from, as ``commgraph train --structure`` names
            it: ``"replicated"`` (the set's whole ``structure/``, mapped once per machine) or
            ``"partitioned"`` (this machine's parts; other machines' nodes drawn by their owners;
            ``sampler="neighbor"`` and a part or a set's path only). None: partitioned when the
            job spans machines and the loader samples a part with ``"neighbor"``, else replicated.
        memory_budget: bytes (or a size such as ``"8G"``) the machine's whole job may hold, page
            cache included, as ``commgraph train --memory-budget`` (None: the budget of ``commgraph
            run --memory-budget``, else none). A part or a set's path only: this rank's rows of
            ``x`` are read from its part's file through a cache of its hottest rows (by degree),
            sized by the job's memory estimate with ``train``'s default hidden width; the values,
            and so the losses, are the uncapped run's bit for bit.
        **options: ``num_workers``, ``persistent_workers``, ``pin_memory``, ``prefetch_factor``:
            accepted for PyG scripts' sake, without effect: batches are made in this process, each
            by a thread of its own while the one before is in use where making it needs no
            collective and no DGS masks of the moment (the same batches either way).

    Attributes:
        data: the ``data`` given (a part for a set's directory).
        seeds: this rank's seeds (global ids), in the order of ``input_nodes``.
        fetch: the feature fetch a batch's rows of ``x`` come through (None: every row is read
            here, from the whole ``Data`` or this machine's mapped files).
        structure: ``"replicated"`` or ``"partitioned"``, as chosen.
        estimate: under a memory budget, the job's memory estimate that sized the cache (None: no budget).
        machine: the ranks of this machine when the job spans machines (None: every rank is here).
        node_keys: ``y`` and the masks the batches take from the set.
        label_fetch: the fetch of those rows that other machines own (None: all read here).
        yielded: the counts of the batch yielded last (None: none yet), which
            ``cg.sampled(model, loader, trim=True)`` trims the layers' calls by.

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
            ``first_layer``, ``peer_rows``, ``structure`` or ``memory_budget`` (below the job's
            minimum, or with the whole ``Data``), an option the loader does not know, DGS's options
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
        structure: str | None = None,
        memory_budget: int | str | None = None,
        **options,
    ):
        self.batch_size = check_batching(batch_size, sampler, options)
        check_fetching(first_layer, peer_rows)
        if sampler != "dgs" and dgs_masks is not None:
            raise BridgeError(f"dgs_masks is DGS's: pass sampler='dgs' with it (sampler is {sampler!r})")
        self.num_neighbors = check_num_neighbors(num_neighbors)
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        world = session().world
        self.rank = world.rank
        self.data, self.handle, self._whole = _source(data)
        check_structure(structure, sampler, self._whole)
        self.memory_budget = budget_bytes(memory_budget, self._whole)
        self.job = Job(world, self.handle.pset) if world.size > 1 or self.memory_budget is not None else None
        machine = np.zeros(1, np.int64) if world.size == 1 else self.job.machine_ranks()
        self.machine = machine if machine.shape[0] < world.size else None
        if structure is None:
            spans = self.machine is not None and sampler == "neighbor" and not self._whole
            structure = "partitioned" if spans else "replicated"
        self.structure = structure
        self.graph = self._sampling_graph()
        self.estimate = self._budget_estimate(machine.shape[0], peer_rows)
        if self.estimate is not None:
            self.graph.read_at_random()  # the structure is read from its files, not held
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
        self.yielded: BatchCounts | None = None
        self.fetch = self._feature_fetch(peer_rows)
        self.node_keys = [
            key for key in NODE_KEYS if key in self.data and getattr(self.handle.part, SET_ROWS[key]) is not None
        ]
        self.label_fetch = self._label_fetch(peer_rows)
        self.dgs = None
        if sampler == "dgs":
            self.dgs = DGSSampler(
                self.graph, self.num_neighbors, feature_rate=feature_rate, epsilon=epsilon, rule=dgs_rule
            )
            if dgs_masks is not None:
                width = self.data.x.shape[1] if self._whole else self.handle.part.features.shape[1]
                self.set_masks(load_masks(dgs_masks, self.handle.pset, width)[self.rank])

    def _sampling_graph(self) -> SamplingGraph | PartitionedGraph:
        """What the hops are drawn on, as :attr:`structure` says (a collective in a job of ranks)."""
        if self.job is not None and self.job.world.size > 1:
            return sampling_graph(self.job, self.structure)
        if self.structure == "partitioned":
            return PartitionedGraph.from_partition(self.handle.pset, self.rank, np.zeros(1, np.int64), None)
        return SamplingGraph.from_partition(self.handle.pset, self.rank)

    def _budget_estimate(self, machine_workers: int, peer_rows: str) -> MemoryEstimate | None:
        """Under a memory budget, the job's memory estimate, which sizes the feature cache: a
        sampled job of this loader's batches and ``train``'s default hidden width (None: no budget)."""
        if self.memory_budget is None:
            return None
        shape = JobShape(
            self.job.world.size,
            machine_workers,
            ModelOptions().hidden,
            len(self.num_neighbors),
            "neighbor",
            self.batch_size,
            tuple(self.num_neighbors),
            peer_rows,
            self.structure,
            memory_budget=self.memory_budget,
        )
        return budget_estimate(self.handle.pset, shape)

    def _feature_fetch(self, peer_rows: str) -> FeatureFetch | None:
        """The fetch of ``x``'s rows when they do not all come from the loader's ``data`` and this
        machine's files, or, under a memory budget, this rank's rows through the feature cache
        (a collective: every rank makes its loader)."""
        job = self.job
        if job is None or (
            self.estimate is None
            and self.first_layer == "features"
            and peer_rows == "map"
            and (self.machine is None or self._whole)
        ):
            return None
        part = self.handle.part
        if part.features is None:
            raise BridgeError(f"{self.handle.pset.path} holds no features to fetch: make the set from a graph with x")
        if self.estimate is None:
            store = FeatureStore.create(np.asarray(part.features), job.device)
        else:
            store = FeatureStore.on_disk(part.features, job.device, self.estimate.cache_bytes, np.asarray(part.degree))
        if self.first_layer == "owner" and job.world.size > 1:
            return OwnerFetch(job, store, self.graph, None, peer_rows)
        return FeatureFetch(job, store, self.graph, peer_rows)

    def _label_fetch(self, peer_rows: str) -> FeatureFetch | None:
        """The fetch of the rows of ``y`` and the masks (:attr:`node_keys`) that other machines'
        ranks own, asked with the features' request (None: every such row is read here)."""
        if self.machine is None or self._whole or not self.node_keys:
            return None
        store = FeatureStore.create(node_table(self.handle.part, self.node_keys), self.job.device)
        return FeatureFetch(self.job, store, self.graph, peer_rows)

    @property
    def bytes(self) -> dict[str, int]:
        """Bytes this rank sent for its batches' rows, by what they carried (``requests``: ids;
        ``features``: feature rows; ``labels``: rows of ``y`` and the masks, 4 bytes a
        column; with ``first_layer="owner"``, ``activations`` and ``activation_grads``: first-layer
        rows and their gradients), and ``local``: bytes read from this machine's other parts'
        files; empty when no row goes through the fetch."""
        if self.fetch is None:
            return {}
        return {**self.fetch.comm.bytes, "local": self.local_bytes}

    @property
    def traffic(self) -> Traffic:
        """:attr:`bytes` as named counters (:class:`~commgraph.runtime.traffic.Traffic`), which add
        and subtract."""
        if self.fetch is None:
            return Traffic()
        return self.fetch.comm.traffic + Traffic(local=self.local_bytes)

    def global_traffic(self) -> Traffic:
        """:attr:`traffic` summed over every rank in one all-reduce (a collective: every rank calls
        it; one rank alone: its own)."""
        return self.traffic if self.job is None else global_traffic(self.job.comm, self.traffic, 0)

    @property
    def cache(self) -> CacheCounts | None:
        """Under a memory budget, what the feature cache has served (``hits``) and read from the
        part's file (``misses``) so far; None without a budget."""
        store = None if self.fetch is None else self.fetch.store
        return None if store is None or store.cache is None else store.cache.counts_now()

    def set_masks(self, masks: DGSMasks) -> None:
        """DGS's masks for this rank (``sampler="dgs"``), used from the next batch on."""
        if self.dgs is None:
            raise BridgeError("set_masks is DGS's: make the loader with sampler='dgs'")
        self.dgs.set_masks(masks)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        return with_counts(self, self._batches())

    def _batches(self):
        """This epoch's batches (see :meth:`__iter__`)."""
        rng = np.random.default_rng((self.seed, self.rank, self.epoch))
        self.epoch += 1
        batches = epoch_batches(self.seeds.shape[0], self.batch_size, self.steps, self.shuffle, rng)
        if self.cache is not None and self.dgs is None:
            yield from self._read_ahead(batches, rng)
            return
        made = (self._batch(picked, self._draw(picked, rng)) for picked in batches)
        yield from made_ahead(made, "cg-neighbor-loader") if self._local_batches() else made

    def _local_batches(self) -> bool:
        """Whether a batch is made without a collective or DGS's masks of the moment, so the
        next one can be made in a thread of its own while the caller uses this one (the same
        batches either way)."""
        collective = (
            self.job is not None
            and self.job.world.size > 1
            and (self.fetch is not None or self.label_fetch is not None or isinstance(self.graph, PartitionedGraph))
        )
        return self.dgs is None and not collective

    def _read_ahead(self, batches, rng: np.random.Generator):
        """The batches, each drawn a batch early so that the feature cache's reader thread reads
        its rows of this rank from the part's file while the step before computes (the same draws,
        in the same order, as drawing each when it is made; DGS's follow its masks of the moment,
        so it draws on time)."""
        cache, owned = self.fetch.store.cache, np.asarray(self.handle.part.owned)
        upcoming = None
        for picked in [*batches, None]:
            current = upcoming
            if picked is not None:
                hops = self._draw(picked, rng)
                cache.prefetch(owned_positions(owned, hops.nodes[self.graph.owner[hops.nodes] == self.rank]))
                upcoming = picked, hops
            if current is not None:
                cache.advance()
                yield self._batch(*current)

    def _draw(self, picked: np.ndarray, rng: np.random.Generator) -> Hops:
        """The hops of the batch of seeds ``self.seeds[picked]`` (a collective with
        ``structure="partitioned"`` across machines)."""
        masks = None if self.dgs is None else self.dgs.masks
        draw = None if masks is None else with_sources(self.graph, lambda r, f, rng: self.dgs.draw(r, f, rng, masks))
        return sample_hops(self.graph, self.seeds[picked], self.num_neighbors, rng, self._scratch, draw)

    def _batch(self, picked: np.ndarray, hops: Hops):
        """The batch of seeds ``self.seeds[picked]`` drawn as ``hops``."""
        from torch_geometric.data import Data

        seeds = self.seeds[picked]
        masks = None if self.dgs is None else self.dgs.masks
        n_id = hops.nodes
        batch = Data(edge_index=torch.from_numpy(hops.edges), num_nodes=n_id.shape[0])
        far = None
        if self.fetch is not None:
            batch.x, far = self._fetched(
                seeds, hops, None if masks is None else masks.feature_columns(self.dgs.feature_rate)
            )
        for key, value in self._rows(n_id, far):
            batch[key] = value
        if self.fetch is None and masks is not None:
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

    def _fetched(
        self, seeds: np.ndarray, hops: Hops, columns: np.ndarray | None
    ) -> tuple[torch.Tensor, NodeRows | None]:
        """The batch's ``x`` through the feature fetch (a collective), remote rows cut to
        ``columns`` (None: all); with ``first_layer="owner"`` its network rows zero until the
        model's first layer receives their owners' transforms (:attr:`pending`). With them, the
        network rows of ``y`` and the masks, asked by the same request (None: read here)."""
        n_id = hops.nodes
        num_dst = n_id.shape[0] - hops.num_nodes[-1]  # the last hop's nodes feed no layer's kept rows
        layer = LayerSample(n_id[:num_dst], n_id, hops.edges[0], hops.edges[1])
        batch = SampledBatch(seeds, [layer], self.graph.is_remote(n_id), columns)
        if self.job.world.size == 1:  # every row this rank's, through its store's cache
            return self.fetch(batch).x, None
        if self.first_layer == "owner" and self.fetch.model is None:
            raise BridgeError(
                "first_layer='owner': the owners compute the model's first layer, so wrap the model before the "
                "first batch: model = cg.sampled(model, loader)"
            )
        request = self.fetch.request(batch)
        halo = self.fetch.network_rows(request) if self.first_layer == "features" else None
        fetched = self.fetch.table(request, batch, self.fetch.device, halo)
        self.local_bytes += fetched.local_bytes
        x = fetched.x
        if self.first_layer == "owner":
            self.pending = PendingRows(x, request, fetched)
        if self.label_fetch is None:
            return x, None
        return x, NodeRows(request.at, self.label_fetch.network_rows(request, label="labels").cpu().numpy())

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

    def _rows(self, n_id: np.ndarray, far: NodeRows | None):
        """``(name, rows)`` of each node attribute of the batch's nodes ``n_id``: from the whole
        ``Data`` when the loader has it, else from this machine's parts and, for ``y`` and the
        masks, ``far``'s rows from other machines."""
        if self._whole:
            index = torch.from_numpy(n_id)
            for key, value in self.data.items():
                if key != "n_id" and isinstance(value, torch.Tensor) and self.data.is_node_attr(key):
                    yield key, value[index.to(value.device)]
            return
        part, pset = self.handle.part, self.handle.pset
        here = None if self.machine is None else np.isin(self.graph.owner[n_id], self.machine)
        places = pset.locate(n_id if here is None else n_id[here])
        for key, name in SET_ROWS.items():
            values = getattr(part, name)
            if key in self.data and values is not None and not (key == "x" and self.fetch is not None):
                rows = self._machine_rows(name, n_id, here, places)
                if far is not None and key in self.node_keys:
                    rows[far.at] = far.rows[:, self.node_keys.index(key)].astype(rows.dtype)
                yield key, torch.from_numpy(rows.astype(np.int64) if key == "y" else rows)

    def _machine_rows(self, name: str, n_id: np.ndarray, here: np.ndarray | None, places: RowPlaces) -> np.ndarray:
        """The set's ``name`` rows of ``n_id`` read from this machine's parts (``here``: which of
        ``n_id`` they own, None: all; ``places``: where those lie); rows of other machines' nodes
        are -1 (labels) or 0 (masks), for :meth:`_rows` to fill."""
        pset = self.handle.pset
        if here is None:
            return pset.rows(name, n_id, places)
        rows = pset.rows(name, n_id[here], places)
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
