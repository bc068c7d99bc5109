"""Sampled mini-batch training: what one worker does in an epoch of batches.

Each worker draws its seeds from its own training nodes and samples on the graph's structure, as
``--structure`` says: ``replicated``, the whole graph's in-edge CSR memory-mapped once per machine
from the partition set (a hop through a remote node needs no request), or ``partitioned``, its
machine's parts' in-edges only, a hop through another machine's node drawn by its owner
(:mod:`commgraph.sample.partitioned`; the same blocks). What crosses workers in a step:

1. requests (``structure_bytes``): with ``partitioned``, each hop's remote destinations and the
   owners' draws, 8 bytes per id (``sampling``); the ids of the batch's remote input nodes, 8 bytes
   each, to their owners by the runtime's matching all-to-all; and a DGS worker's feature columns,
   8 bytes each, whenever its feature mask changes them;
2. features (``feature_bytes``, :mod:`commgraph.train.fetch`): the requested rows, owner -> reader,
   as the batch's fetch plan (:func:`commgraph.plan.allgather.plan_fetch`) says, run by the
   runtime's executor and cut to the columns the reader's sampler chose;
3. gradients: summed by the job's all-reduce, as in full-graph training.

Every worker runs the same number of steps per epoch: the worker with the most training nodes
splits them into batches of ``--batch-size``, and every other worker splits its own into as many
(smaller) batches, so each training node is a seed once per epoch (``--steps-per-epoch N`` cuts an
epoch to its first N steps, on every worker alike). A worker whose batches run out
(ClusterGCN's batch counts differ) still takes part in each step's exchanges and all-reduce with
nothing to compute. The loss of a step is the sum over its seeds divided by the number of seeds of
the step on all workers, so the summed gradient is the gradient of the global batch's mean loss.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np
import torch

from commgraph.logs import get_logger
from commgraph.nn import GNN
from commgraph.partition.store import owned_positions
from commgraph.runtime import GradientSync
from commgraph.runtime.feature_cache import CacheCounts
from commgraph.runtime.features import FeatureStore
from commgraph.runtime.job import Job
from commgraph.runtime.memory import release_free_memory
from commgraph.runtime.sampling import RemoteSampling
from commgraph.runtime.traffic import Traffic
from commgraph.sample import DGSSampler, LayerSample, SampledBatch, SamplingGraph
from commgraph.sample.dgs import DGSMasks
from commgraph.sample.explain import (
    DGSExplainer,
    ExplanationGraph,
    ExplanationPlan,
    OnlineExplainer,
    WorkerExplainer,
)
from commgraph.sample.maskfile import load_masks, save_masks
from commgraph.sample.partitioned import PartitionedGraph
from commgraph.sample.registry import EpochSampler, SamplerSpec, make_sampler, sampler_entry
from commgraph.train.config import TrainConfig
from commgraph.train.fetch import FeatureFetch
from commgraph.train.owner_fetch import OwnerFetch
from commgraph.train.records import DGSStats, EpochStep, StepPhases
from commgraph.train.sampling_options import FANOUT

log = get_logger(__name__)


def _since(now: CacheCounts, before: CacheCounts) -> CacheCounts:
    return CacheCounts(**{name: value - getattr(before, name) for name, value in vars(now).items()})


def epoch_steps(train_counts: list[int], batch_size: int) -> int:
    """Steps per epoch: the most training nodes any worker holds, in batches of ``batch_size``."""
    return max(1, math.ceil(max(train_counts) / batch_size))


def seed_batches(train: np.ndarray, steps: int, rng: np.random.Generator) -> list[np.ndarray | None]:
    """An epoch's seeds on one worker: ``train`` shuffled by ``rng`` and split into ``steps``
    batches (None: an empty one)."""
    return [seeds if seeds.size else None for seeds in np.array_split(rng.permutation(train), steps)]


def sampling_graph(job: Job, structure: str) -> SamplingGraph | PartitionedGraph:
    """What this worker samples on: ``structure`` as ``--structure`` names it (the configuration's,
    resolved). A collective when the job has several workers."""
    machine = job.machine_ranks() if job.world.size > 1 else np.zeros(1, np.int64)
    if structure == "replicated":
        return SamplingGraph.from_partition(job.pset, job.world.rank)
    remote = RemoteSampling(job.comm) if machine.shape[0] < job.world.size else None
    return PartitionedGraph.from_partition(job.pset, job.world.rank, machine, remote)


def sampler_spec(config: TrainConfig, train: np.ndarray) -> SamplerSpec:
    """``config``'s sampling options resolved for this worker's training nodes ``train`` (a
    sampler whose options hold no fanouts, such as one registered by a user, gets
    :data:`~commgraph.train.sampling_options.FANOUT` per layer)."""
    options = config.sampling
    return SamplerSpec(
        fanouts=options.fanouts or (FANOUT,) * config.gnn.layers,
        layers=config.gnn.layers,
        train=train,
        batch_size=options.batch_size,
        seed=config.optim.seed,
        feature_rate=options.feature_rate,
        epsilon=options.epsilon,
        rule=options.dgs_rule,
        layer_size=options.layer_size,
        clusters=options.clusters,
        clusters_per_batch=options.clusters_per_batch,
    )


@dataclass
class TrainingState:
    """What a training step updates: the model, its optimiser and the gradient sum over workers."""

    model: GNN
    optimizer: torch.optim.Optimizer
    sync: GradientSync


class SampledEpochs:
    """A worker's epochs of sampled batches: seeds, sampling, fetch, step; and DGS's explainer.

    Args:
        job: the worker's job (its part, communicator, topology and runners).
        config: the run's options (the sampler's, the model's layers, the seed).
        state: the model, optimiser and gradient sum each step updates.
        store: the part's features, where ``--features`` placed them.
    """

    def __init__(self, job: Job, config: TrainConfig, state: TrainingState, store: FeatureStore):
        part, world = job.part, job.world
        self.comm, self.training = job.comm, state
        self.config, self.world, self.device = config, world, world.device
        entry = sampler_entry(config.sampling.sampler)
        self.graph = sampling_graph(job, config.sampling.structure if entry.partitioned else "replicated")
        if config.comm.memory_budget is not None:
            self.graph.read_at_random()  # the structure is read from its files, not held
        self.owned = np.asarray(part.owned)
        self.train = self.owned[np.asarray(part.train_mask, dtype=bool)]
        self.labels = torch.from_numpy(np.array(part.labels, dtype=np.int64))
        self.sampler = make_sampler(entry.name, self.graph, sampler_spec(config, self.train))
        counts = self.comm.all_gather_object(int(self.train.shape[0])) if world.size > 1 else [self.train.shape[0]]
        self.steps = epoch_steps(counts, config.sampling.batch_size)
        self.rng = np.random.default_rng([config.optim.seed, world.rank])
        self.fetch = self._fetch(job, store, state.model)
        self.iteration = 0
        self.job = job
        self.dgs_explainer: DGSExplainer | None = None
        self.explainer: OnlineExplainer | WorkerExplainer | None = None
        self.explain_bytes = 0
        options = config.sampling
        if options.sampler == "dgs":
            if options.dgs_masks is not None:
                loaded = load_masks(options.dgs_masks, job.pset, store.width)[world.rank]
                self.sampler.set_masks(replace(loaded, iteration=0))  # made before this run: count them from step 0
            if options.explain_cpu != 0 or options.dgs_masks_out is not None:
                self.dgs_explainer = self._dgs_explainer(store)
            if options.explain_cpu != 0 and options.explain_in == "worker":
                self.explainer = WorkerExplainer(self.dgs_explainer, self.sampler.set_masks)
            elif options.explain_cpu != 0:
                self.explainer = OnlineExplainer(self.dgs_explainer, self.sampler.set_masks, options.explain_cpu)
                if options.dgs_masks_out is None:  # its process holds the explanation graph: one copy
                    self.dgs_explainer = None

    def _fetch(self, job: Job, store: FeatureStore, model: GNN) -> FeatureFetch:
        """The steps' fetch: of features, or with ``--first-layer owner`` of the first layer as the
        rows' owners compute it (:mod:`commgraph.train.owner_fetch`)."""
        peer_rows = self.config.sampling.peer_rows
        if self.config.comm.first_layer != "owner":
            return FeatureFetch(job, store, self.graph, peer_rows)
        return OwnerFetch(job, store, self.graph, model, peer_rows)

    def _dgs_explainer(self, store: FeatureStore) -> DGSExplainer:
        """DGS's explainer on this worker's explanation graph (:class:`ExplanationPlan`), whose
        rows are fetched once here (the remote ones' bytes: ``explain_bytes``); the pooled node is
        the mean of ``store``'s rows (the owned nodes')."""
        layers = self.config.gnn.layers
        plan = ExplanationPlan.draw(self.graph, layers, self.sampler.fanouts)
        ids = plan.rows
        remote = self.graph.is_remote(ids)
        reads = SampledBatch(ids[:0], [LayerSample(ids[:0], ids, ids[:0], ids[:0])], remote)
        table = self.fetch(reads, torch.device("cpu")).x.numpy()
        self.explain_bytes = 4 * int(remote.sum()) * table.shape[1]
        pooled = store.table.float().mean(0).cpu()
        explanation = ExplanationGraph.from_plan(
            self.graph, plan, lambda nodes: table[np.searchsorted(ids, nodes)], pooled
        )
        if self.world.is_leader and self.config.log.progress:
            log.info(
                f"commgraph: DGS explanation graph: {explanation.remote.shape[0]} remote nodes"
                + (
                    f" of {explanation.remote.shape[0] + explanation.unexplained.shape[0]} reached"
                    if explanation.unexplained.shape[0]
                    else ""
                )
                + f", {self.explain_bytes / 1e6:.2f} MB of features fetched once (rank 0)"
            )
        return DGSExplainer(self.graph, explanation, self.training.model, self.config.sampling.explainer_options())

    # -- an epoch ---------------------------------------------------------------------------------

    def _batches(self) -> list:
        """This epoch's work: seed arrays to sample (ClusterGCN: its batches), one per step; None
        where this worker has nothing left. ``--steps-per-epoch N`` keeps the first N."""
        if isinstance(self.sampler, EpochSampler):
            batches = list(self.sampler.epoch(self.rng))
            steps = max(self.comm.all_gather_object(len(batches))) if self.world.size > 1 else len(batches)
            batches += [None] * (steps - len(batches))
        else:
            batches = seed_batches(self.train, self.steps, self.rng)
        return batches[: self.config.sampling.steps_per_epoch]

    def epoch(self) -> EpochStep:
        comm = self.comm
        before, waited = comm.traffic, comm.wait_seconds
        started = time.perf_counter()
        totals = {"loss": 0.0, "sample": 0.0, "sync": 0, "announced": 0, "local": 0, "sampled": 0, "masked": 0}
        totals["phases"] = StepPhases()
        rounds = len(self.explainer.rounds) if self.explainer is not None else 0
        waited_for_masks = self._wait_for_masks()
        batches = self._batches()
        cache = self.fetch.store.cache
        counted = None if cache is None else cache.counts_now()
        stepping = time.perf_counter()
        for work in self._read_ahead(batches, totals) if self._reads_ahead() else batches:
            self._step(work, totals)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        step_seconds = time.perf_counter() - stepping
        release_free_memory()  # the batches' tensors, before the evaluation pass allocates its own
        moved = comm.traffic - before + Traffic(requests=totals["announced"], local=totals["local"])
        dgs = None
        if isinstance(self.sampler, DGSSampler):
            done = self.explainer.rounds[rounds:] if self.explainer is not None else []
            masks = self.sampler.masks
            dgs = DGSStats(
                steps=totals["sampled"],
                masked_steps=totals["masked"],
                masks_age_steps=-1 if masks is None else self.iteration - masks.iteration,
                wait_seconds=waited_for_masks,
                explanations=len(done),
                explain_seconds=sum(r.seconds for r in done),
                explain_cpu_seconds=sum(r.cpu_seconds for r in done),
            )
        return EpochStep(
            loss=totals["loss"] / max(len(batches), 1),
            seconds=time.perf_counter() - started,
            step_seconds=step_seconds,
            wait_seconds=comm.wait_seconds - waited,
            sample_seconds=totals["sample"],
            phases=totals["phases"],
            steps=len(batches),
            moved=moved,
            sync_bytes=totals["sync"],
            dgs=dgs,
            cache=None if cache is None else _since(cache.counts_now(), counted),
        )

    def _reads_ahead(self) -> bool:
        """Whether batches are sampled a step early so their rows are read ahead: features read
        through a cache, on structure this worker maps whole, by a sampler whose draws do not
        depend on when they are made (DGS's follow its masks of the moment)."""
        return (
            self.fetch.store.cache is not None
            and isinstance(self.graph, SamplingGraph)
            and not isinstance(self.sampler, DGSSampler)
        )

    def _read_ahead(self, batches: list, totals: dict):
        """``batches`` sampled one step ahead: each batch's own input rows are handed to the
        feature cache's reader thread as soon as it is drawn, so they are read from disk while the
        step before computes (the same draws, in the same order, as sampling each at its step)."""
        cache = self.fetch.store.cache

        def drawn(work):
            started = time.perf_counter()
            batch = work if work is None or isinstance(work, SampledBatch) else self.sampler.sample(work, self.rng)
            totals["sample"] += time.perf_counter() - started
            own = np.zeros(0, np.int64) if batch is None else batch.input_nodes[~batch.remote_input]
            cache.prefetch(owned_positions(self.owned, own))
            return batch

        upcoming = drawn(batches[0]) if batches else None
        for index in range(len(batches)):
            current = upcoming
            if index + 1 < len(batches):
                upcoming = drawn(batches[index + 1])
            cache.advance()
            yield current

    def _wait_for_masks(self) -> float:
        """``--dgs-wait``: block until the explainer's first masks (seconds; 0 once there are some),
        at most the job's ``--timeout`` (an hour in a process of its own)."""
        if not self.config.sampling.dgs_wait or self.sampler.masks is not None:
            return 0.0
        return self.explainer.wait_for_masks(self.training.model, self.iteration, self.world.timeout or 3600.0)

    def _step(self, work, totals: dict) -> None:
        started = time.perf_counter()
        batch = work if work is None or isinstance(work, SampledBatch) else self.sampler.sample(work, self.rng)
        if work is None and isinstance(self.graph, PartitionedGraph):  # the others' hops still need us
            self.graph.idle(len(self.sampler.fanouts))
        totals["sample"] += time.perf_counter() - started
        model, optimizer = self.training.model, self.training.optimizer
        model.train()
        optimizer.zero_grad(set_to_none=True)
        clock = _PhaseClock(totals["phases"], self.fetch)
        fetched = self.fetch.step(batch)
        clock.ends("fetch")
        totals["announced"] += fetched.announced_bytes
        totals["local"] += fetched.local_bytes
        if batch is not None:
            totals["sync"] += batch.sync_bytes
            totals["sampled"] += 1
            totals["masked"] += batch.feature_columns is not None  # DGS sets them exactly when it has masks
            logits = self.fetch.forward(model, fetched, batch.blocks(self.graph, self.device))
            labels = self.labels[torch.from_numpy(owned_positions(self.owned, batch.seeds))].to(self.device)
            summed = torch.nn.functional.cross_entropy(logits, labels, reduction="sum")
            loss = summed / fetched.global_seeds
            clock.ends("forward")
            loss.backward()
            clock.ends("backward")
            totals["loss"] += float(loss.detach())
        else:
            self.fetch.idle(fetched)
            clock.ends("fetch")
        self.training.sync.finish()
        optimizer.step()
        clock.ends("optimizer")
        self.iteration += 1
        if self.explainer is not None and batch is not None:
            self.explainer.observe(model, float(summed.detach()) / batch.seeds.shape[0], self.iteration)

    # -- checkpoints ------------------------------------------------------------------------------

    def state(self) -> dict:
        """What a resumed run needs to draw the same batches: the sampling generator, and DGS's
        masks."""
        masks = getattr(self.sampler, "masks", None)
        return {
            "rng": self.rng.bit_generator.state,
            "iteration": self.iteration,
            "masks": None
            if masks is None
            else {
                "node_prob": torch.from_numpy(masks.node_prob),
                "feature_mask": torch.from_numpy(masks.feature_mask),
                "iteration": masks.iteration,
            },
        }

    def load(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.iteration = state["iteration"]
        if state["masks"] is not None:
            masks = state["masks"]
            self.sampler.set_masks(
                DGSMasks(masks["node_prob"].numpy(), masks["feature_mask"].numpy(), masks["iteration"])
            )

    def write_masks(self, path: str) -> None:
        """``--dgs-masks-out``: every worker explains the current model (synchronously, in its own
        process) and rank 0 writes all the masks to ``path``; a collective."""
        state = {name: value.detach().cpu().clone() for name, value in self.training.model.state_dict().items()}
        masks = self.dgs_explainer.explain(state, self.iteration).masks
        every = self.comm.all_gather_object(masks) if self.world.size > 1 else [masks]
        if self.world.is_leader:
            save_masks(path, self.job.pset, every)

    def close(self) -> None:
        if self.explainer is not None:
            self.explainer.close()


class _PhaseClock:
    """Adds each phase of a step to ``phases`` as it ends: the time since the last phase ended, the
    feature store's reads in it (``fetch.gather_seconds``) moved to ``gather``."""

    def __init__(self, phases: StepPhases, fetch):
        self.phases, self.fetch = phases, fetch
        self.at, self.gathered = time.perf_counter(), fetch.gather_seconds

    def ends(self, phase: str) -> None:
        now, gathered = time.perf_counter(), self.fetch.gather_seconds
        reads = gathered - self.gathered
        setattr(self.phases, phase, getattr(self.phases, phase) + now - self.at - reads)
        self.phases.gather += reads
        self.at, self.gathered = now, gathered
