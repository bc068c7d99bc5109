"""The trainer: what one worker does, epoch after epoch.

Every worker builds the same model from the same seed, trains on its part, and sums gradients with
the others. Full-graph (G3) training runs one step per epoch through an executor (``pipelined``,
``barrier`` or ``replicate``); its loss is the sum over the worker's training nodes divided by the
*global* number of training nodes, so the summed gradient is exactly the single-worker gradient
and every worker takes the same step. With ``--sampler`` an epoch is a run of sampled mini-batch
steps (:mod:`commgraph.train.minibatch`). Either way, accuracies come from the executor's exact
full-graph forward pass.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from commgraph.errors import TrainingError
from commgraph.nn import GNN
from commgraph.partition import load_partition_set
from commgraph.plan.choose import AllReduceChoice, choose_job_allreduce, job_topology, parse_placement
from commgraph.runtime import Communicator, GradientSync, World, keep_freed_memory
from commgraph.runtime.features import FeatureStore
from commgraph.topology import Topology, join_hosts
from commgraph.train import checkpoint
from commgraph.train.config import TrainConfig
from commgraph.train.executor import BarrierExecutor, PipelinedExecutor, ReplicateExecutor, Wiring, job_wiring
from commgraph.train.minibatch import SampledEpochs
from commgraph.train.predict import gather_predictions, write_predictions
from commgraph.train.schedule import bin_size_for_memory

SPLITS = ("train", "val", "test")


@dataclass
class EpochRecord:
    """One epoch, summed over the workers (what ``--metrics-out`` holds, one JSON line each)."""

    epoch: int
    loss: float
    train_acc: float | None  # None: not evaluated this epoch (--eval-every), or no node in the split
    val_acc: float | None
    test_acc: float | None
    epoch_seconds: float  # the training step on rank 0
    comm_wait_seconds: float  # rank 0's time blocked on halo or gradient messages during the step
    comm_bytes: int  # halo bytes, forward and backward, all workers
    halo_forward_bytes: list[int]  # per exchanged layer
    halo_backward_bytes: int
    allreduce_bytes: int
    plan: str  # the all-gather plan's planner
    plan_modeled_seconds: float  # one layer's exchange as the simulator prices it
    allreduce: str  # native, or the planned schedule the gradients run
    allreduce_modeled_seconds: float | None  # the gradient all-reduce as the simulator prices it
    steps: int = 1  # training steps in the epoch (sampled batches; 1 for full-graph training)
    sample_seconds: float = 0.0  # rank 0's time drawing batches
    feature_bytes: int = 0  # sampled batches' remote feature rows, all workers
    structure_bytes: int = 0  # their requests (node ids, DGS's column lists), all workers
    sync_bytes: int = 0  # LADIES's probability synchronisation as its sampler counts it (computed locally)

    def line(self) -> str:
        acc = {name: "  -  " if getattr(self, f"{name}_acc") is None else f"{getattr(self, f'{name}_acc'):.3f}"
               for name in SPLITS}
        return (f"epoch {self.epoch:4d}  loss {self.loss:.4f}  train {acc['train']}  val {acc['val']}  "
                f"test {acc['test']}  {self.epoch_seconds * 1e3:8.1f} ms  (waiting {self.comm_wait_seconds * 1e3:6.1f} "
                f"ms)  {self.comm_bytes / 1e6:8.3f} MB")


@dataclass
class TrainResult:
    history: list[dict]  # one record per epoch run (what --metrics-out holds)
    model: GNN  # the trained model, identical on every worker
    best: dict | None  # epoch, val_acc, test_acc of the best validation accuracy (None: no val nodes)


@dataclass
class _Step:
    loss: float
    seconds: float
    wait_seconds: float
    moved: dict[str, int]
    steps: int = 1
    sample_seconds: float = 0.0
    sync_bytes: int = 0


def train_worker(world: World, partition_dir: str | Path, config: TrainConfig) -> TrainResult:
    """Train on part ``world.rank`` of the partition set."""
    return Trainer(world, partition_dir, config).fit()


class Trainer:
    """One worker's training: set-up, then per epoch a step, an evaluation and a checkpoint."""

    def __init__(self, world: World, partition_dir: str | Path, config: TrainConfig):
        self.world, self.config = world, config
        keep_freed_memory()  # every step reallocates its large tensors: reuse them (see runtime.memory)
        threads = os.environ.get("COMMGRAPH_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        self.pset = pset = load_partition_set(partition_dir)
        if pset.num_parts != world.size:
            raise TrainingError(f"{partition_dir} has {pset.num_parts} parts but the job has {world.size} workers; "
                                f"use --workers {pset.num_parts} or re-partition")
        self.part = part = pset.part(world.rank)
        if part.features is None or part.labels is None or part.train_mask is None:
            raise TrainingError(f"{partition_dir}: the graph has no features, labels or train mask to train on")
        self.comm = comm = Communicator(world)
        classes = max(comm.all_gather_object(int(np.max(part.labels, initial=-1)) + 1)) if world.size > 1 else \
            int(np.max(part.labels, initial=-1)) + 1
        torch.manual_seed(config.seed)
        self.model = GNN(config.model, part.features.shape[1], config.hidden, classes, layers=config.layers,
                         heads=config.heads, dropout=config.dropout).to(world.device)
        for param in self.model.parameters():  # same seed gives the same weights; make sure of it
            comm.broadcast_(param.data)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.topology, self.placement = self._topology()
        self.wiring, self.plan_seconds = self._wiring()
        self.allreduce = self._allreduce()
        self.sync = GradientSync(list(self.model.parameters()), comm, self.allreduce.schedule,
                                 devices=self.devices if self.allreduce.schedule is not None else None)
        store = self._features()
        self.executor = self._executor(store)
        self.feature_store = store if config.sampler else None  # a full-graph executor holds what it needs
        self._say(self.executor.feature_note)
        torch.manual_seed(config.seed * 7919 + world.rank)  # dropout masks differ per worker
        self.identity = checkpoint.identity(pset.manifest["graph"]["checksum"], world.size, config)
        self.widths = {"in": int(part.features.shape[1]), "out": classes}
        self.train_total = comm.global_sum([float(np.count_nonzero(part.train_mask))])[0]
        if self.train_total == 0:
            raise TrainingError(f"{partition_dir}: no node is in the training set")
        self.y = torch.from_numpy(np.array(part.labels, dtype=np.int64)).to(world.device)
        self.masks = {name: torch.from_numpy(np.array(getattr(part, f"{name}_mask"), dtype=bool)).to(world.device)
                      for name in SPLITS}
        self.sampled = SampledEpochs(self) if config.sampler else None
        if self.sampled is not None and config.exchange == "replicate":  # evaluation has a table of its own
            self._say(f"mini-batch {self.feature_store.describe()}")
        self.start_epoch, self.best = 1, None
        if config.resume:
            self._resume()
        elif config.checkpoint_dir and world.is_leader:  # a fresh run: another run's best model is not ours
            (Path(config.checkpoint_dir) / checkpoint.BEST).unlink(missing_ok=True)
        self.predicted: torch.Tensor | None = None

    # -- set-up ----------------------------------------------------------------------------------

    def _topology(self) -> tuple[Topology, str | None]:
        """The topology the plans are made for, and the placement. ``detect`` under torchrun across
        machines: every machine's own topology (detected by its first rank, with as many CPU
        workers as it has ranks), joined by a network switch, the ranks of a machine on its worker
        devices in rank order."""
        config, world = self.config, self.world
        if config.topology != "detect" or world.size == 1:
            return job_topology(config.topology, world.size, world.device.type), config.placement
        places = self.comm.all_gather_object(socket.gethostname())
        hosts = list(dict.fromkeys(places))
        if len(hosts) == 1:
            return job_topology("detect", world.size, world.device.type), config.placement
        here = [r for r, host in enumerate(places) if host == places[world.rank]]
        mine = job_topology("detect", len(here), world.device.type).to_dict() if here[0] == world.rank else None
        local = {places[r]: Topology.from_dict(t) for r, t in enumerate(self.comm.all_gather_object(mine))
                 if t is not None}
        workers = {host: [d.id for d in local[host].workers] for host in hosts}
        nth = [places[:r].count(host) for r, host in enumerate(places)]  # the rank's place on its machine
        placement = ",".join(f"{host}/{workers[host][k]}" for host, k in zip(places, nth))
        return join_hosts([(host, local[host]) for host in hosts]), config.placement or placement

    def _wiring(self) -> tuple[Wiring | None, float]:
        """The job's all-gather plan (none for the replicate exchange, which moves nothing per
        layer) and its modelled seconds per layer; printed when this rank chose it."""
        config = self.config
        if config.exchange == "replicate":
            return None, 0.0
        wiring, choice = job_wiring(self.pset, self.world, self.topology, 4 * config.hidden, plan=config.plan,
                                    placement=self.placement, ordering=config.ordering)
        if Path(config.plan).suffix not in (".json", ".npz"):  # the launcher printed a plan it chose
            self._say(choice.describe())
        return wiring, choice.modeled_seconds

    @property
    def devices(self) -> list[str]:
        """The topology device of each rank."""
        if self.wiring is not None:
            return self.wiring.devices
        return parse_placement(self.placement) or [d.id for d in self.topology.workers][: self.world.size]

    def _allreduce(self) -> AllReduceChoice:
        nbytes = sum(p.numel() * p.element_size() for p in self.model.parameters() if p.requires_grad)
        choice = choose_job_allreduce(self.config.allreduce, self.topology, self.devices, nbytes)
        if self.world.size > 1:
            self._say(choice.describe())
        return choice

    def _say(self, line: str) -> None:
        if self.world.is_leader and self.config.progress:
            print(f"commgraph: {line}", file=sys.stderr)

    def _features(self) -> FeatureStore | None:
        """The part's features, placed as ``--features`` says: read by the full-graph executor (not
        ``replicate``, which holds a table of its own) and by the mini-batch trainer's fetches."""
        if self.config.exchange == "replicate" and not self.config.sampler:
            return None
        return FeatureStore.create(self.part.features, self.world.device, self.config.features)

    def _executor(self, store: FeatureStore | None):
        """The full-graph executor on ``store``: training's, or evaluation's in sampled training,
        where its input table is streamed from the store (never a second copy of it; ``replicate``
        holds a table of its own, its hop sets' rows)."""
        config, world, part = self.config, self.world, self.part
        streamed = True if config.sampler else None
        if config.exchange == "replicate":
            return ReplicateExecutor(part, self.pset, self.comm, world.device, config.layers, config.features,
                                     streamed)
        if config.exchange == "barrier":
            return BarrierExecutor(part, self.pset, self.comm, world.device, self.wiring, store, streamed)
        bin_size = config.bin_size
        if bin_size is None:
            bin_size = bin_size_for_memory(_available_memory(world.device), self.model.widths,
                                           len(part.indices) / max(part.num_owned, 1))
        return PipelinedExecutor(part, self.pset, self.comm, world.device, self.wiring, bin_size, store,
                                 streamed)

    def _resume(self) -> None:
        state = checkpoint.load(Path(self.config.checkpoint_dir), self.identity)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"][self.world.rank])
        self.start_epoch = state["epoch"] + 1
        self.best = state.get("best")
        if self.sampled is not None:
            self.sampled.load(state["sampling"][self.world.rank])

    # -- one epoch -------------------------------------------------------------------------------

    def step(self) -> _Step:
        """One epoch's training: a full-graph step, or the sampled batches' steps."""
        if self.sampled is not None:
            epoch = self.sampled.epoch()
            return _Step(epoch.loss, epoch.seconds, epoch.wait_seconds, epoch.moved, epoch.steps,
                         epoch.sample_seconds, epoch.sync_bytes)
        return self.full_graph_step()

    def full_graph_step(self) -> _Step:
        """One full-graph training step: forward, backward, gradient sum, optimiser step."""
        before, waited = dict(self.comm.bytes), self.comm.wait_seconds
        started = time.perf_counter()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.executor.forward(self.model)
        train = self.masks["train"]
        loss = torch.nn.functional.cross_entropy(logits[train], self.y[train], reduction="sum") / self.train_total
        loss.backward()
        halo_wait = self.comm.wait_seconds - waited
        synced = time.perf_counter()
        self.sync.finish()
        sync_wait = time.perf_counter() - synced
        self.optimizer.step()
        if self.world.device.type == "cuda":  # kernels run asynchronously: time the work, not its launch
            torch.cuda.synchronize(self.world.device)
        seconds = time.perf_counter() - started
        moved = {k: v - before.get(k, 0) for k, v in self.comm.bytes.items()}
        return _Step(float(loss.detach()), seconds, halo_wait + sync_wait, moved)

    def evaluate(self) -> dict[str, float]:
        """Correct predictions and nodes of each split on this worker (``train_correct``, ``train_nodes``, ...)."""
        self.model.eval()
        with torch.no_grad():
            self.predicted = self.executor.forward(self.model).argmax(dim=1)
        counts = {}
        for name in SPLITS:
            mask = self.masks[name]
            counts[f"{name}_correct"] = float((self.predicted[mask] == self.y[mask]).sum())
            counts[f"{name}_nodes"] = float(mask.sum())
        return counts

    def record(self, epoch: int, step: _Step, counts: dict[str, float] | None) -> EpochRecord:
        """The epoch's totals over every worker."""
        layers = [f"halo_forward:{i}" for i in range(1, self.config.layers)]
        local = {"loss": step.loss, **(counts or {}), "halo_backward": step.moved.get("halo_backward", 0),
                 "allreduce": step.moved.get("allreduce", 0), **{k: step.moved.get(k, 0) for k in layers},
                 "features": step.moved.get("features", 0), "requests": step.moved.get("requests", 0),
                 "sync": step.sync_bytes}
        total = dict(zip(local, self.comm.global_sum(list(local.values()))))

        def accuracy(name: str) -> float | None:  # None: not evaluated this epoch, or an empty split
            nodes = total.get(f"{name}_nodes", 0)
            return total[f"{name}_correct"] / nodes if nodes else None

        forward = [int(total[k]) for k in layers]
        sampled = int(total["features"]) + int(total["requests"])
        return EpochRecord(epoch, total["loss"], accuracy("train"), accuracy("val"), accuracy("test"), step.seconds,
                           step.wait_seconds, sum(forward) + int(total["halo_backward"]) + sampled, forward,
                           int(total["halo_backward"]), int(total["allreduce"]),
                           self.wiring.plan.planner if self.wiring else "replicate", self.plan_seconds,
                           self.allreduce.name, self.allreduce.modeled_seconds, step.steps, step.sample_seconds,
                           int(total["features"]), int(total["requests"]), int(total["sync"]))

    def checkpoint(self, record: EpochRecord, improved: bool) -> None:
        """After every epoch with ``--checkpoint-dir``: the state to resume from, and the best model."""
        rng = self.comm.all_gather_object(torch.get_rng_state())
        sampling = self.comm.all_gather_object(self.sampled.state()) if self.sampled is not None else None
        if not self.world.is_leader:
            return
        directory = Path(self.config.checkpoint_dir)
        kept = {"epoch": record.epoch, "model": self.model.state_dict(), "identity": self.identity,
                "widths": self.widths}
        checkpoint.save(directory, {**kept, "optimizer": self.optimizer.state_dict(), "rng": rng, "best": self.best,
                                    "sampling": sampling})
        if improved:
            checkpoint.save(directory, {**kept, "best": self.best}, checkpoint.BEST)

    # -- the loop --------------------------------------------------------------------------------

    def fit(self) -> TrainResult:
        config = self.config
        log = _MetricsLog(config, self.world, self.start_epoch)
        bar = _progress(config, self.world, self.start_epoch)
        history = []
        for epoch in range(self.start_epoch, config.epochs + 1):
            step = self.step()
            evaluate = epoch % config.eval_every == 0 or epoch == config.epochs  # the same on every worker
            counts = self.evaluate() if evaluate else None
            record = self.record(epoch, step, counts)
            history.append(asdict(record))
            log.write(record, bar)
            improved = record.val_acc is not None and (self.best is None or record.val_acc > self.best["val_acc"])
            if improved:
                self.best = {"epoch": epoch, "val_acc": record.val_acc, "test_acc": record.test_acc}
            if config.checkpoint_dir:
                self.checkpoint(record, improved)
        log.close()
        if self.sampled is not None:
            self.sampled.close()
        if bar is not None:
            bar.close()
        if config.predictions_out and history:  # the last epoch is always evaluated
            every = gather_predictions(self.comm, self.part, self.predicted)
            if every is not None:
                write_predictions(Path(config.predictions_out), every)
        return TrainResult(history, self.model, self.best)


def _available_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // max(
            int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)
    except (ValueError, OSError):
        return 1 << 30


