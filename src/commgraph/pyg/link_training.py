"""``commgraph train GRAPH --task link``: link prediction trained full-graph through the PyG bridge
(:mod:`commgraph.pyg`), as a user's script would train it.

Before partitioning, the launcher splits the graph's undirected edges once, from ``--seed``, into
training, validation and test pairs (:func:`training_graph`, with :func:`commgraph.pyg.edge_split`):
the partition set is made of the training graph, so held-out edges never carry messages, and the
pairs go to the workers in a file (:class:`HeldOutEdges`). Each worker (:func:`train_link_worker`)
adopts the launcher's world as the bridge's session, builds PyG's own convs for ``--model``, wraps
them with :func:`commgraph.pyg.full_graph` and trains an inner-product decoder with binary
cross-entropy on the training pairs and as many negatives (:func:`commgraph.pyg.negative_sampling`,
a fresh draw each epoch); validation and test AUC (and the test pairs' Hits@K and MRR) come from
the bridge's global metrics.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from commgraph.graph import Graph
from commgraph.logs import get_logger
from commgraph.render.units import count
from commgraph.train.config import TrainConfig

log = get_logger(__name__)

HITS_K = 20
# negatives' seeds: epoch e's training draw is seed * SEED_STRIDE + e; the validation and test
# draws (once, before training) take the last two of the seed's stride
SEED_STRIDE = 1_000_003


@dataclass
class HeldOutEdges:
    """The split's node pairs (global ids, ``u <= v``, ``[2, P]`` each) and the graph's node count."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    num_nodes: int

    def save(self, path: Path) -> None:
        with open(path, "wb") as handle:
            np.savez(handle, train=self.train, val=self.val, test=self.test, num_nodes=self.num_nodes)

    @classmethod
    def load(cls, path: Path) -> HeldOutEdges:
        with np.load(path) as arrays:
            return cls(arrays["train"], arrays["val"], arrays["test"], int(arrays["num_nodes"]))


def training_graph(load: Callable[[], Graph], config: TrainConfig, held_out: Path) -> Graph:
    """The graph ``load`` gives with its validation and test edges removed (what the launcher
    partitions); the split's pairs are written to ``held_out``. The split is
    :func:`commgraph.pyg.edge_split`'s (the same pairs for a seed), made with numpy alone: the
    launcher forks the next job's workers from this process, and a fork copies none of the threads
    a torch operation here would have started, so their pool would hang the forked workers."""
    from commgraph.pyg.link import PairSpace, split_pairs

    graph = load()
    src, dst = graph.edge_list()
    space = PairSpace(graph.num_nodes, graph.num_nodes)
    task = config.task
    split = split_pairs(np.stack([src, dst]), space, True, task.val_edges, task.test_edges, config.optim.seed)
    HeldOutEdges(*(space.pairs(keys) for keys in split.labels), graph.num_nodes).save(held_out)
    keep = split.train
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst[keep], minlength=graph.num_nodes))])
    weights = None if graph.edge_weights is None else graph.edge_weights[keep]
    return replace(graph, indptr=indptr, indices=graph.indices[keep], edge_weights=weights)


def check_link_trainable(name: str, data) -> None:
    """Refuse a graph (or part) without node features to embed."""
    from commgraph.errors import TrainingError

    if data.features is None:
        raise TrainingError(
            f"{name} has no node features to embed: use a dataset that has them (cora, an OGB or "
            "Planetoid folder) or a synthetic graph that makes them, e.g. rmat:nodes=10000,edges=100000,features=64"
        )


