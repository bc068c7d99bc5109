r"""R-GCN's sampled training over a typed partition set: ``commgraph train --model rgcn --sampler
neighbor`` (or ``dgs``). What one worker does in an epoch of batches.

Each worker draws its seeds from its own training nodes of the target type (as
:mod:`commgraph.train.minibatch` splits them: every worker the same number of steps) and samples
them with the heterogeneous sampler the bridge's loaders use (:func:`~commgraph.sample.hetero.sample_hetero_hops`):
hop :math:`h` draws, for each node hop :math:`h - 1` added, :math:`\min(k_h, d^r_v)` of its
:math:`d^r_v` in-neighbours over every relation :math:`r` into its type (``--fanout``'s
:math:`k_h` per relation; -1 all of them), on every relation's in-edge CSR over typed ids
(:class:`~commgraph.sample.hetero.TypedRelations`, read from the set's parts, every worker the whole graph's, as
``--structure replicated`` maps it). With ``--sampler dgs`` each relation's draws follow DGS's rule
(:class:`~commgraph.sample.hetero.TypedDGS`, ``--epsilon`` and ``--dgs-rule``): the draws uniform
sampling would make of other workers' nodes move to the worker's own, so fewer input rows cross.

A batch's input rows are computed where their nodes are owned: the owner projects a node's
features, or reads its learnable embedding row (:meth:`~commgraph.nn.rgcn.TypedInput.rows`), and
sends the row hidden wide to the reader (:func:`~commgraph.runtime.owner.rows_to_readers`: the
ids asked ``requests``, the rows ``activations``); the backward pass brings each row's gradient
back to its owner (``activation_grads``), into the owner's projection, whose gradients the job's
all-reduce sums, or the owner's own embedding row, which no other worker holds.

The layers then compute, on each relation's sampled edges, what the hops need: layer :math:`l` of
:math:`L` the nodes the first :math:`L - l` hops reached (the seeds alone at the last layer, a chunk
of logits at a time: :func:`~commgraph.nn.rgcn.linear_cross_entropy`), each node type's a prefix of
its batch nodes. With every fanout -1 a seed's output is its full-graph output, so the loss of a
step over every training node equals the full-graph loss.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from commgraph.nn.rgcn import RGCN, RelationAdjacency, RelationBlock, linear_cross_entropy
from commgraph.partition.store import owned_positions
from commgraph.runtime.alltoall import MatchingAllToAll
from commgraph.runtime.job import Job
from commgraph.runtime.memory import release_free_memory
from commgraph.runtime.owner import rows_to_readers, settle
from commgraph.sample.base import Scratch
from commgraph.sample.hetero import EdgeType, HeteroHops, TypedDGS, TypedRelations, sample_hetero_hops
from commgraph.sample.options import relation_fanouts
from commgraph.train.config import TrainConfig
from commgraph.train.minibatch import TrainingState, epoch_steps, seed_batches
from commgraph.train.records import EpochStep
from commgraph.train.rgcn import TypedPart


@dataclass
class LayerTables:
    """Where layer ``l``'s rows lie in a batch (:func:`layer_tables`): each node type's rows of
    its table (``src``, a prefix of the type's batch nodes) and of its destinations (``dst``, a
    shorter prefix), and the table's row of each type's first node (``src_base``; ``dst_base`` in
    the destinations' rows)."""

    src: np.ndarray
    dst: np.ndarray

    @property
    def src_base(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.src)[:-1]])

    @property
    def dst_base(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.dst)[:-1]])


def layer_tables(hops: HeteroHops, node_types: list[str], layers: int) -> list[LayerTables]:
    """Each layer's rows of each node type: layer ``l`` computes the nodes of hops ``0..L-1-l``
    from a table of those of hops ``0..L-l`` (layer 0: every batch node)."""
    added = np.array([hops.num_nodes[t] for t in node_types], dtype=np.int64)  # [types, hops + 1]
    reached = np.cumsum(added, axis=1)  # nodes of hops 0..h
    return [LayerTables(reached[:, layers - l], reached[:, layers - 1 - l]) for l in range(layers)]


