"""The trainer: what one worker does, epoch after epoch.

Every worker builds the same model from the same seed, trains on its part, and sums gradients with
the others. Full-graph (G3) training runs one step per epoch through an executor (``pipelined``,
``barrier`` or ``replicate``); its loss is the sum over the worker's training nodes divided by the
*global* number of training nodes, so the summed gradient is exactly the single-worker gradient
and every worker takes the same step. With ``--sampler`` an epoch is a run of sampled mini-batch
steps (:mod:`commgraph.train.minibatch`). Either way, accuracies come from the executor's exact
full-graph forward pass, except under ``--memory-budget``, where sampled training evaluates by
sampled inference (:mod:`commgraph.train.sampled_eval`), holding a batch's tables.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from commgraph.atomic import append_text, atomic_write
from commgraph.errors import TrainingError
from commgraph.logs import get_logger
from commgraph.nn import GNN
from commgraph.nn.options import HETERO_MODELS
from commgraph.nn.rgcn import TypedModel
from commgraph.phases import RUNNING
from commgraph.plan.choose import AllReduceChoice
from commgraph.plan.memory import estimate_memory
from commgraph.runtime import World, keep_freed_memory
from commgraph.runtime.features import FeatureStore
from commgraph.runtime.job import Job, Wiring
from commgraph.runtime.memory import release_free_memory
from commgraph.runtime.traffic import global_traffic
from commgraph.train import checkpoint
from commgraph.train.config import TrainConfig
from commgraph.train.executor import BarrierExecutor, PipelinedExecutor, ReplicateExecutor
from commgraph.train.minibatch import SampledEpochs, TrainingState
from commgraph.train.predict import SPLITS, gather_predictions, write_predictions
from commgraph.train.records import DGSStats, EpochRecord, EpochStep, phase_seconds
from commgraph.train.rgcn import TypedExecutor, TypedPart, build_typed_model
from commgraph.train.rgcn_sampled import RGCNSampledEpochs
from commgraph.train.sampled_eval import SampledEvaluation
from commgraph.train.schedule import bin_size_for_memory
from commgraph.train.shape import first_layer_choice, job_shape, predicts_step_time, step_time
from commgraph.train.shared_eval import SharedEvaluation

log = get_logger(__name__)


@dataclass
class TrainResult:
    history: list[dict]  # one record per epoch run (what --metrics-out holds)
    model: (
        GNN | TypedModel
    )  # the trained model, identical on every worker (R-GCN's, HGT's embeddings: the worker's rows)
    best: dict | None  # epoch, val_acc, test_acc of the best validation accuracy (None: no val nodes)


def train_worker(world: World, partition_dir: str | Path, config: TrainConfig) -> TrainResult:
    """Train on part ``world.rank`` of the partition set."""
    return Trainer(world, partition_dir, config).fit()


class Trainer:
    """One worker's training: set-up, then per epoch a step, an evaluation and a checkpoint. The
    worker's part, communicator, topology, plans and runners are its :class:`~commgraph.runtime.job.Job`'s."""

    def __init__(self, world: World, partition_dir: str | Path, config: TrainConfig):
        self.world = world
        keep_freed_memory()  # every step reallocates its large tensors: reuse them (see runtime.memory)
        threads = os.environ.get("COMMGRAPH_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        self.job = job = Job(world, partition_dir, config.job)
        self.config = config = _resolved(config, job)
        part, comm, gnn = job.part, job.comm, config.gnn
        self.typed = TypedPart.read(job) if gnn.model in HETERO_MODELS else None
        if (part.features is None and self.typed is None) or part.labels is None or part.train_mask is None:
            raise TrainingError(f"{partition_dir}: the graph has no features, labels or train mask to train on")
        classes = (
            max(comm.all_gather_object(int(np.max(part.labels, initial=-1)) + 1))
            if world.size > 1
            else int(np.max(part.labels, initial=-1)) + 1
        )
        torch.manual_seed(config.optim.seed)
        self.model = self._model(classes).to(world.device)
        shared = self.model.shared_parameters() if self.typed is not None else list(self.model.parameters())
        for param in shared:  # same seed gives the same weights; make sure of it
            comm.broadcast_(param.data)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay
        )
        self.wiring = self._wiring()
        self.allreduce = self._allreduce(shared)
        self.sync = job.gradient_sync(shared, self.allreduce)  # an embedding's rows stay with their owner
        self.step_prediction = (
            None
            if not predicts_step_time(config)
            else step_time(
                config,
                job.pset,
                job.topology,
                job.devices,
                self.wiring.choice.modeled_seconds if self.wiring and world.size > 1 else 0.0,
                self.allreduce.modeled_seconds or 0.0,
                threads=torch.get_num_threads(),
                warn=world.is_leader,
            )
        )
        store = self._features()
        self.executor = (
            None if config.sampling.eval_fanouts is not None else self._executor(store)
        )  # None: sampled evaluation
        if self.executor is not None:
            self._say(self.executor.feature_note)
        torch.manual_seed(config.optim.seed * 7919 + world.rank)  # dropout masks differ per worker
        self.identity = checkpoint.identity(job.pset.manifest["graph"]["checksum"], world.size, config)
        self.widths = {"in": None if part.features is None else int(part.features.shape[1]), "out": classes}
        self.train_total = comm.global_sum([float(np.count_nonzero(part.train_mask))])[0]
        if self.train_total == 0:
            raise TrainingError(f"{partition_dir}: no node is in the training set")
        rows = self.executor.rows if self.typed is not None else slice(None)  # the owned rows with logits
        self.y = torch.from_numpy(np.array(part.labels[rows], dtype=np.int64)).to(world.device)
        self.masks = {
            name: torch.from_numpy(np.array(getattr(part, f"{name}_mask")[rows], dtype=bool)).to(world.device)
            for name in SPLITS
        }
        self.sampled, self.sampled_eval = None, None
        if config.sampling.sampler:
            state = TrainingState(self.model, self.optimizer, self.sync)
            if self.typed is not None:
                self.sampled = RGCNSampledEpochs(job, config, state, self.typed)
            else:
                self.sampled = SampledEpochs(job, config, state, store)
            on_disk = store is not None and store.placement == "disk"
            if config.comm.exchange == "replicate" or on_disk:  # evaluation has a table of its own, or reads the file
                self._say(f"mini-batch {store.describe()}")
            if self.executor is None:
                every_node = config.log.predictions_out is not None
                self.sampled_eval = SampledEvaluation(self.sampled, config.sampling.eval_fanouts, every_node)
                self._say(f"evaluation: sampled, fanouts {','.join(map(str, config.sampling.eval_fanouts))}")
        self.start_epoch, self.best = 1, None
        if config.log.resume:
            self._resume()
        elif config.log.checkpoint_dir and world.is_leader:  # a fresh run: another run's best model is not ours
            (Path(config.log.checkpoint_dir) / checkpoint.BEST).unlink(missing_ok=True)
        self.predicted: torch.Tensor | None = None
        release_free_memory()  # the set-up's scratch (orderings, fetch payloads): the steps reuse what they free

    # -- set-up ----------------------------------------------------------------------------------

    def _model(self, classes: int) -> GNN | TypedModel:
        """The run's model: R-GCN over the typed part's node types, else a :class:`~commgraph.nn.GNN`."""
        gnn = self.config.gnn
        if self.typed is not None:
            return build_typed_model(self.typed, self.config, classes)
        width = int(self.job.part.features.shape[1])
        return GNN(gnn.model, width, gnn.hidden, classes, layers=gnn.layers, heads=gnn.heads, dropout=gnn.dropout)

    def _wiring(self) -> Wiring | None:
        """The job's all-gather plan (none for the replicate exchange, which moves nothing per
        layer); printed when this rank chose it."""
        config = self.config
        if config.comm.exchange == "replicate":
            return None
        wiring = self.job.wire(4 * config.gnn.hidden)
        if Path(config.job.plan).suffix not in (".json", ".npz"):  # the launcher printed a plan it chose
            self._say(wiring.choice.describe())
        return wiring

    def _allreduce(self, shared: list[torch.nn.Parameter]) -> AllReduceChoice:
        nbytes = sum(p.numel() * p.element_size() for p in shared if p.requires_grad)
        choice = self.job.allreduce(self.config.comm.allreduce, nbytes)
        if self.world.size > 1:
            self._say(choice.describe())
        return choice

    def _say(self, line: str) -> None:
        if self.world.is_leader and self.config.log.progress:
            log.info(f"commgraph: {line}")

    def _features(self) -> FeatureStore | None:
        """The part's features, placed as ``--features`` says: read by the full-graph executor (not
        ``replicate``, which holds a table of its own) and by the mini-batch trainer's fetches. Under
        ``--memory-budget``, sampled training leaves them in their file, read through a cache of the
        size the budget's estimate gives each worker (:meth:`FeatureStore.on_disk`)."""
        comm = self.config.comm
        if self.typed is not None or (comm.exchange == "replicate" and not self.config.sampling.sampler):
            return None
        part = self.job.part
        if comm.memory_budget is not None and self.config.sampling.sampler:
            shape = job_shape(self.config, self.job.pset, self.world.size)
            cache_bytes = estimate_memory(self.job.pset, shape).cache_bytes  # as the launcher planned it
            return FeatureStore.on_disk(part.features, self.world.device, cache_bytes, np.asarray(part.degree))
        return FeatureStore.create(part.features, self.world.device, comm.features)

    def _executor(self, store: FeatureStore | None):
        """The full-graph executor on ``store``: training's, or evaluation's in sampled training,
        where its input table is streamed from the store (never a second copy of it; ``replicate``
        holds a table of its own, its hop sets' rows)."""
        config, job = self.config, self.job
        if self.typed is not None:
            return TypedExecutor(job, self.wiring, self.typed, config.gnn.model)
        if self._shares_evaluation(store):  # the in-edges the sampler maps: the whole graph's, or the part's
            sampling = config.sampling
            whole = sampling.sampler != "neighbor" or sampling.structure == "replicated"
            return SharedEvaluation(job, store, whole)
        streamed = True if config.sampling.sampler else None
        if config.comm.exchange == "replicate":
            return ReplicateExecutor(job, config.gnn.layers, config.comm.features, streamed)
        owner = self._owner_first_layer(store)
        if config.comm.exchange == "barrier":
            return BarrierExecutor(job, self.wiring, store, streamed, owner)
        bin_size = config.comm.bin_size
        if bin_size is None:
            bin_size = bin_size_for_memory(
                _available_memory(self.world.device),
                self.model.widths,
                len(job.part.indices) / max(job.part.num_owned, 1),
            )
        return PipelinedExecutor(job, self.wiring, bin_size, store, streamed, owner)

    def _owner_first_layer(self, store: FeatureStore | None) -> bool:
        """Whether the full-graph pass's layer 0 is computed by the rows' owners: as the launcher
        decided it (sampled training's evaluation: ``evaluation_first_layer``), else by the rule."""
        config = self.config
        if config.comm.evaluation_first_layer is not None:
            return config.comm.evaluation_first_layer == "owner"
        host = store is not None and store.placement == "host"
        choice = first_layer_choice(config, int(self.job.part.features.shape[1]), self.world.size, host)
        if config.comm.first_layer == "auto":  # under torchrun, where no launcher decided it
            self._say(f"first layer: {choice.reason}")
        return choice.owner

    def _shares_evaluation(self, store: FeatureStore | None) -> bool:
        """Whether sampled training's evaluation holds its layer tables once per machine
        (:class:`~commgraph.train.shared_eval.SharedEvaluation`): on CPU, every rank on one machine,
        peers' rows read in place. A collective where the job has several workers."""
        config, job = self.config, self.job
        if not config.sampling.sampler or store is None or job.device.type != "cpu":
            return False
        if config.sampling.peer_rows != "map":
            return False
        return len(job.machine_ranks()) == self.world.size

    def _resume(self) -> None:
        state = checkpoint.load(Path(self.config.log.checkpoint_dir), self.identity)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"][self.world.rank])
        self.start_epoch = state["epoch"] + 1
        self.best = state.get("best")
        if self.sampled is not None:
            self.sampled.load(state["sampling"][self.world.rank])

    # -- one epoch -------------------------------------------------------------------------------

    def step(self) -> EpochStep:
        """One epoch's training: a full-graph step, or the sampled batches' steps."""
        if self.sampled is not None:
            return self.sampled.epoch()
        return self.full_graph_step()

    def full_graph_step(self) -> EpochStep:
        """One full-graph training step: forward, backward, gradient sum, optimiser step."""
        comm = self.job.comm
        before, waited = comm.traffic, comm.wait_seconds
        started = time.perf_counter()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        train = self.masks["train"]
        if self.typed is not None:  # R-GCN's logits a chunk of rows at a time
            loss = self.executor.loss(self.model, train, self.y) / self.train_total
        else:
            logits = self.executor.forward(self.model)
            loss = torch.nn.functional.cross_entropy(logits[train], self.y[train], reduction="sum") / self.train_total
        loss.backward()
        halo_wait = comm.wait_seconds - waited
        synced = time.perf_counter()
        self.sync.finish()
        sync_wait = time.perf_counter() - synced
        self.optimizer.step()
        if self.world.device.type == "cuda":  # kernels run asynchronously: time the work, not its launch
            torch.cuda.synchronize(self.world.device)
        seconds = time.perf_counter() - started
        moved = comm.traffic - before
        return EpochStep(loss=float(loss.detach()), seconds=seconds, wait_seconds=halo_wait + sync_wait, moved=moved)

    def evaluate(self) -> dict[str, float]:
        """Correct predictions and nodes of each split on this worker (``train_correct``, ``train_nodes``, ...)."""
        self.model.eval()
        if self.typed is not None:
            predicted = self.executor.predict(self.model)
        elif self.sampled_eval is not None:
            predicted = self.sampled_eval.predict(self.model)
        else:
            with torch.no_grad():
                predicted = self.executor.forward(self.model).argmax(dim=1)
        counts = {}
        for name in SPLITS:
            mask = self.masks[name]
            counts[f"{name}_correct"] = float((predicted[mask] == self.y[mask]).sum())
            counts[f"{name}_nodes"] = float(mask.sum())
        if self.typed is None:
            self.predicted = predicted
        else:  # R-GCN classifies its target type's rows: -1 for the other types'
            self.predicted = predicted.new_full((self.job.part.num_owned,), -1)
            self.predicted[self.executor.rows] = predicted
        return counts

    def record(self, epoch: int, step: EpochStep, counts: dict[str, float] | None) -> EpochRecord:
        """The epoch's totals over every worker."""
        first = 0 if self.typed is not None else 1  # R-GCN exchanges its projected inputs too
        traffic = global_traffic(self.job.comm, step.moved, self.config.gnn.layers)
        local = {"loss": step.loss, **(counts or {}), "sync": step.sync_bytes}
        dgs = step.dgs
        if dgs is not None:
            local.update({f"dgs_{name}": getattr(dgs, name) for name in DGSStats.SUMMED})
        if step.cache is not None:
            local.update(step.cache.to_dict())
        total = dict(zip(local, self.job.comm.global_sum(list(local.values()))))

        def accuracy(name: str) -> float | None:  # None: not evaluated this epoch, or an empty split
            nodes = total.get(f"{name}_nodes", 0)
            return total[f"{name}_correct"] / nodes if nodes else None

        forward = list(traffic.halo_forward[first:])
        backward, features, sampling = traffic.halo_backward, traffic.features, traffic.sampling
        requests = traffic.requests + sampling
        owner = traffic.activations + traffic.activation_grads
        return EpochRecord(
            epoch=epoch,
            loss=total["loss"],
            train_acc=accuracy("train"),
            val_acc=accuracy("val"),
            test_acc=accuracy("test"),
            epoch_seconds=step.seconds,
            comm_wait_seconds=step.wait_seconds,
            comm_bytes=sum(forward) + backward + features + requests + owner,
            halo_forward_bytes=forward,
            halo_backward_bytes=backward,
            allreduce_bytes=traffic.allreduce,
            plan=self.wiring.plan.planner if self.wiring else "replicate",
            plan_modeled_seconds=self.wiring.choice.modeled_seconds if self.wiring else 0.0,
            allreduce=self.allreduce.name,
            allreduce_modeled_seconds=self.allreduce.modeled_seconds,
            steps=step.steps,
            steps_cap=self.config.sampling.steps_per_epoch,
            sample_seconds=step.sample_seconds,
            **phase_seconds(step.phases),
            predicted_step_seconds=None if self.step_prediction is None else self.step_prediction.step_seconds,
            predicted_epoch_seconds=None if self.step_prediction is None else self.step_prediction.epoch_seconds,
            measured_step_seconds=(step.seconds if step.step_seconds is None else step.step_seconds)
            / max(step.steps, 1),
            feature_bytes=features,
            local_bytes=traffic.local,
            structure_bytes=requests,
            sampling_bytes=sampling,
            sync_bytes=int(total["sync"]),
            activation_bytes=traffic.activations,
            activation_grad_bytes=traffic.activation_grads,
            total_bytes=sum(forward) + backward + features + requests + owner + traffic.allreduce,
            dgs=None
            if dgs is None
            else replace(dgs, **{name: type(getattr(dgs, name))(total[f"dgs_{name}"]) for name in DGSStats.SUMMED}),
            **({} if step.cache is None else {name: int(total[name]) for name in step.cache.to_dict()}),
        )

    def checkpoint(self, record: EpochRecord, improved: bool) -> None:
        """After every epoch with ``--checkpoint-dir``: the state to resume from, and the best model."""
        comm = self.job.comm
        rng = comm.all_gather_object(torch.get_rng_state())
        sampling = comm.all_gather_object(self.sampled.state()) if self.sampled is not None else None
        if not self.world.is_leader:
            return
        directory = Path(self.config.log.checkpoint_dir)
        kept = {
            "epoch": record.epoch,
            "model": self.model.state_dict(),
            "identity": self.identity,
            "widths": self.widths,
        }
        checkpoint.save(
            directory,
            {**kept, "optimizer": self.optimizer.state_dict(), "rng": rng, "best": self.best, "sampling": sampling},
        )
        if improved:
            checkpoint.save(directory, {**kept, "best": self.best}, checkpoint.BEST)

    # -- the loop --------------------------------------------------------------------------------

    def fit(self) -> TrainResult:
        config = self.config
        log = _MetricsLog(config, self.world, self.start_epoch)
        bar = _progress(config, self.world, self.start_epoch)
        history = []
        epochs, log_options = config.optim.epochs, config.log
        self.world.report_phase(RUNNING)  # set-up is over: from here each wait is bounded by --timeout
        for epoch in range(self.start_epoch, epochs + 1):
            step = self.step()
            evaluate = epoch % log_options.eval_every == 0 or epoch == epochs  # the same on every worker
            counts = self.evaluate() if evaluate else None
            record = self.record(epoch, step, counts)
            history.append(record.to_dict())
            log.write(record, bar)
            improved = record.val_acc is not None and (self.best is None or record.val_acc > self.best["val_acc"])
            if improved:
                self.best = {"epoch": epoch, "val_acc": record.val_acc, "test_acc": record.test_acc}
            if log_options.checkpoint_dir:
                self.checkpoint(record, improved)
            self.world.report_progress(_how_far(epoch, epochs, log_options.checkpoint_dir))
        log.close()
        if self.sampled is not None:
            if config.sampling.dgs_masks_out:
                self.sampled.write_masks(config.sampling.dgs_masks_out)
            self.sampled.close()
        if bar is not None:
            bar.close()
        if log_options.predictions_out and history:  # the last epoch is always evaluated
            every = gather_predictions(self.job.comm, self.job.part, self.predicted)
            if every is not None:
                write_predictions(Path(log_options.predictions_out), every)
        return TrainResult(history, self.model, self.best)


