"""The G3 full-graph trainer: what one worker does, epoch after epoch.

Every worker builds the same model from the same seed, trains on its part through an executor
(``pipelined``, ``barrier`` or ``replicate``), and sums gradients with the others. The loss is the
sum over the worker's training nodes divided by the *global* number of training nodes, so the
summed gradient is exactly the single-worker gradient and every worker takes the same step.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from commgraph.errors import TrainingError
from commgraph.nn import GNN
from commgraph.partition import load_partition_set
from commgraph.runtime import Communicator, GradientSync, World, keep_freed_memory
from commgraph.train import checkpoint
from commgraph.train.executor import EXCHANGES, BarrierExecutor, PipelinedExecutor, ReplicateExecutor
from commgraph.train.predict import gather_predictions, write_predictions
from commgraph.train.schedule import bin_size_for_memory


@dataclass
class TrainConfig:
    model: str = "sage"
    epochs: int = 200
    layers: int = 2
    hidden: int = 16
    heads: int = 4
    dropout: float = 0.5
    lr: float = 0.01
    weight_decay: float = 5e-4
    seed: int = 0
    exchange: str = "pipelined"
    bin_size: int | None = None
    eval_every: int = 1  # evaluate every N epochs and after the last; each evaluation is one more forward pass
    metrics_out: str | None = None
    checkpoint_dir: str | None = None
    predictions_out: str | None = None  # the last epoch's predicted class of every node (.npy or .csv)
    resume: bool = False
    progress: bool = True


@dataclass
class TrainResult:
    history: list[dict]  # one record per epoch run (what --metrics-out holds)
    model: GNN  # the trained model, identical on every worker
    best: dict | None  # epoch, val_acc, test_acc of the best validation accuracy (None: no val nodes)


def train_worker(world: World, partition_dir: str | Path, config: TrainConfig) -> TrainResult:
    """Train on part ``world.rank`` of the partition set."""
    if config.exchange not in EXCHANGES:
        raise TrainingError(f"unknown --exchange {config.exchange!r}; choose one of {', '.join(EXCHANGES)}")
    if config.epochs < 1:
        raise TrainingError("--epochs must be >= 1")
    if config.eval_every < 1:
        raise TrainingError("--eval-every must be >= 1")
    keep_freed_memory()  # every step reallocates its large tensors: reuse them (see runtime.memory)
    threads = os.environ.get("COMMGRAPH_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    pset = load_partition_set(partition_dir)
    if pset.num_parts != world.size:
        raise TrainingError(f"{partition_dir} has {pset.num_parts} parts but the job has {world.size} workers; "
                            f"use --workers {pset.num_parts} or re-partition")
    part = pset.part(world.rank)
    if part.features is None or part.labels is None or part.train_mask is None:
        raise TrainingError(f"{partition_dir}: the graph has no features, labels or train mask to train on")
    comm = Communicator(world)
    classes = _global_max(comm, int(np.max(part.labels, initial=-1)) + 1)
    torch.manual_seed(config.seed)
    model = GNN(config.model, part.features.shape[1], config.hidden, classes, layers=config.layers,
                heads=config.heads, dropout=config.dropout).to(world.device)
    for param in model.parameters():  # same seed gives the same weights; make sure of it
        comm.broadcast_(param.data)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    sync = GradientSync(list(model.parameters()), comm)
    executor = _executor(config, part, pset, comm, world, model)
    torch.manual_seed(config.seed * 7919 + world.rank)  # dropout masks differ per worker
    identity = {"graph": pset.manifest["graph"]["checksum"], "workers": world.size,
                **{k: v for k, v in asdict(config).items() if k in ("model", "layers", "hidden", "heads")}}
    widths = {"in": int(part.features.shape[1]), "out": classes}
    start_epoch, best = 1, None
    if config.resume:
        if not config.checkpoint_dir:
            raise TrainingError("--resume needs --checkpoint-dir")
        state = checkpoint.load(Path(config.checkpoint_dir), identity)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"][world.rank])
        start_epoch = state["epoch"] + 1
        best = state.get("best")
    elif config.checkpoint_dir and world.is_leader:  # a fresh run: another run's best model is not ours
        (Path(config.checkpoint_dir) / checkpoint.BEST).unlink(missing_ok=True)
    train_total = comm.global_sum([float(np.count_nonzero(part.train_mask))])[0]
    if train_total == 0:
        raise TrainingError(f"{partition_dir}: no node is in the training set")
    y = torch.from_numpy(np.array(part.labels, dtype=np.int64)).to(world.device)
    masks = {name: torch.from_numpy(np.array(getattr(part, f"{name}_mask"), dtype=bool)).to(world.device)
             for name in ("train", "val", "test")}
    log = _MetricsLog(config, world, start_epoch)
    history = []
    bar = _progress(config, world, start_epoch)
    for epoch in range(start_epoch, config.epochs + 1):
        before = dict(comm.bytes)
        started = time.perf_counter()
        model.train()
        optimizer.zero_grad(set_to_none=True)
        logits = executor.forward(model)
        loss = torch.nn.functional.cross_entropy(logits[masks["train"]], y[masks["train"]], reduction="sum") / train_total
        loss.backward()
        sync.finish()
        optimizer.step()
        if world.device.type == "cuda":  # kernels run asynchronously: time the work, not its launch
            torch.cuda.synchronize(world.device)
        seconds = time.perf_counter() - started
        moved = {k: v - before.get(k, 0) for k, v in comm.bytes.items()}
        evaluate = epoch % config.eval_every == 0 or epoch == config.epochs  # the same on every worker
        counts = [float(loss.detach())]
        if evaluate:
            model.eval()
            with torch.no_grad():
                predicted = executor.forward(model).argmax(dim=1)
            for name in ("train", "val", "test"):
                counts += [float((predicted[masks[name]] == y[masks[name]]).sum()), float(masks[name].sum())]
        else:
            counts += [0.0] * 6
        layers = [moved.get(f"halo_forward:{i}", 0) for i in range(1, config.layers)]
        totals = comm.global_sum(counts + [moved.get("halo_backward", 0), moved.get("allreduce", 0)] + layers)
        forward_bytes = [int(b) for b in totals[9:]]
        record = {"epoch": epoch, "loss": totals[0],
                  **{f"{name}_acc": totals[1 + 2 * i] / max(totals[2 + 2 * i], 1) if evaluate else None
                     for i, name in enumerate(("train", "val", "test"))},
                  "epoch_seconds": seconds, "comm_bytes": sum(forward_bytes) + int(totals[7]),
                  "halo_forward_bytes": forward_bytes, "halo_backward_bytes": int(totals[7]),
                  "allreduce_bytes": int(totals[8])}
        history.append(record)
        log.write(record, bar)
        validated = evaluate and totals[4] > 0  # totals[4]: validation nodes, summed over the workers
        improved = validated and (best is None or record["val_acc"] > best["val_acc"])
        if improved:
            best = {"epoch": epoch, "val_acc": record["val_acc"], "test_acc": record["test_acc"]}
        if config.checkpoint_dir:
            rng = comm.all_gather_object(torch.get_rng_state())
            if world.is_leader:
                kept = {"epoch": epoch, "model": model.state_dict(), "identity": identity, "widths": widths}
                checkpoint.save(Path(config.checkpoint_dir), {
                    **kept, "optimizer": optimizer.state_dict(), "rng": rng, "best": best})
                if improved:
                    checkpoint.save(Path(config.checkpoint_dir), {**kept, "best": best}, checkpoint.BEST)
    if bar is not None:
        bar.close()
    if config.predictions_out and history:  # the last epoch is always evaluated
        every = gather_predictions(comm, part, predicted)
        if every is not None:
            write_predictions(Path(config.predictions_out), every)
    return TrainResult(history, model, best)


def _executor(config: TrainConfig, part, pset, comm, world, model):
    if config.exchange == "replicate":
        return ReplicateExecutor(part, pset, comm, world.device, config.layers)
    if config.exchange == "barrier" or world.backend == "nccl":
        # NCCL matches point-to-point messages by issue order, not by tag, so bins sent in the
        # order they finish could cross; on NCCL each layer is exchanged as one group instead
        if config.exchange == "pipelined" and world.is_leader and world.size > 1:
            print("commgraph: NCCL has no message tags: using the layer-wise (barrier) exchange", file=sys.stderr)
        return BarrierExecutor(part, pset, comm, world.device)
    bin_size = config.bin_size
    if bin_size is None:
        available = _available_memory(world.device)
        bin_size = bin_size_for_memory(available, model.widths, len(part.indices) / max(part.num_owned, 1))
    return PipelinedExecutor(part, pset, comm, world.device, bin_size)


def _available_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // max(
            int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)
    except (ValueError, OSError):
        return 1 << 30


def _global_max(comm: Communicator, value: int) -> int:
    values = comm.all_gather_object(value) if comm.world.size > 1 else [value]
    return max(values)


def _progress(config: TrainConfig, world: World, start: int):
    if not (config.progress and world.is_leader):
        return None
    from tqdm import tqdm

    return tqdm(total=config.epochs, initial=start - 1, desc="training", unit="epoch", leave=False)


class _MetricsLog:
    """Rank 0's epoch lines and the JSONL file. A resumed run drops the lines after its checkpoint."""

    def __init__(self, config: TrainConfig, world: World, start_epoch: int):
        self.path = Path(config.metrics_out) if config.metrics_out and world.is_leader else None
        self.leader = world.is_leader
        if self.path is not None:
            kept = []
            if config.resume and self.path.is_file():
                kept = [line for line in self.path.read_text().splitlines()
                        if line.strip() and json.loads(line)["epoch"] < start_epoch]
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("".join(line + "\n" for line in kept))

    def write(self, record: dict, bar) -> None:
        if not self.leader:
            return
        if self.path is not None:
            with open(self.path, "a") as handle:
                handle.write(json.dumps(record) + "\n")
        acc = {name: "  -  " if record[f"{name}_acc"] is None else f"{record[f'{name}_acc']:.3f}"
               for name in ("train", "val", "test")}
        line = (f"epoch {record['epoch']:4d}  loss {record['loss']:.4f}  train {acc['train']}  "
                f"val {acc['val']}  test {acc['test']}  {record['epoch_seconds'] * 1e3:8.1f} ms  "
                f"{record['comm_bytes'] / 1e6:8.3f} MB")
        if bar is not None:
            bar.update(1)
            bar.write(line)
