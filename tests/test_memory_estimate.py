"""Memory known before launch: the estimate's arithmetic, ``--dry-run`` and the refusal of a job
that cannot fit."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from commgraph import sizes
from commgraph.errors import JobError
from commgraph.launch import LaunchOptions
from commgraph.launch.launcher import check_fits
from commgraph.plan import memory
from commgraph.plan.memory import JobShape, estimate_memory, reached_nodes, sampled_edges
from commgraph.sample.options import EXPLAIN_NODES, EXPLAIN_TARGETS


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
    assert full.worker_peak_bytes == sum(full.worker.values())
    assert full.machine_peak_bytes == sum(full.machine.values()) + 2 * full.worker_peak_bytes
    # sampled: a step's tables and the evaluation pass (its shared tables, its workers' chunks) are never held at once
    base = {k: v for k, v in sampled.worker.items() if k not in ("tables", "evaluation")}
    steps, evaluation = sampled.worker["tables"], sampled.worker["evaluation"]
    assert sampled.worker_peak_bytes == sum(base.values()) + max(steps, evaluation)
    shared = {k: v for k, v in sampled.machine.items() if k != "evaluation"}
    assert sampled.machine_peak_bytes == sum(shared.values()) + 2 * sum(base.values()) + max(
        2 * steps, sampled.machine["evaluation"] + 2 * evaluation
    )
    owned = max(cora_set.part(k).num_owned for k in range(2))
    assert full.worker["features"] == 4 * owned * 1433
    assert "structure" not in full.machine  # full-graph training never maps the whole structure
    files = cora_set.path / "structure"
    assert sampled.machine["structure"] == sum(f.stat().st_size for f in files.iterdir())
    assert sampled.machine["features"] == 4 * 2708 * 1433  # both workers read each other's rows from the files
    network = estimate_memory(cora_set, JobShape(2, 2, 16, 2, "neighbor", 64, (10, 10), peer_rows="network"))
    assert "features" not in network.machine


def test_sampled_edges_are_each_hops_destinations_times_its_fanout():
    n = 10**9  # draws far below N: every draw a new node
    assert sampled_edges(n, 10 * n, 100, (5, 3)) == 100 * 5 + reached_nodes(n, 100, (5,)) * 3
    assert sampled_edges(1000, 5000, 10, (-1,)) == 10 * 5  # every neighbour: the mean in-degree


def test_a_sampled_first_layer_that_narrows_its_rows_holds_chunks_not_the_table(cora_set):
    shape = {"workers": 2, "machine_workers": 2, "layers": 2, "sampler": "neighbor", "batch_size": 64}
    rows = reached_nodes(2708, 64, (10, 10))
    edges = sampled_edges(2708, int(cora_set.manifest["graph"]["num_edges"]), 64, (10, 10))
    tables = {}
    for model, hidden in (("sage", 16), ("gcn", 16), ("gat", 16)):
        estimate = estimate_memory(cora_set, JobShape(**shape, hidden=hidden, fanouts=(10, 10), model=model))
        destinations = 64 + reached_nodes(2708, 64, (10,))  # layer 1's, then layer 0's
        tables[model, hidden] = estimate.worker["tables"] - 4 * destinations * memory.ACTIVATION_COPIES * hidden
    common = memory.SAMPLED_EDGE_BYTES * edges + 8 * 2708
    transformed = 2 * 4 * rows * 16  # the input rows' transform, hidden-wide, and its gradient
    assert tables["sage", 16] == tables["gcn", 16] == 2 * memory.INPUT_CHUNK_BYTES + transformed + common
    assert tables["gat", 16] == 4 * rows * memory.TABLE_COPIES * 1433 + common  # the table


@pytest.mark.parametrize("layers", [1, 2])
def test_a_sampled_first_layer_that_widens_its_rows_holds_its_destinations_aggregates(cora_set, layers):
    """Layer 0 1433 -> 2000 wide: chunks of input rows, layer 0's destinations' aggregates and own
    rows (1433 wide), and with a second layer layer 0's pre-activation and two one-byte masks in
    place of its activations; never the input table (4 bytes an input row and column)."""
    fanouts = (10, 10)[:layers]
    shape = JobShape(2, 2, 2000, layers, "neighbor", 64, fanouts, model="sage")
    edges = sampled_edges(2708, int(cora_set.manifest["graph"]["num_edges"]), 64, fanouts)
    first = 64 if layers == 1 else reached_nodes(2708, 64, (10,))  # layer 0's destinations
    later = 4 * 64 * memory.ACTIVATION_COPIES * 2000 if layers == 2 else 0  # layer 1's activations
    held = 2 * memory.INPUT_CHUNK_BYTES + 2 * 4 * first * 1433
    held += (4 + 1 + 1) * first * 2000 + later if layers == 2 else 4 * 64 * memory.ACTIVATION_COPIES * 2000
    tables = estimate_memory(cora_set, shape).worker["tables"]
    assert tables == held + memory.SAMPLED_EDGE_BYTES * edges + 8 * 2708


def test_dgs_explainer_is_counted_only_where_it_runs(cora_set):
    shape = JobShape(2, 2, hidden=16, layers=2, sampler="dgs", batch_size=64, fanouts=(10, 10))
    plain = estimate_memory(cora_set, shape)
    explained = estimate_memory(cora_set, JobShape(**{**shape.__dict__, "explainer": True}))
    assert "explainer" not in plain.worker
    assert explained.worker_peak_bytes - plain.worker_peak_bytes == explained.worker["explainer"]
    owned = max(cora_set.part(k).num_owned for k in range(2))
    degree = round(int(cora_set.manifest["graph"]["num_edges"]) / 2708)
    rows = reached_nodes(2708, owned, (degree, degree))
    assert explained.worker["explainer"] >= memory.EXPLAINER_RUNTIME_BYTES + 2 * 2 * 4 * 1433 * rows


def test_a_large_neighbourhood_s_explainer_is_its_bounded_sample():
    """The thesis's graph (500k nodes, 100 in-edges each, a part of 62,500): the explainer holds
    EXPLAIN_NODES star rows (four tables) and EXPLAIN_TARGETS targets' sampled rows (two), once."""
    shape = JobShape(8, 8, hidden=16, layers=2, sampler="dgs", batch_size=1024, fanouts=(64, 64), explainer=True)
    targets = reached_nodes(500_000, EXPLAIN_TARGETS, (64, 64))
    edges = sampled_edges(500_000, 50_000_000, EXPLAIN_TARGETS, (64, 64))
    expected = memory.EXPLAINER_RUNTIME_BYTES + 4 * 500 * (4 * EXPLAIN_NODES + 2 * targets) + 12 * edges
    assert memory._explainer_bytes(500_000, 50_000_000, 62_500, 500, shape) == expected
    assert expected < 0.6e9  # against 5.65 GB for the whole neighbourhood, twice
    in_worker = JobShape(**{**shape.__dict__, "explainer_process": False})  # --explain-in worker: no interpreter
    assert (
        memory._explainer_bytes(500_000, 50_000_000, 62_500, 500, in_worker)
        == expected - memory.EXPLAINER_RUNTIME_BYTES
    )