def _resolved(config: TrainConfig, job: Job) -> TrainConfig:
    """``config`` as the launcher resolves it; under torchrun, where no launcher did, resolved here
    for the job's machines (a collective where the neighbor sampler's structure is left open)."""
    if not config.unresolved:
        return config
    return config.resolved(spans_machines=len(job.machine_ranks()) < job.world.size)


def _how_far(epoch: int, epochs: int, checkpoint_dir: str | None) -> str:
    """How far the run got, for the launcher's line if a signal stops the job."""
    line = f"after epoch {epoch} of {epochs}"
    if checkpoint_dir:
        line += f"; the last checkpoint, {Path(checkpoint_dir) / checkpoint.FILE} (epoch {epoch}), is intact"
    return line


def _available_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        return (
            os.sysconf("SC_AVPHYS_PAGES")
            * os.sysconf("SC_PAGE_SIZE")
            // max(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)
        )
    except (ValueError, OSError):
        return 1 << 30


def _progress(config: TrainConfig, world: World, start: int):
    if not (config.log.progress and world.is_leader):
        return None
    from tqdm import tqdm

    # no bar frames into a file or pipe (disable=None: only on a terminal); the epoch lines still come
    return tqdm(total=config.optim.epochs, initial=start - 1, desc="training", unit="epoch", leave=False, disable=None)


