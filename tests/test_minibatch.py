"""Sampled mini-batch training across workers: exactness against full-graph training, unequal
training-node counts, the killed-worker and resume paths, and refused options."""

from __future__ import annotations

import argparse
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
from commgraph.errors import TrainingError
from commgraph.graph import load_graph
from commgraph.partition import load_partition_set, partition_graph, partition_metrics, write_partition_set
from commgraph.sample import NeighborSampler, SamplingGraph
from deadlines import scaled
from forked import run_commgraph


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """Cora in 2 g3 parts, and in 3 chunks: every training node (ids 0-139) in part 0."""
    root = tmp_path_factory.mktemp("mb")
    graph = load_graph("cora")
    made = {}
    for name, parts, method in (("g3", 2, "g3"), ("chunk", 3, "chunk")):
        assignment, _ = partition_graph(graph, parts, method, 0)
        made[name] = root / name
        write_partition_set(
            graph,
            assignment,
            parts,
            made[name],
            method=method,
            seed=0,
            seconds=0.0,
            metrics=partition_metrics(graph, assignment, parts),
        )
    return made


def _train(partdir: Path, workers: int, out: Path, *options: str, quiet: bool = True) -> tuple[list[dict], str]:
    """A training job; sampled ones fetch peers' rows through the network (``--peer-rows network``,
    the thesis's counts) unless ``options`` say otherwise."""
    if "--sampler" in options and "--peer-rows" not in options:
        options = (*options, "--peer-rows", "network")
    job = run_commgraph(
        [
            "train",
            str(partdir),
            "--workers",
            str(workers),
            "--metrics-out",
            str(out),
            *(["--quiet"] if quiet else []),
            "--timeout",
            "60",
            *options,
        ]
    )
    assert job.returncode == 0, job.stderr
    return [json.loads(line) for line in out.read_text().splitlines()], job.stderr


