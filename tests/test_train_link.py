"""``commgraph train GRAPH --task link``: link prediction trained through the PyG bridge
(:mod:`commgraph.pyg.link_training`). The jobs' ranks are forked from pytest's process
(:func:`forked.run_commgraph`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from commgraph.errors import TrainingError
from commgraph.graph import load_graph, to_pyg
from commgraph.pyg import edge_split
from commgraph.pyg.link_training import HeldOutEdges, training_graph
from commgraph.train.config import TrainConfig
from forked import run_commgraph


def _link(tmp_path: Path, workers: int, *options: str, quiet: bool = True):
    out = tmp_path / f"link-{workers}.jsonl"
    job = run_commgraph(
        [
            "train",
            "cora",
            "--task",
            "link",
            "--workers",
            str(workers),
            "--epochs",
            "3",
            "--dropout",
            "0",
            "--metrics-out",
            str(out),
            "--timeout",
            "60",
            *(["--quiet"] if quiet else []),
            *options,
        ]
    )
    assert job.returncode == 0, job.stderr
    return job, [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.multiproc
def test_link_two_workers_train_as_one(tmp_path):
    # two jobs from one process: the second's ranks fork from where the first split its edges
    two, records = _link(tmp_path, 2, quiet=False)
    assert len(records) == 3
    assert [r["epoch"] for r in records] == [1, 2, 3]
    assert "val AUC" in two.stderr and "test AUC" in two.stderr
    assert two.stdout.splitlines()[0].startswith("done: 3 epochs")
    assert all(set(r) >= {"loss", "val_auc", "test_auc", "epoch_seconds", "bytes"} for r in records)
    assert records[-1]["bytes"] > 0  # the halo, the label edges' rows and the gradients crossed
    _, alone = _link(tmp_path, 1)
    for a, b in zip(records, alone, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["test_auc"] == pytest.approx(b["test_auc"], abs=0.01)
        assert 0.0 <= a["test_auc"] <= 1.0
    assert alone[-1]["bytes"] == 0 or alone[-1]["bytes"] < records[-1]["bytes"]


@pytest.mark.parametrize(
    "options, said",
    [
        (["--task", "link", "--sampler", "neighbor"], "--sampler is node classification's"),
        (["--task", "link", "--model", "commnet"], "--task link builds PyG's"),
        (["--task", "link", "--val-edges", "0.6", "--test-edges", "0.5"], "summing below 1"),
        (["--val-edges", "0.2"], "--val-edges splits edges for --task link"),
    ],
)
def test_link_refuses_bad_combinations(options, said):
    job = run_commgraph(["train", "cora", "--epochs", "1", *options])
    assert job.returncode == 2
    lines = job.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], job.stderr


def test_link_refuses_a_partition_set(tmp_path):
    from commgraph.partition import partition_graph, partition_metrics, write_partition_set

    graph = load_graph("cora")
    partdir = tmp_path / "set"
    assignment, _ = partition_graph(graph, 2, "chunk", 0)
    write_partition_set(
        graph,
        assignment,
        2,
        partdir,
        method="chunk",
        seed=0,
        seconds=0.0,
        metrics=partition_metrics(graph, assignment, 2),
    )
    job = run_commgraph(["train", str(partdir), "--task", "link", "--epochs", "1"])
    assert job.returncode == 2
    assert len(job.stderr.strip().splitlines()) == 1 and "holds no held-out edges" in job.stderr


def test_training_graph_holds_no_held_out_edge(tmp_path):
    config = TrainConfig.build(task="link", val_edges=0.05, test_edges=0.1, seed=4)
    graph = load_graph("cora")
    train = training_graph(lambda: graph, config, tmp_path / "a.npz")
    again = training_graph(lambda: graph, config, tmp_path / "b.npz")
    held, same = HeldOutEdges.load(tmp_path / "a.npz"), HeldOutEdges.load(tmp_path / "b.npz")
    for name in ("train", "val", "test"):
        assert np.array_equal(getattr(held, name), getattr(same, name))
    n = graph.num_nodes
    src, dst = train.edge_list()
    kept = set((np.minimum(src, dst) * n + np.maximum(src, dst)).tolist())
    for name in ("val", "test"):
        pairs = getattr(held, name)
        assert pairs.shape[1] > 0
        assert not kept & set((pairs[0] * n + pairs[1]).tolist())
    assert set((held.train[0] * n + held.train[1]).tolist()) <= kept
    assert train.num_nodes == n and train.features is not None
    assert np.array_equal(again.edge_list()[0], src)
    pyg = edge_split(to_pyg(graph), num_val=0.05, num_test=0.1, seed=4)  # the bridge's split, pair for pair
    for name, split in zip(("train", "val", "test"), pyg, strict=True):
        assert np.array_equal(getattr(held, name), split.edge_label_index.numpy())
    kept_by_pyg = pyg.train.edge_index.numpy()
    assert np.array_equal(np.sort(src * n + dst), np.sort(kept_by_pyg[0] * n + kept_by_pyg[1]))


def test_link_options_checked_when_made():
    with pytest.raises(TrainingError, match="^exchange is node classification's"):
        TrainConfig.build(task="link", exchange="barrier")
    assert TrainConfig.build(task="link", model="gat").task.task == "link"
