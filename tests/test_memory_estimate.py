"""Memory known before launch: the estimate's arithmetic, ``--dry-run`` and the refusal of a job
that cannot fit."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from commgraph.errors import JobError
from commgraph.graph import load_graph
from commgraph.launch import LaunchOptions
from commgraph.launch.launcher import check_fits
from commgraph.partition import load_partition_set, partition_graph, partition_metrics, write_partition_set
from commgraph.plan import memory
from commgraph.plan.memory import JobShape, estimate_memory, reached_nodes


@pytest.fixture(scope="module")
def cora_set(tmp_path_factory):
    graph = load_graph("cora")
    assignment, _ = partition_graph(graph, 2, "chunk", 0)
    out = tmp_path_factory.mktemp("sets") / "cora-2"
    write_partition_set(
        graph, assignment, 2, out, method="chunk", seed=0, seconds=0.0, metrics=partition_metrics(graph, assignment, 2)
    )
    return load_partition_set(out)


def test_reached_nodes_follow_the_draws():
    assert reached_nodes(1000, 10, (-1, 5)) == 1000  # every neighbour: the whole graph
    n, batch = 10**9, 100  # draws far below N: every draw a new node, plus the seeds
    assert reached_nodes(n, batch, (5, 5)) == batch * (1 + 5 + 25) + batch
    assert reached_nodes(1000, 1000, (10, 10)) == 1000
    expected = 5000 * -math.expm1(-64 * (1 + 10) / 5000) + 64
    assert reached_nodes(5000, 64, (10,)) == round(expected)


def test_the_estimate_adds_its_parts(cora_set):
    full = estimate_memory(cora_set, JobShape(2, 2, hidden=16, layers=2))
    sampled = estimate_memory(
        cora_set, JobShape(2, 2, hidden=16, layers=2, sampler="neighbor", batch_size=64, fanouts=(10, 10))
    )
    for estimate in (full, sampled):
        assert estimate.worker_peak_bytes == sum(estimate.worker.values())
        assert estimate.machine_peak_bytes == sum(estimate.machine.values()) + 2 * estimate.worker_peak_bytes
    owned = max(cora_set.part(k).num_owned for k in range(2))
    assert full.worker["features"] == 4 * owned * 1433
    assert "structure" not in full.machine  # full-graph training never maps the whole structure
    files = cora_set.path / "structure"
    assert sampled.machine["structure"] == sum(f.stat().st_size for f in files.iterdir())
    assert sampled.machine["features"] == 4 * 2708 * 1433  # both workers read each other's rows from the files
    network = estimate_memory(cora_set, JobShape(2, 2, 16, 2, "neighbor", 64, (10, 10), peer_rows="network"))
    assert "features" not in network.machine


def test_the_full_graph_pass_is_its_table_its_aggregation_and_its_hidden_tables(cora_set):
    parts = [cora_set.part(k) for k in range(2)]
    owned = max(p.num_owned for p in parts)
    local = max(p.num_owned + p.num_halo for p in parts)
    edges = max(p.indices.shape[0] for p in parts)
    train = estimate_memory(cora_set, JobShape(2, 2, hidden=16, layers=2))
    assert train.worker["structure"] == memory.FULL_GRAPH_EDGE_BYTES * edges
    assert train.worker["tables"] == 4 * local * 1433 + 2 * 4 * owned * 1433 + 4 * local * 16 * 4 * 2
    infer = estimate_memory(cora_set, JobShape(2, 2, hidden=16, layers=2, train=False))
    assert "tables" not in infer.worker and "model" not in infer.worker
    assert infer.worker["evaluation"] == 4 * local * 1433 + 4 * owned * 1433 + 4 * local * 16 * 2
    # the evaluation's chunk is the one nn.model computes in
    from commgraph.nn import model

    assert memory.EVAL_CHUNK_BYTES == model.EVAL_CHUNK_BYTES


def test_a_job_that_cannot_fit_is_refused_in_one_line(cora_set, monkeypatch):
    estimate = estimate_memory(cora_set, JobShape(2, 2, hidden=16, layers=2))
    monkeypatch.setattr("commgraph.launch.launcher.available_bytes", lambda: estimate.machine_peak_bytes - 1)
    with pytest.raises(JobError, match=r"needs about .* GB .* available: lower --batch-size .* --ignore-memory"):
        check_fits(estimate, LaunchOptions())
    check_fits(estimate, LaunchOptions(ignore_memory=True))
    monkeypatch.setattr("commgraph.launch.launcher.available_bytes", lambda: estimate.machine_peak_bytes)
    check_fits(estimate, LaunchOptions())


@pytest.mark.multiproc
def test_dry_run_prints_the_estimate_and_starts_no_worker(cora_set):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "commgraph",
            "train",
            str(cora_set.path),
            "--dry-run",
            "--json",
            "--sampler",
            "neighbor",
            "--fanout",
            "5,5",
            "--batch-size",
            "64",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    estimate = json.loads(done.stdout)
    assert estimate["machine_workers"] == 2
    assert estimate["machine_peak_bytes"] == sum(estimate["machine"].values()) + 2 * estimate["worker_peak_bytes"]
    assert "epoch" not in done.stdout + done.stderr


def test_available_memory_is_read_from_the_system():
    available = memory.available_bytes()
    assert available is None or available > 0
    assert np.isfinite(available or 0)