@pytest.mark.multiproc
@pytest.mark.timeout(300)
def test_all_neighbours_and_one_batch_train_exactly_like_the_full_graph(sets, tmp_path):
    """Fanout -1 and a batch holding every training node: each epoch's one step is full-graph
    training's step, so the losses match; the fetched bytes are exactly the remote rows of each
    worker's 2-hop in-neighbourhood, whole (neighbor) or before DGS's first masks."""
    common = ("--epochs", "3", "--dropout", "0", "--hidden", "8", "--seed", "2")
    full, _ = _train(sets["g3"], 2, tmp_path / "full.jsonl", *common)
    pset = load_partition_set(sets["g3"])
    remote = 0
    for k in range(2):
        part = pset.part(k)
        graph = SamplingGraph.from_partition(pset, k)
        seeds = np.asarray(part.owned)[np.asarray(part.train_mask, bool)]
        remote += int(NeighborSampler(graph, [-1, -1]).sample(seeds, np.random.default_rng(0)).remote_input.sum())
    for sampler in ("neighbor", "dgs"):
        sampled, _ = _train(
            sets["g3"],
            2,
            tmp_path / f"{sampler}.jsonl",
            *common,
            "--sampler",
            sampler,
            "--fanout",
            "-1,-1",
            "--batch-size",
            "1000",
            *(["--explain-period", "1000", "--explain-in", "worker"] if sampler == "dgs" else []),
        )
        np.testing.assert_allclose([r["loss"] for r in sampled], [r["loss"] for r in full], rtol=1e-5)
        np.testing.assert_allclose([r["test_acc"] for r in sampled], [r["test_acc"] for r in full])
        for record in sampled:
            assert record["steps"] == 1
            assert record["feature_bytes"] == 4 * 1433 * remote
            assert record["structure_bytes"] == 8 * remote
            assert record["comm_bytes"] == record["feature_bytes"] + record["structure_bytes"]
            assert record["total_bytes"] == record["comm_bytes"] + record["allreduce_bytes"] > record["comm_bytes"]
            if sampler == "dgs":  # no masks yet: said, step by step
                assert record["dgs_steps"] == 2 and record["dgs_masked_steps"] == 0
                assert record["dgs_masks_age_steps"] == -1
            else:
                assert record["dgs_steps"] is None


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_a_widening_first_layer_with_all_neighbours_trains_exactly_like_the_full_graph(tmp_path, model):
    """8 features, hidden 16: the sampled step aggregates layer 0's input rows first and makes its
    output in chunks (``train.fetch.first_layers_aggregated``); with fanout -1 and one batch its
    losses are full-graph training's, with the peers' rows read from their files."""
    graph = load_graph("sbm:nodes=3000,classes=4,features=8,degree=10,train=0.5,seed=0")
    assignment, _ = partition_graph(graph, 2, "chunk", 0)
    partdir = tmp_path / "sbm"
    write_partition_set(graph, assignment, 2, partdir, method="chunk", seed=0, seconds=0.0, metrics={})
    common = ("--epochs", "3", "--dropout", "0", "--hidden", "16", "--seed", "2", "--model", model)
    full, _ = _train(partdir, 2, tmp_path / "full.jsonl", *common)
    sampled, _ = _train(
        partdir, 2, tmp_path / "sampled.jsonl", *common, "--sampler", "neighbor", "--fanout", "-1,-1",
        "--batch-size", "5000", "--peer-rows", "map",
    )  # fmt: skip
    np.testing.assert_allclose([r["loss"] for r in sampled], [r["loss"] for r in full], rtol=1e-5)
    np.testing.assert_allclose([r["test_acc"] for r in sampled], [r["test_acc"] for r in full])


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.parametrize("sampler", ["neighbor", "dgs"])
def test_peer_rows_read_from_the_shared_map_train_exactly_as_fetched_ones(sets, tmp_path, sampler):
    """Workers of one machine read each other's rows from the partition set's files: the same
    losses as fetching them through Gloo, no network feature bytes, and the same bytes counted as
    local_bytes (DGS's column cut included)."""
    common = (
        "--epochs",
        "2",
        "--dropout",
        "0",
        "--hidden",
        "8",
        "--seed",
        "4",
        "--sampler",
        sampler,
        "--fanout",
        "4,4",
        "--batch-size",
        "32",
        "--steps-per-epoch",
        "3",
        *(
            ["--explain-period", "100", "--explain-epochs", "5", "--dgs-wait", "--explain-in", "worker"]
            if sampler == "dgs"
            else []
        ),
    )
    fetched, _ = _train(sets["g3"], 2, tmp_path / "network.jsonl", *common, "--peer-rows", "network")
    mapped, _ = _train(sets["g3"], 2, tmp_path / "map.jsonl", *common, "--peer-rows", "map")
    np.testing.assert_allclose([r["loss"] for r in mapped], [r["loss"] for r in fetched], rtol=1e-6)
    if sampler == "dgs":  # every step cut to the first explanation's columns (T_ex beyond the run: one mask set)
        assert all(r["dgs_masked_steps"] == r["dgs_steps"] > 0 for r in mapped + fetched)
    for near, far in zip(mapped, fetched):
        assert near["feature_bytes"] == 0 and far["local_bytes"] == 0
        assert near["local_bytes"] == far["feature_bytes"] > 0


@pytest.mark.multiproc
@pytest.mark.timeout(300)
def test_a_widening_first_layer_sums_peer_rows_from_their_files_as_fetched_ones(tmp_path):
    """8 features, hidden 16, two workers of one machine: layer 0 sums its own and its peer's rows
    straight from the feature table and the peer's mapped file (``nn.aggregate.aggregate_table``),
    with the same losses as fetching the peer's rows through Gloo, and their bytes counted as
    local_bytes."""
    graph = load_graph("sbm:nodes=3000,classes=4,features=8,degree=10,train=0.5,seed=0")
    assignment, _ = partition_graph(graph, 2, "chunk", 0)
    partdir = tmp_path / "sbm"
    write_partition_set(graph, assignment, 2, partdir, method="chunk", seed=0, seconds=0.0, metrics={})
    common = ("--epochs", "2", "--hidden", "16", "--seed", "2", "--sampler", "neighbor", "--fanout", "4,4",
              "--batch-size", "64", "--steps-per-epoch", "3")  # fmt: skip
    fetched, _ = _train(partdir, 2, tmp_path / "network.jsonl", *common, "--peer-rows", "network")
    mapped, _ = _train(partdir, 2, tmp_path / "map.jsonl", *common, "--peer-rows", "map")
    assert [r["loss"] for r in mapped] == [r["loss"] for r in fetched]
    for near, far in zip(mapped, fetched, strict=True):
        assert near["feature_bytes"] == 0 and near["local_bytes"] == far["feature_bytes"] > 0


