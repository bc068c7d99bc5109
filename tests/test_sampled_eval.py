"""Sampled evaluation under a memory budget (``commgraph.train.sampled_eval``): its estimate, its
accuracies at fanout -1 against the full-graph pass's, and the options it refuses."""

from __future__ import annotations

import json

import numpy as np
import pytest

from commgraph.errors import TrainingError
from commgraph.plan.memory import estimate_memory
from commgraph.train.config import TrainConfig
from commgraph.train.shape import job_shape
from forked import run_commgraph

TRAIN = ("--sampler", "neighbor", "--fanout", "5,5", "--batch-size", "64", "--hidden", "16", "--epochs", "2")


def test_under_a_budget_evaluation_is_a_batch_and_the_minimum_drops(cora_set):
    config = TrainConfig.build(sampler="neighbor", fanouts=(5, 5), batch_size=64, hidden=16, memory_budget=1 << 34)
    shape = job_shape(config, cora_set, 2)
    assert shape.eval_fanouts == (5, 5)
    sampled = estimate_memory(cora_set, shape)
    full = estimate_memory(cora_set, shape.__class__(**{**shape.__dict__, "eval_fanouts": None}))
    assert sampled.worker["evaluation"] == sampled.worker["tables"]  # a batch at the training fanouts
    assert "evaluation" not in sampled.machine  # no machine-wide layer tables
    assert sampled.minimum_bytes < full.minimum_bytes
    # on Cora the full-graph pass (the machine's shared tables and each worker's) set the minimum;
    # sampled, the evaluation is as large as a step's tables, and the minimum drops by the difference
    full_evaluation = full.machine["evaluation"] + 2 * full.worker["evaluation"]
    assert full_evaluation > 2 * full.worker["tables"]
    assert full.minimum_bytes - sampled.minimum_bytes == full_evaluation - 2 * sampled.worker["tables"]
    assert job_shape(TrainConfig.build(sampler="neighbor", hidden=16), cora_set, 2).eval_fanouts is None


def test_eval_fanout_is_refused_where_no_sampled_evaluation_runs():
    with pytest.raises(TrainingError, match="runs under memory_budget.*add memory_budget"):
        TrainConfig.build(sampler="neighbor", eval_fanouts=(5, 5))
    with pytest.raises(TrainingError, match="eval_fanouts gives 1 values but the model has layers 2"):
        TrainConfig.build(sampler="neighbor", eval_fanouts=(5,), memory_budget=1 << 30)
    with pytest.raises(TrainingError, match="eval_fanouts is an option of sampler neighbor"):
        TrainConfig.build(sampler="dgs", eval_fanouts=(5, 5), memory_budget=1 << 30)
    assert (
        TrainConfig.build(sampler="dgs", memory_budget=1 << 30).sampling.eval_fanouts is None
    )  # DGS: the full-graph pass
    assert TrainConfig.build(sampler="cluster", memory_budget=1 << 30).sampling.eval_fanouts == (10, 10)


def _run(partdir, out, *options):
    job = run_commgraph(
        ["train", str(partdir), "--metrics-out", str(out / "m.jsonl"), "--predictions-out", str(out / "p.npy")]
        + ["--quiet", "--timeout", "300", *TRAIN, *options]
    )
    assert job.returncode == 0, job.stderr
    records = [json.loads(line) for line in (out / "m.jsonl").read_text().splitlines()]
    return records, np.load(out / "p.npy"), job.stderr


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_at_fanout_minus_one_the_accuracies_are_the_full_graph_passes(cora_set, tmp_path):
    """Two workers: the capped run's losses equal the uncapped one's bit for bit, so its model is
    the same; evaluating every node's whole receptive field by batches gives the full-graph
    pass's accuracies and predictions."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "capped").mkdir()
    plain, plain_predicted, _ = _run(cora_set.path, tmp_path / "plain")
    capped, capped_predicted, _ = _run(
        cora_set.path, tmp_path / "capped", "--memory-budget", "2G", "--eval-fanout", "-1,-1"
    )
    keys = ("loss", "train_acc", "val_acc", "test_acc")
    assert [[r[k] for k in keys] for r in capped] == [[r[k] for k in keys] for r in plain]
    assert np.array_equal(capped_predicted, plain_predicted)