@dataclass
class LinkEpochRecord:
    """One epoch of link prediction (what ``--metrics-out`` holds, one JSON line each); the
    metrics are None where the epoch was not evaluated (``--eval-every``)."""

    epoch: int
    loss: float
    val_auc: float | None
    test_auc: float | None
    test_hits: float | None  # Hits@HITS_K of the test pairs against the test negatives
    test_mrr: float | None
    epoch_seconds: float  # the training step on rank 0
    bytes: int  # what the step and its evaluation moved, all workers

    def line(self) -> str:
        def shown(value: float | None) -> str:
            return "  -  " if value is None else f"{value:.3f}"

        return (
            f"epoch {self.epoch:4d}  loss {self.loss:.4f}  val AUC {shown(self.val_auc)}  "
            f"test AUC {shown(self.test_auc)}  {self.epoch_seconds * 1e3:8.1f} ms  {self.bytes / 1e6:8.3f} MB"
        )


def build_encoder(config: TrainConfig, in_features: int):
    """PyG's own conv stack for ``--model``: ``--layers`` convs ``--hidden`` wide (GAT's hidden
    layers with ``--heads`` heads, concatenated), ReLU and dropout between them."""
    import torch
    from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv

    gnn = config.gnn

    def conv(width_in: int, last: bool):
        if gnn.model == "gcn":
            return GCNConv(width_in, gnn.hidden), gnn.hidden
        if gnn.model == "sage":
            return SAGEConv(width_in, gnn.hidden), gnn.hidden
        if gnn.model == "gat":
            heads = 1 if last else gnn.heads
            return GATConv(width_in, gnn.hidden, heads=heads), gnn.hidden * heads
        mlp = torch.nn.Sequential(
            torch.nn.Linear(width_in, gnn.hidden), torch.nn.ReLU(), torch.nn.Linear(gnn.hidden, gnn.hidden)
        )
        return GINConv(mlp), gnn.hidden

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList()
            width = in_features
            for i in range(gnn.layers):
                layer, width = conv(width, i == gnn.layers - 1)
                self.convs.append(layer)

        def forward(self, x, edge_index):
            for i, layer in enumerate(self.convs):
                x = layer(x, edge_index)
                if i < len(self.convs) - 1:
                    x = torch.nn.functional.dropout(x.relu(), gnn.dropout, self.training)
            return x

    return Encoder()


def resolved_link_data(config: TrainConfig, site) -> dict:
    """What ``--task link``'s workers receive: ``config`` with the job's options the launcher
    decided (``site``, a :class:`~commgraph.runtime.options.JobSite`) and its ``allreduce`` decided
    for the encoder's gradients (float32, sized on PyTorch's ``meta`` device)."""
    import torch

    from commgraph.train.resolve import allreduce_decided

    def gradient() -> int:
        with torch.device("meta"):
            encoder = build_encoder(config, int(site.pset.part(0, check=False).features.shape[1]))
        return sum(p.numel() * p.element_size() for p in encoder.parameters())

    return replace(config, job=site.options, comm=allreduce_decided(config.comm, site, gradient)).to_dict()


def _both_ways(pairs):
    import torch

    return torch.cat([pairs, pairs.flip(0)], 1)