class _MetricsLog:
    """Rank 0's epoch lines, the JSONL file and the TensorBoard events. A resumed run drops the
    lines after its checkpoint."""

    def __init__(self, config: TrainConfig, world: World, start_epoch: int):
        config = config.log
        self.path = Path(config.metrics_out) if config.metrics_out and world.is_leader else None
        self.leader = world.is_leader
        self.board = None
        if config.tensorboard and world.is_leader:
            from torch.utils.tensorboard import SummaryWriter

            self.board = SummaryWriter(config.tensorboard)
        if self.path is not None:
            kept = []
            if config.resume and self.path.is_file():
                kept = [
                    line
                    for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line)["epoch"] < start_epoch
                ]
            if kept:
                with atomic_write(self.path) as handle:
                    handle.write("".join(line + "\n" for line in kept).encode())
            else:  # created by the first epoch's line: a run that writes none leaves no empty file
                self.path.unlink(missing_ok=True)
                self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: EpochRecord, bar) -> None:
        if not self.leader:
            return
        if self.path is not None:
            append_text(self.path, json.dumps(record.to_dict()) + "\n")
        if self.board is not None:
            for tag, value in (
                ("loss", record.loss),
                ("accuracy/train", record.train_acc),
                ("accuracy/val", record.val_acc),
                ("accuracy/test", record.test_acc),
                ("seconds/epoch", record.epoch_seconds),
                ("seconds/comm_wait", record.comm_wait_seconds),
                ("bytes/comm", record.comm_bytes),
            ):
                if value is not None:
                    self.board.add_scalar(tag, value, record.epoch)
            self.board.flush()
        if bar is not None:
            bar.update(1)
            with bar.external_write_mode(file=sys.stderr):  # the line above the bar; stdout carries the result alone
                log.info(record.line())

    def close(self) -> None:
        if self.board is not None:
            self.board.close()