def _remote_inputs(partdir: Path) -> int:
    """Remote input rows of one batch of every training node, fanout -1,-1, summed over workers."""
    pset = load_partition_set(partdir)
    remote = 0
    for k in range(pset.num_parts):
        part = pset.part(k)
        seeds = np.asarray(part.owned)[np.asarray(part.train_mask, bool)]
        graph = SamplingGraph.from_partition(pset, k)
        remote += int(NeighborSampler(graph, [-1, -1]).sample(seeds, np.random.default_rng(0)).remote_input.sum())
    return remote


@pytest.mark.multiproc
@pytest.mark.timeout(300)
def test_dgs_masks_written_by_one_run_are_used_from_the_first_step_of_another(sets, tmp_path):
    """``--dgs-masks-out`` explains the trained model on every worker; ``--dgs-masks`` samples with
    those masks on every step, and remote rows carry exactly ceil(N_f * F) columns on the wire."""
    masks = tmp_path / "masks.npz"
    common = ("--sampler", "dgs", "--explain-cpu", "0", "--explain-epochs", "5", "--seed", "1")
    _train(sets["g3"], 2, tmp_path / "a.jsonl", *common, "--epochs", "1", "--dgs-masks-out", str(masks))
    from commgraph.sample.maskfile import load_masks

    loaded = load_masks(masks, load_partition_set(sets["g3"]), 1433)
    assert len(loaded) == 2 and all(m.feature_mask.shape == (1433,) for m in loaded)
    records, _ = _train(
        sets["g3"],
        2,
        tmp_path / "b.jsonl",
        *common,
        "--epochs",
        "2",
        "--dgs-masks",
        str(masks),
        "--fanout",
        "-1,-1",
        "--batch-size",
        "1000",
        "--feature-rate",
        "0.5",
    )
    remote, columns = _remote_inputs(sets["g3"]), 717  # ceil(0.5 * 1433)
    for epoch, record in enumerate(records):
        assert record["dgs_masked_steps"] == record["dgs_steps"] == 2 and record["dgs_explanations"] == 0
        assert record["feature_bytes"] == 4 * columns * remote
        # node ids, and each worker's column list once, to the other worker, when it first changes
        assert record["structure_bytes"] == 8 * remote + (2 * 8 * columns if epoch == 0 else 0)


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.parametrize("trainer, first_layer", [("neighbor", "features"), ("dgs", "features"), ("dgs", "owner")])
def test_the_benchmarks_offline_count_is_what_the_trainer_moves(sets, tmp_path, trainer, first_layer):
    """``benchmarks/sampling.py --count-steps``'s count, made without training, equals the bytes a
    real ``--steps-per-epoch 2`` run moves: feature (or, with ``--first-layer owner``, activation)
    and request bytes, to the byte."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from sampling import DGS_VARIANTS, count_fetch  # noqa: I001 - the benchmark script, on the path above

    from commgraph.sample import DGSMasks
    from commgraph.sample.maskfile import save_masks

    pset = load_partition_set(sets["g3"])
    rng = np.random.default_rng(5)
    masks = [DGSMasks(np.where(rng.random(2708) < 0.7, rng.random(2708), 0.0), rng.random(1433)) for _ in range(2)]
    save_masks(tmp_path / "masks.npz", pset, masks)
    trains = [np.asarray(pset.part(k).owned)[np.asarray(pset.part(k).train_mask, bool)] for k in range(2)]
    args = argparse.Namespace(fanout="5,5", batch_size=16, count_steps=2, hidden=16)
    counted = count_fetch(SamplingGraph.from_partition(pset, 0), trains, trainer, args, 3, masks)
    options = (
        ["--sampler", "dgs", "--explain-cpu", "0", "--dgs-masks", str(tmp_path / "masks.npz")]
        if trainer in DGS_VARIANTS
        else ["--sampler", "neighbor"]
    )
    records, _ = _train(
        sets["g3"],
        2,
        tmp_path / "m.jsonl",
        *options,
        "--fanout",
        "5,5",
        "--batch-size",
        "16",
        "--steps-per-epoch",
        "2",
        "--epochs",
        "1",
        "--seed",
        "3",
        "--hidden",
        "16",
        "--first-layer",
        first_layer,
    )
    assert counted["steps"] == records[0]["steps"] == 2
    if first_layer == "owner":
        assert round(counted["activation_mb"] * 2e6) == records[0]["activation_bytes"] > 0
        assert records[0]["activation_grad_bytes"] == records[0]["activation_bytes"]
        assert records[0]["feature_bytes"] == 0
    else:
        assert round(counted["feature_mb"] * 2e6) == records[0]["feature_bytes"] > 0
    assert round(counted["request_mb"] * 2e6) == records[0]["structure_bytes"]


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.parametrize("where", ["process", "worker"])
def test_dgs_wait_never_runs_a_step_without_masks(sets, tmp_path, where):
    records, _ = _train(
        sets["g3"],
        2,
        tmp_path / "w.jsonl",
        "--sampler",
        "dgs",
        "--dgs-wait",
        "--epochs",
        "2",
        "--fanout",
        "5,5",
        "--batch-size",
        "32",
        "--explain-epochs",
        "3",
        "--explain-period",
        "1000",
        "--explain-cpu",
        "1",
        "--explain-in",
        where,
    )
    assert all(r["dgs_masked_steps"] == r["dgs_steps"] > 0 for r in records)
    assert records[0]["dgs_wait_seconds"] > 0 and records[1]["dgs_wait_seconds"] == 0
    assert records[0]["dgs_explanations"] == 2  # one per worker, the one waited for
    from dataclasses import fields

    from commgraph.train.records import DGSStats, EpochRecord

    flat = records[0]  # the metrics file's flat keys, DGS's as dgs_<name>
    dgs = DGSStats(**{f.name: flat[f"dgs_{f.name}"] for f in fields(DGSStats)})
    line = EpochRecord(**{f.name: flat[f.name] for f in fields(EpochRecord) if f.name != "dgs"}, dgs=dgs).line()
    assert "masks 100% of steps (age " in line and "waited" in line


@pytest.mark.multiproc
def test_a_mask_file_for_another_partition_set_is_refused_before_any_worker_starts(sets, tmp_path, capsys):
    from commgraph.sample import DGSMasks
    from commgraph.sample.maskfile import save_masks

    graph = load_graph("cora")
    pset = load_partition_set(sets["chunk"])
    other = tmp_path / "other.npz"
    save_masks(other, pset, [DGSMasks(np.ones(graph.num_nodes), np.ones(1433))] * 3)
    assert main(["train", str(sets["g3"]), "--quiet", "--sampler", "dgs", "--dgs-masks", str(other)]) == 2
    err = capsys.readouterr().err
    assert "was made for another partition set" in err and "rank" not in err and len(err.strip().splitlines()) == 1
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    assert (
        main(["train", str(sets["g3"]), "--quiet", "--sampler", "dgs", "--dgs-masks", str(tmp_path / "junk.npz")]) == 2
    )
    assert "not a mask file" in capsys.readouterr().err


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "sampler, options",
    [
        ("neighbor", ("--fanout", "5,5", "--batch-size", "16")),
        ("cluster", ("--batch-size", "16")),
    ],
)
@pytest.mark.multiproc
def test_steps_per_epoch_caps_every_epoch_at_exactly_n_steps(sets, tmp_path, sampler, options):
    """An epoch of batch 16 on part 0's 140 training nodes has 9 steps; ``--steps-per-epoch 2``
    runs exactly 2 on every worker in every epoch, and the metrics record the cap."""
    capped, _ = _train(
        sets["chunk"],
        3,
        tmp_path / "m.jsonl",
        "--sampler",
        sampler,
        "--epochs",
        "2",
        "--steps-per-epoch",
        "2",
        *options,
    )
    assert [(r["steps"], r["steps_cap"]) for r in capped] == [(2, 2), (2, 2)]
    if sampler == "neighbor":
        assert all(r["feature_bytes"] > 0 for r in capped)
    whole, _ = _train(sets["chunk"], 3, tmp_path / "w.jsonl", "--sampler", sampler, "--epochs", "1", *options)
    assert whole[0]["steps"] > 2 and whole[0]["steps_cap"] is None


@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    "sampler, options",
    [
        ("neighbor", ("--fanout", "5,5", "--batch-size", "32")),
        ("cluster", ("--batch-size", "100")),
        ("ladies", ("--layer-size", "64", "--batch-size", "32")),
        (
            "dgs",
            (
                "--fanout",
                "5,5",
                "--batch-size",
                "16",
                "--explain-period",
                "2",
                "--explain-epochs",
                "5",
                "--explain-in",
                "worker",
            ),
        ),
    ],
)
@pytest.mark.multiproc
def test_workers_with_unequal_training_nodes_run_equal_steps(sets, tmp_path, sampler, options):
    """Part 0 holds all 140 training nodes, parts 1 and 2 none: every worker still runs each step
    (the others with nothing to compute), features cross workers, and training learns."""
    records, stderr = _train(sets["chunk"], 3, tmp_path / "m.jsonl", "--sampler", sampler, "--epochs", "4", *options)
    assert len(records) == 4
    if sampler in ("neighbor", "ladies"):
        assert {r["steps"] for r in records} == {5}  # ceil(140 / 32) on every worker
    if sampler == "dgs":
        assert {r["steps"] for r in records} == {9}
        assert "DGS explanation graph" not in stderr  # --quiet
    if sampler == "cluster":  # ClusterGCN's batches are the worker's own nodes: nothing is fetched
        assert all(r["feature_bytes"] == 0 for r in records)
    else:
        assert all(r["feature_bytes"] > 0 and r["structure_bytes"] > 0 for r in records)
    assert all((r["sync_bytes"] > 0) == (sampler == "ladies") for r in records)
    assert records[-1]["loss"] < records[0]["loss"]
    assert all(r["sample_seconds"] > 0 for r in records)
    phases = ("fetch", "gather", "forward", "backward", "optimizer")
    for r in records:  # rank 0's steps, where its time went: every phase of them, each once
        assert all(r[f"{p}_seconds"] > 0 for p in phases), r
        assert r["sample_seconds"] + sum(r[f"{p}_seconds"] for p in phases) <= r["epoch_seconds"]


@pytest.mark.multiproc
@pytest.mark.timeout(400)
def test_resume_continues_to_the_same_losses(sets, tmp_path):
    common = ("--sampler", "neighbor", "--fanout", "4,4", "--batch-size", "32", "--dropout", "0.5", "--seed", "3")
    whole, _ = _train(sets["g3"], 2, tmp_path / "whole.jsonl", *common, "--epochs", "4")
    checkpoints = str(tmp_path / "ck")
    _train(sets["g3"], 2, tmp_path / "part.jsonl", *common, "--epochs", "2", "--checkpoint-dir", checkpoints)
    resumed, _ = _train(
        sets["g3"], 2, tmp_path / "part.jsonl", *common, "--epochs", "4", "--checkpoint-dir", checkpoints, "--resume"
    )
    assert [r["loss"] for r in resumed] == [r["loss"] for r in whole]  # batches, dropout and Adam restored
    assert [r["feature_bytes"] for r in resumed] == [r["feature_bytes"] for r in whole]


@pytest.mark.multiproc
@pytest.mark.timeout(300)
def test_batches_are_read_from_the_feature_store_whichever_features_value(sets, tmp_path):
    """``--features`` places the feature store that batches and evaluation share; on a CPU device
    every value is ``index_select`` on the table, so losses and bytes are identical, and rank 0 says
    once where the features are."""
    common = ("--sampler", "neighbor", "--fanout", "5,5", "--batch-size", "64", "--epochs", "2", "--seed", "4")
    host, said = _train(sets["g3"], 2, tmp_path / "host.jsonl", *common, "--features", "host", quiet=False)
    gpu, _ = _train(sets["g3"], 2, tmp_path / "gpu.jsonl", *common, "--features", "gpu")
    for key in ("loss", "test_acc", "feature_bytes", "structure_bytes", "steps"):
        assert [r[key] for r in host] == [r[key] for r in gpu], key
    assert all(r["feature_bytes"] > 0 for r in host)
    lines = [line for line in said.splitlines() if "features: " in line]
    assert len(lines) == 1 and lines[0].startswith("commgraph: features: "), said
    assert "the device is the CPU (--features host)" in lines[0]


def test_a_sampled_checkpoint_is_not_resumed_as_full_graph_training(tmp_path):
    import torch

    from commgraph.train import TrainConfig, checkpoint

    written = checkpoint.identity("abc", 2, TrainConfig.build(sampler="neighbor"))
    rng = [torch.get_rng_state()] * 2
    checkpoint.save(tmp_path, {"identity": written, "model": {}, "epoch": 1, "optimizer": {}, "rng": rng})
    with pytest.raises(TrainingError, match="sampler='neighbor', this run has sampler=None"):
        checkpoint.load(tmp_path, checkpoint.identity("abc", 2, TrainConfig()))


@pytest.mark.multiproc
@pytest.mark.timeout(180)
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the workers through /proc")
def test_killed_worker_stops_the_whole_job_naming_its_rank(sets, tmp_path):
    from test_train import _children

    metrics = tmp_path / "m.jsonl"
    job = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "commgraph",
            "train",
            str(sets["g3"]),
            "--workers",
            "2",
            "--sampler",
            "neighbor",
            "--batch-size",
            "8",
            "--epochs",
            "100000",
            "--timeout",
            "30",
            "--metrics-out",
            str(metrics),
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 2):
        assert job.poll() is None, job.communicate()
        assert time.monotonic() < deadline, "training never started"
        time.sleep(0.2)
    os.kill(_children(job.pid)[1], signal.SIGKILL)
    killed_at = time.monotonic()
    _, stderr = job.communicate(timeout=60)
    assert time.monotonic() - killed_at < scaled(30)
    assert job.returncode != 0
    assert "worker rank 1 was killed by SIGKILL" in stderr
    assert "rank 0 stopped: worker rank 1" in stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sampler", "neighbor", "--fanout", "10,10,10"], "--fanout gives 3 values but the model has --layers 2"),
        (["--sampler", "neighbor", "--fanout", "10,x"], "--fanout must be integers"),
        (["--sampler", "neighbor", "--fanout", "0,5"], "each >= 1 or -1"),
        (["--sampler", "neighbor", "--batch-size", "0"], "--batch-size must be >= 1"),
        (["--sampler", "neighbor", "--steps-per-epoch", "0"], "--steps-per-epoch must be >= 1"),
        (["--steps-per-epoch", "5"], "--steps-per-epoch is an option of --sampler"),
        (["--fanout", "10,10"], "--fanout is an option of --sampler neighbor|dgs; this is full-graph training"),
        (["--batch-size", "64"], "--batch-size is an option of --sampler"),
        (["--sampler", "neighbor", "--layer-size", "64"], "--sampler neighbor does not use it"),
        (["--sampler", "dgs", "--feature-rate", "0"], "--feature-rate (N_f) must lie in (0, 1]"),
        (["--sampler", "dgs", "--epsilon", "1.5"], "--epsilon must lie in [0, 1]"),
        (["--sampler", "dgs", "--explain-period", "0"], "--explain-period (T_ex) must be >= 1"),
        (["--sampler", "dgs", "--explain-cpu", "-1"], "--explain-cpu must be >= 0 cores"),
        (["--sampler", "dgs", "--dgs-wait", "--explain-cpu", "0"], "--dgs-wait waits for the online explainer"),
        (["--sampler", "dgs", "--dgs-masks", "/nonexistent.npz"], "--dgs-masks /nonexistent.npz: no such file"),
        (["--sampler", "neighbor", "--dgs-wait"], "--dgs-wait is an option of --sampler dgs"),
        (["--sampler", "neighbor", "--explain-in", "worker"], "--explain-in is an option of --sampler dgs"),
        (["--sampler", "cluster", "--clusters", "2", "--clusters-per-batch", "3"], "exceeds --clusters"),
        (["--sampler", "fastgcn", "--layer-size", "0"], "--layer-size must be >= 1"),
    ],
)
@pytest.mark.multiproc
def test_bad_sampling_requests_are_refused_before_any_worker_starts(sets, args, message, capsys):
    assert main(["train", str(sets["g3"]), "--quiet", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "rank" not in err and len(err.strip().splitlines()) == 1
