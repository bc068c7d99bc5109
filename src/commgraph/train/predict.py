"""Prediction with a trained model: the whole graph in one process, or a partition set across
workers, and the prediction files.

Training computes exactly the single-graph model whatever the number of workers, so a checkpoint
can be used either way. In one process: one block over every node and one pass per layer, without
dropout; GCN normalises with the degrees of the graph it is given, as PyG does, so a model can also
label a graph it was not trained on, if the features have the same width. Across workers: each
labels its own part with the layer-wise (barrier) exchange, for graphs whose activations do not fit
in one process, and rank 0 assembles the result.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from commgraph.errors import TrainingError
from commgraph.graph import Graph
from commgraph.graph.core import loop_free_in_degrees
from commgraph.graph.nodefile import check_node_file, write_node_values
from commgraph.nn import GNN
from commgraph.partition.store import Part
from commgraph.phases import RUNNING
from commgraph.runtime import Communicator, World
from commgraph.runtime.job import Job
from commgraph.runtime.options import JobOptions
from commgraph.train import checkpoint
from commgraph.train.executor import BarrierExecutor, row_block

SPLITS = ("train", "val", "test")


def load_model(checkpoint_dir: str | Path, best: bool = False) -> tuple[GNN, dict]:
    """The model a ``--checkpoint-dir`` holds (after the last epoch, or with ``best`` after the epoch
    with the best validation accuracy), in eval mode, and the checkpoint's ``identity`` (model
    options, graph checksum, workers) with its ``epoch``."""
    name = checkpoint.BEST if best else checkpoint.FILE
    if best and not (Path(checkpoint_dir) / name).is_file() and (Path(checkpoint_dir) / checkpoint.FILE).is_file():
        raise TrainingError(
            f"{checkpoint_dir} has no {name}: the run evaluated no epoch on validation nodes "
            "(the graph has none, or it predates best-model checkpoints); drop --best"
        )
    state = checkpoint.read(Path(checkpoint_dir), name)
    if "widths" not in state:
        raise TrainingError(
            f"{Path(checkpoint_dir) / name} predates prediction support (it does not "
            "record the model's input and output widths): train again to write a new one"
        )
    identity = state["identity"]
    model = GNN(
        identity["model"],
        state["widths"]["in"],
        identity["hidden"],
        state["widths"]["out"],
        layers=identity["layers"],
        heads=identity["heads"],
    )
    try:
        model.load_state_dict(state["model"])
    except RuntimeError:  # torch's message: one line per tensor
        raise TrainingError(
            f"{Path(checkpoint_dir) / name}: its weights do not fit the {identity['model']} model it names "
            f"({identity['layers']} layers, hidden {identity['hidden']}, widths {state['widths']}); "
            "the file is damaged: train again"
        ) from None
    model.eval()
    return model, {**identity, "epoch": state["epoch"]}


def predict(model: GNN, graph: Graph, device: str | torch.device = "cpu") -> torch.Tensor:
    """Logits of every node of ``graph`` (one row per node, one column per class)."""
    if graph.features is None:
        raise TrainingError(f"{graph.name} has no node features to predict from")
    if graph.features.shape[1] != model.in_dim:
        raise TrainingError(
            f"{graph.name} has {graph.features.shape[1]} features per node, but the model was "
            f"trained on {model.in_dim}: predict on a graph with the training graph's features"
        )
    n = graph.num_nodes
    degree = torch.from_numpy(loop_free_in_degrees(graph.indptr, graph.indices).astype(np.float32))
    block = row_block(graph.indptr, graph.indices, 0, n, n, degree, device)
    model = model.to(device).eval()
    with torch.no_grad():
        h = model.encode(torch.from_numpy(graph.features).to(device))
        for index in range(model.num_layers):
            h = model.layer(index, h, block)
        return model.decode(h)


def predict_part(
    world: World,
    partition_dir: str | Path,
    checkpoint_dir: str | Path,
    best: bool = False,
    job_options: JobOptions = JobOptions(),
) -> tuple[np.ndarray | None, dict, dict]:
    """This worker's share of a distributed prediction over a partition set: (the predicted class
    of every node on rank 0, None elsewhere; accuracy and node count per split; the checkpoint's
    identity and epoch, as ``load_model`` gives them)."""
    job = Job(world, partition_dir, job_options)
    part = job.part
    model, trained = load_model(checkpoint_dir, best)
    if part.features is None or part.features.shape[1] != model.in_dim:
        width = "no" if part.features is None else part.features.shape[1]
        raise TrainingError(
            f"{partition_dir} has {width} features per node, but the model was trained on {model.in_dim}"
        )
    comm = job.comm
    executor = BarrierExecutor(job, job.wire(4 * model.widths[1]), streamed=True)  # one forward pass
    model.to(world.device)
    world.report_phase(RUNNING)
    with torch.no_grad():
        predicted = executor.forward(model).argmax(dim=1).cpu().numpy()
    accuracy = split_accuracy(comm.global_sum(split_counts(part, predicted)))
    return gather_predictions(comm, part, predicted), accuracy, trained


def split_counts(data: Graph | Part, predicted: np.ndarray) -> list[float]:
    """(correct, nodes) for each of train, val and test over ``data``'s nodes (a graph, or a part's
    own nodes, whose counts sum over the workers); zeros for a split it does not have."""
    counts = []
    for split in SPLITS:
        mask = getattr(data, f"{split}_mask")
        if data.labels is None or mask is None:
            counts += [0.0, 0.0]
        else:
            mask = np.asarray(mask)
            counts += [float((predicted[mask] == np.asarray(data.labels)[mask]).sum()), float(mask.sum())]
    return counts


def split_accuracy(counts: list[float]) -> dict[str, dict]:
    """Accuracy and node count of each split with nodes, from ``split_counts``."""
    return {
        split: {"accuracy": counts[2 * i] / counts[2 * i + 1], "nodes": int(counts[2 * i + 1])}
        for i, split in enumerate(SPLITS)
        if counts[2 * i + 1] > 0
    }


def gather_predictions(comm: Communicator, part: Part, predicted: torch.Tensor | np.ndarray) -> np.ndarray | None:
    """Every worker's predictions for its own nodes, assembled on rank 0 in global node order
    (None on the other ranks)."""
    if isinstance(predicted, torch.Tensor):
        predicted = predicted.cpu().numpy()
    pieces = comm.all_gather_object((np.asarray(part.owned), predicted))
    if comm.world.rank != 0:
        return None
    result = np.empty(sum(owned.shape[0] for owned, _ in pieces), dtype=np.int64)
    for owned, classes in pieces:
        result[owned] = classes
    return result


def check_predictions_path(path: Path) -> None:
    """Refuse an output name we cannot write, before any work is spent on the predictions."""
    check_node_file(path, TrainingError, "a predictions file")


def write_predictions(path: Path, predicted: np.ndarray, node_ids: np.ndarray | None = None) -> None:
    """The predicted class of every node, atomically: ``.npy`` (one int64 per node) or ``.csv``
    (``node,class``, under ``node_ids`` when the graph's loader kept its original ids)."""
    check_predictions_path(path)
    write_node_values(path, predicted.astype(np.int64), node_ids, column="class")