def layer_block(
    hops: HeteroHops, relation_types: dict[EdgeType, tuple[int, int]], tables: LayerTables, hops_in: int
) -> RelationBlock:
    """Layer ``l``'s :class:`~commgraph.nn.rgcn.RelationBlock`: each relation's edges of the first
    ``hops_in`` hops (those into the layer's destinations), its columns the table's rows, its rows
    the destination type's among the destinations. Each hop's edges come by destination, the hops
    in order, so each relation's destinations ascend."""
    num_src, src_base, dst_base = int(tables.src.sum()), tables.src_base, tables.dst_base
    relations = []
    for edge_type, (s, d) in relation_types.items():
        edges = int(sum(hops.num_edges[edge_type][:hops_in]))
        start, rows = int(dst_base[d]), int(tables.dst[d])
        if edges == 0 or rows == 0:
            relations.append(RelationAdjacency(start))
            continue
        src, dst = hops.edges[edge_type][:, :edges]
        relations.append(RelationAdjacency.of(start, dst, src + src_base[s], rows, num_src))
    return RelationBlock(num_src, int(tables.dst.sum()), relations)


def destination_rows(x: torch.Tensor, tables: LayerTables) -> torch.Tensor:
    """The destinations' own rows of a layer's table ``x``: each type's prefix of its rows."""
    return torch.cat([x[int(b) : int(b) + int(n)] for b, n in zip(tables.src_base, tables.dst, strict=True)])