def test_a_sampled_evaluation_on_one_machine_holds_two_node_tables_once(cora_set):
    shape = {"workers": 2, "layers": 3, "sampler": "neighbor", "batch_size": 64, "fanouts": (10, 10, 5)}
    one_machine = estimate_memory(cora_set, JobShape(**shape, machine_workers=2, hidden=2000))
    # layer 1 reads a hidden table and writes the last layer's transformed rows (7 classes): wider
    # than layer 0's input and output
    assert one_machine.machine["evaluation"] == 4 * 2708 * (2000 + 7)
    gat = estimate_memory(cora_set, JobShape(**shape, machine_workers=2, hidden=2000, model="gat"))
    assert gat.machine["evaluation"] == 4 * 2708 * (2000 + 2000)  # no transform before aggregation: hidden rows
    narrow = estimate_memory(cora_set, JobShape(**shape, machine_workers=2, hidden=16))
    assert narrow.machine["evaluation"] == 4 * 2708 * (16 + 7)  # layer 0 reads the feature files: no 1433-wide table
    two = estimate_memory(cora_set, JobShape(**{**shape, "layers": 2}, machine_workers=2, hidden=16))
    assert two.machine["evaluation"] == 4 * 2708 * 7  # layer 0's output, transformed; layer 1's stays with its workers
    one = estimate_memory(cora_set, JobShape(**{**shape, "layers": 1, "fanouts": (10,)}, machine_workers=2, hidden=16))
    assert one.machine["evaluation"] == 0
    assert narrow.machine["features"] == 4 * 2708 * 1433  # the rows layer 0 reads, counted once
    parts = [cora_set.part(k) for k in range(2)]
    local, edges = max(p.num_owned + p.num_halo for p in parts), max(p.indices.shape[0] for p in parts)
    # a chunk's scratch, and the owned rows' logits and root terms (7 classes)
    chunks = memory.SHARED_EVAL_CHUNKS * memory.EVAL_CHUNK_BYTES + 2 * 4 * max(p.num_owned for p in parts) * 7
    assert one_machine.worker["evaluation"] == chunks + 8 * 2708  # the whole graph's in-edges: the sampler's map
    partitioned = estimate_memory(cora_set, JobShape(**shape, machine_workers=2, hidden=16, structure="partitioned"))
    assert partitioned.worker["evaluation"] == chunks + 8 * 2708 + 4 * edges + 4 * local  # and the part's in-edges
    for other in (
        JobShape(**shape, machine_workers=1, hidden=16),
        JobShape(**shape, machine_workers=2, hidden=16, peer_rows="network"),
    ):
        apart = estimate_memory(cora_set, other)  # rows of other machines cross the network: per-worker tables
        assert "evaluation" not in apart.machine and apart.worker["evaluation"] > 4 * local * 1433


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
    advice = r"needs about .* GB .* available: lower --hidden, --batch-size .* --ignore-memory"
    with pytest.raises(JobError, match=advice):
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
    assert "loss" not in done.stdout + done.stderr  # no worker trained


def test_available_memory_is_read_from_the_system():
    available = sizes.available_bytes()
    assert available is None or available > 0
    assert np.isfinite(available or 0)