def train_link_worker(world, partition_dir: Path, config: TrainConfig, held_out: Path) -> list[dict]:
    """One rank's link-prediction training (see the module description); rank 0 prints the epoch
    lines (with ``progress``) and writes ``--metrics-out``. Every epoch's record, on every rank."""
    import torch
    import torch.nn.functional as F

    import commgraph.pyg as cg
    from commgraph.phases import RUNNING
    from commgraph.pyg.world import adopted

    edges = HeldOutEdges.load(held_out)
    seed = config.optim.seed
    torch.manual_seed(seed)
    with adopted(world) as session:
        device = world.device
        part = cg.partition(partition_dir)
        model = cg.full_graph(
            build_encoder(config, int(part.x.shape[1])).to(device),
            part,
            plan=config.job.plan,
            topology=config.job.topology,
            allreduce=config.comm.allreduce,
        )
        x, edge_index = part.x.to(device), part.edge_index.to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
        n = edges.num_nodes
        train_pos = torch.from_numpy(edges.train)
        train_known = _both_ways(train_pos)
        every_known = torch.cat(
            [train_known, _both_ways(torch.from_numpy(edges.val)), _both_ways(torch.from_numpy(edges.test))], 1
        )
        held = {}  # split -> (label pairs, labels): positives, then as many negatives drawn once
        for offset, name in ((1, "val"), (2, "test")):
            pos = torch.from_numpy(getattr(edges, name))
            neg = cg.negative_sampling(every_known, n, pos.shape[1], seed=seed * SEED_STRIDE + SEED_STRIDE - offset)
            held[name] = (torch.cat([pos, neg], 1), torch.cat([torch.ones(pos.shape[1]), torch.zeros(neg.shape[1])]))

        def scores(z, pairs, labels):
            rows, index, label, _ = cg.edge_embeddings(z, pairs, part, labels.to(z.device))
            return (rows[index[0]] * rows[index[1]]).sum(-1), label

        def moved() -> int:
            return sum(model.bytes.values()) + sum(session.comm.bytes.values())

        def evaluate() -> dict[str, float | None]:
            model.eval()
            with torch.no_grad():
                z = model(x, edge_index)
                out = {}
                for name, (pairs, labels) in held.items():
                    if pairs.shape[1] == 0:
                        out[f"{name}_auc"] = None
                        continue
                    score, label = scores(z, pairs, labels)
                    out[f"{name}_auc"] = cg.auc(score, label)
                    if name == "test":
                        pos, neg = score[label == 1], score[label == 0]
                        out["test_hits"], out["test_mrr"] = cg.hits_at_k(pos, neg, HITS_K), cg.mrr(pos, neg)
            model.train()
            return out

        metrics = Path(config.log.metrics_out) if config.log.metrics_out and world.is_leader else None
        if metrics is not None:
            metrics.parent.mkdir(parents=True, exist_ok=True)
            metrics.write_text("")
        history = []
        world.report_phase(RUNNING)  # set-up is over: from here each wait is bounded by --timeout
        for epoch in range(1, config.optim.epochs + 1):
            before = moved()
            start = time.perf_counter()
            optimizer.zero_grad()
            z = model(x, edge_index)
            neg = cg.negative_sampling(train_known, n, train_pos.shape[1], seed=seed * SEED_STRIDE + epoch)
            labels = torch.cat([torch.ones(train_pos.shape[1]), torch.zeros(neg.shape[1])])
            score, label = scores(z, torch.cat([train_pos, neg], 1), labels)
            loss = cg.global_mean(F.binary_cross_entropy_with_logits(score, label, reduction="none"))
            loss.backward()
            optimizer.step()
            seconds = time.perf_counter() - start
            evaluated = epoch % config.log.eval_every == 0 or epoch == config.optim.epochs
            found = evaluate() if evaluated else {}
            step_bytes = int(cg.global_sum(torch.tensor([float(moved() - before)])).item())
            record = LinkEpochRecord(
                epoch,
                float(loss.item()),
                found.get("val_auc"),
                found.get("test_auc"),
                found.get("test_hits"),
                found.get("test_mrr"),
                seconds,
                step_bytes,
            )
            history.append(asdict(record))
            if world.is_leader:
                if metrics is not None:
                    with open(metrics, "a") as handle:
                        handle.write(json.dumps(asdict(record)) + "\n")
                if config.log.progress:
                    log.info(record.line())
    return history


def done_line(history: list[dict]) -> str:
    """The run's last line: its last epoch and its best validation AUC."""
    last = history[-1]
    evaluated = [h for h in history if h["val_auc"] is not None]
    best = max(evaluated, key=lambda h: h["val_auc"]) if evaluated else None

    def shown(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"

    test = shown(last["test_auc"])
    hits = (
        "" if last["test_hits"] is None else f", test Hits@{HITS_K} {last['test_hits']:.4f}, MRR {last['test_mrr']:.4f}"
    )
    return f"done: {count(last['epoch'], 'epoch')}, loss {last['loss']:.4f}, test AUC {test}{hits}" + (
        f"; best validation AUC {best['val_auc']:.4f} at epoch {best['epoch']} (test {shown(best['test_auc'])})"
        if best
        else ""
    )