class RGCNSampledEpochs:
    """A worker's epochs of sampled R-GCN batches (see the module's description): seeds, sampling,
    the input rows from their owners, the step.

    Args:
        job: the worker's job (its typed part, communicator).
        config: the run's options (``--fanout``, ``--batch-size``, ``--steps-per-epoch``, the seed).
        state: the model, optimiser and gradient sum each step updates.
        typed: the worker's typed part (its features, its types' owned rows).
    """

    def __init__(self, job: Job, config: TrainConfig, state: TrainingState, typed: TypedPart):
        part, world = job.part, job.world
        self.comm, self.world, self.device, self.training, self.config = job.comm, world, job.device, state, config
        self.graph = TypedRelations.read(job.pset)
        self.typed = typed
        self.owner = job.pset.structure("owner")
        self.owned = np.asarray(part.owned, dtype=np.int64)
        self.features = [None if x is None else torch.from_numpy(x).to(self.device) for x in typed.features]
        target_rows = typed.target_rows
        train = np.asarray(part.train_mask, dtype=bool)[target_rows]
        self.target = self.graph.node_types[typed.target]
        self.train = typed.owned_ids[typed.target][train]  # typed ids of the worker's training seeds
        labels = np.array(part.labels[target_rows], dtype=np.int64)
        self.labels = np.full(int(self.graph.num_nodes[self.target]), -1, dtype=np.int64)
        self.labels[typed.owned_ids[typed.target]] = labels  # the worker's seeds' labels, by typed id
        types = self.graph.node_types
        # each relation's source and destination types, in the set's relation order
        self.relation_types = {r: (types.index(r[0]), types.index(r[2])) for r in self.graph.relations}
        self.fanouts = relation_fanouts(config.sampling.fanouts, list(self.graph.relations))
        self.dgs = self._dgs(config) if config.sampling.sampler == "dgs" else None
        counts = self.comm.all_gather_object(int(self.train.shape[0])) if world.size > 1 else [self.train.shape[0]]
        self.steps = epoch_steps(counts, config.sampling.batch_size)
        self.rng = np.random.default_rng([config.optim.seed, world.rank])
        self.scratch = {t: Scratch() for t in types}
        self.alltoall = MatchingAllToAll(self.comm)

    def _dgs(self, config: TrainConfig) -> TypedDGS:
        """DGS's draws over the set's relations, each type's nodes' owners read from the set."""
        options, offsets = config.sampling, self.graph.offsets
        owner = {t: np.asarray(self.owner[offsets[i] : offsets[i + 1]]) for i, t in enumerate(self.graph.node_types)}
        return TypedDGS(owner, self.world.rank, options.epsilon, options.dgs_rule)

    def epoch(self) -> EpochStep:
        comm = self.comm
        before, waited = comm.traffic, comm.wait_seconds
        started = time.perf_counter()
        totals = {"loss": 0.0, "sample": 0.0}
        batches = seed_batches(self.train, self.steps, self.rng)[: self.config.sampling.steps_per_epoch]
        stepping = time.perf_counter()
        for seeds in batches:
            self._step(seeds, totals)
        step_seconds = time.perf_counter() - stepping
        release_free_memory()  # the batches' tensors, before the evaluation pass allocates its own
        moved = comm.traffic - before
        return EpochStep(
            loss=totals["loss"] / max(len(batches), 1),
            seconds=time.perf_counter() - started,
            step_seconds=step_seconds,
            wait_seconds=comm.wait_seconds - waited,
            sample_seconds=totals["sample"],
            steps=len(batches),
            moved=moved,
        )

    def _step(self, seeds: np.ndarray | None, totals: dict) -> None:
        started = time.perf_counter()
        hops = None
        if seeds is not None:
            hops = sample_hetero_hops(
                self.graph.relations,
                self.graph.num_nodes,
                {self.target: seeds},
                self.fanouts,
                self.rng,
                self.scratch,
                self.dgs,
            )
        totals["sample"] += time.perf_counter() - started
        model, optimizer = self.training.model, self.training.optimizer
        model.train()
        optimizer.zero_grad(set_to_none=True)
        x, global_seeds = self._input_rows(model, hops)
        if hops is not None:
            summed = self._summed_loss(model, hops, x)
            loss = summed / global_seeds
            loss.backward()
            totals["loss"] += float(loss.detach())
        else:
            settle(x)
        self.training.sync.finish()
        optimizer.step()

    def _input_rows(self, model: RGCN, hops: HeteroHops | None) -> tuple[torch.Tensor, int]:
        """The batch's input rows, every node type's batch nodes one type after the other, each row
        computed by its node's owner (see the module's description), and the step's seeds on every
        worker; a collective (a worker without a batch asks for nothing and still serves)."""
        size, rank = self.world.size, self.world.rank
        if hops is None:
            wanted = np.zeros(0, dtype=np.int64)
        else:
            nodes = [hops.nodes[t] + self.graph.offsets[i] for i, t in enumerate(self.graph.node_types)]
            wanted = np.concatenate(nodes)  # homogeneous ids
        num_seeds = 0 if hops is None else int(hops.num_nodes[self.target][0])
        if size == 1:
            return self._serve(model, wanted), num_seeds
        owners = np.asarray(self.owner[wanted], dtype=np.int64)
        order = np.argsort(owners, kind="stable")
        meta = self.comm.all_gather_object((np.bincount(owners, minlength=size).tolist(), num_seeds))
        counts = np.array([m[0] for m in meta], dtype=np.int64)  # [reader, owner]
        requested = torch.empty(int(counts[:, rank].sum()), dtype=torch.int64)
        self.alltoall(requested, torch.from_numpy(wanted[order]), counts, label="requests")
        received = rows_to_readers(self._serve(model, requested.numpy()), self.alltoall, counts.T)
        back = torch.from_numpy(np.argsort(order, kind="stable")).to(received.device)
        return received.index_select(0, back), sum(m[1] for m in meta)

    def _serve(self, model: RGCN, ids: np.ndarray) -> torch.Tensor:
        """The input rows of owned nodes ``ids`` (homogeneous ids), in their order."""
        node_type = np.searchsorted(self.graph.offsets, ids, side="right") - 1
        at = owned_positions(self.owned, ids) - self.typed.bounds[node_type]
        return model.input.rows(node_type, at, self.features)

    def _summed_loss(self, model: RGCN, hops: HeteroHops, x: torch.Tensor) -> torch.Tensor:
        """The layers on the batch's sampled edges (see the module's description), and the summed
        cross-entropy of its seeds, a chunk of logits at a time."""
        layers = model.num_layers
        tables = layer_tables(hops, self.graph.node_types, layers)
        for index in range(layers - 1):
            block = layer_block(hops, self.relation_types, tables[index], layers - index)
            x = model.layer(index, x, block.to(self.device), destination_rows(x, tables[index]))
        last = tables[-1]
        block = layer_block(hops, self.relation_types, last, 1).to(self.device)
        terms = model.convs[-1].terms(x, destination_rows(x, last), block)
        seeds = hops.nodes[self.target][: hops.num_nodes[self.target][0]]
        labels = torch.from_numpy(self.labels[seeds]).to(self.device)
        return linear_cross_entropy(terms, torch.arange(seeds.shape[0], device=self.device), labels)

    def close(self) -> None:
        """Nothing to release: no process or thread of its own."""