def _progress(config: TrainConfig, world: World, start: int):
    if not (config.progress and world.is_leader):
        return None
    from tqdm import tqdm

    return tqdm(total=config.epochs, initial=start - 1, desc="training", unit="epoch", leave=False)


class _MetricsLog:
    """Rank 0's epoch lines, the JSONL file and the TensorBoard events. A resumed run drops the
    lines after its checkpoint."""

    def __init__(self, config: TrainConfig, world: World, start_epoch: int):
        self.path = Path(config.metrics_out) if config.metrics_out and world.is_leader else None
        self.leader = world.is_leader
        self.board = None
        if config.tensorboard and world.is_leader:
            from torch.utils.tensorboard import SummaryWriter

            self.board = SummaryWriter(config.tensorboard)
        if self.path is not None:
            kept = []
            if config.resume and self.path.is_file():
                kept = [line for line in self.path.read_text().splitlines()
                        if line.strip() and json.loads(line)["epoch"] < start_epoch]
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("".join(line + "\n" for line in kept))

    def write(self, record: EpochRecord, bar) -> None:
        if not self.leader:
            return
        if self.path is not None:
            with open(self.path, "a") as handle:
                handle.write(json.dumps(asdict(record)) + "\n")
        if self.board is not None:
            for tag, value in (("loss", record.loss), ("accuracy/train", record.train_acc),
                               ("accuracy/val", record.val_acc), ("accuracy/test", record.test_acc),
                               ("seconds/epoch", record.epoch_seconds), ("seconds/comm_wait", record.comm_wait_seconds),
                               ("bytes/comm", record.comm_bytes)):
                if value is not None:
                    self.board.add_scalar(tag, value, record.epoch)
            self.board.flush()
        if bar is not None:
            bar.update(1)
            bar.write(record.line())

    def close(self) -> None:
        if self.board is not None:
            self.board.close()
