"""Distributed training: exactness against one worker, bytes moved, failures, resume, torchrun."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from commgraph.cli.main import main
from commgraph.graph import load_graph
from commgraph.partition import load_partition_set, partition_graph, partition_metrics, write_partition_set
from commgraph.runtime import launch_local

TESTS = Path(__file__).parent
GRAPHS = {"cora": "cora", "sbm": "sbm:nodes=1500,classes=4,features=24,seed=3"}
MODELS = ("gcn", "sage", "gat", "gin", "commnet")
EPOCHS = 20


@pytest.fixture(scope="module")
def partition_sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("parts")
    sets = {}
    for key, spec in GRAPHS.items():
        graph = load_graph(spec)
        for parts in (1, 2, 4):
            assignment, _ = partition_graph(graph, parts, "g3" if parts > 1 else "chunk", 0)
            out = root / f"{key}-{parts}"
            write_partition_set(graph, assignment, parts, out, method="g3", seed=0, seconds=0.0,
                                metrics=partition_metrics(graph, assignment, parts))
            sets[(key, parts)] = out
    return sets


def _run_job(partdir: Path, runs: dict, workers: int, out: Path, monkeypatch) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "spec.json"
    spec.write_text(json.dumps({"partdir": str(partdir), "out": str(out), "runs": runs}))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    assert launch_local([str(spec)], workers, grace=30, module="dist_driver") == 0
    return {name: dict(np.load(out / f"{name}.npz")) for name in runs}


def _runs(exchanges: dict[str, str]) -> dict:
    common = {"epochs": EPOCHS, "hidden": 8, "heads": 2, "dropout": 0.0, "seed": 1}
    return {f"{model}-{how}": {**common, "model": model, "exchange": how,
                               **({"bin_size": 64} if how == "pipelined-bins" else {}),
                               **({"exchange": "pipelined"} if how == "pipelined-bins" else {})}
            for model, how in exchanges.items()}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_multi_worker_training_equals_one_worker(graph, partition_sets, tmp_path, monkeypatch):
    """Every model, 2 and 4 workers: the same loss every epoch and the same final weights as one
    worker, within 1e-4; forward bytes per exchanged layer are exactly sum |V_i^remote| x width x 4."""
    single = _run_job(partition_sets[(graph, 1)], _runs({m: "pipelined" for m in MODELS}), 1,
                      tmp_path / "w1", monkeypatch)
    for workers in (2, 4):
        runs = _runs({m: "pipelined" for m in MODELS})
        if workers == 4:  # small bins: many messages, out-of-order arrival, eager scheduling
            runs.update(_runs({m: "pipelined-bins" for m in ("sage", "gat")}))
        else:  # the two baselines compute the same function
            runs.update(_runs({m: how for m in ("gcn", "commnet") for how in ("barrier",)}))
            runs.update(_runs({m: "replicate" for m in ("gin", "gat")}))
        multi = _run_job(partition_sets[(graph, workers)], runs, workers, tmp_path / f"w{workers}", monkeypatch)
        remote = load_partition_set(partition_sets[(graph, workers)]).manifest["metrics"]["total_remote"]
        assert remote > 0
        for name, result in multi.items():
            reference = single[f"{name.split('-')[0]}-pipelined"]
            np.testing.assert_allclose(result["loss"], reference["loss"], atol=1e-4, err_msg=name)
            for key in reference:
                if key.startswith("param:"):
                    np.testing.assert_allclose(result[key], reference[key], atol=1e-4, err_msg=f"{name} {key}")
            if "replicate" in name:
                assert result["forward_bytes"].sum() == 0
            else:
                expected = [remote * int(w) * 4 for w in result["widths"][1:]]
                assert result["forward_bytes"].tolist() == [expected] * EPOCHS, name
        assert all(r["forward_bytes"].sum() == 0 for r in single.values())
