"""Distributed training: exactness against one worker, bytes moved, failures, resume, torchrun."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from commgraph.cli.main import main
from commgraph.errors import JobError, SamplingError, TrainingError
from commgraph.graph import load_graph
from commgraph.partition import load_partition_set, partition_graph, partition_metrics, write_partition_set
from commgraph.runtime import pick_device
from commgraph.runtime.world import placement_conflict
from commgraph.topology import Device, Link, Topology, write_yaml
from commgraph.train import checkpoint
from deadlines import scaled
from forked import launch_forked, run_commgraph
from ports import free_port

TESTS = Path(__file__).parent
GRAPHS = {"cora": "cora", "sbm": "sbm:nodes=1500,classes=4,features=24,seed=3"}
MODELS = ("gcn", "sage", "gat", "gin", "commnet")
EPOCHS = 3  # a wrong exchange shows in the first loss, a wrong all-reduce in the second and the weights


@pytest.fixture(scope="module")
def partition_sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("parts")
    sets = {}
    for key, spec in GRAPHS.items():
        graph = load_graph(spec)
        for parts in (1, 2, 4):
            assignment, _ = partition_graph(graph, parts, "g3" if parts > 1 else "chunk", 0)
            out = root / f"{key}-{parts}"
            write_partition_set(
                graph,
                assignment,
                parts,
                out,
                method="g3",
                seed=0,
                seconds=0.0,
                metrics=partition_metrics(graph, assignment, parts),
            )
            sets[(key, parts)] = out
    return sets


def _run_job(partdir: Path, runs: dict, workers: int, out: Path, monkeypatch, device: str = "cpu") -> dict:
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "spec.json"
    spec.write_text(json.dumps({"partdir": str(partdir), "out": str(out), "runs": runs, "device": device}))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    assert launch_forked([str(spec)], workers, grace=30, module="dist_driver") == 0
    return {name: dict(np.load(out / f"{name}.npz")) for name in runs}


@pytest.fixture(scope="module")
def single_runs(partition_sets, tmp_path_factory):
    """``single_runs(graph)``: every model trained by one worker on one CPU (the reference the
    multi-worker and GPU runs are held to), each graph's job launched once for the whole module."""
    done: dict[str, dict] = {}

    def run(graph: str) -> dict:
        if graph not in done:
            with pytest.MonkeyPatch.context() as patch:
                done[graph] = _run_job(
                    partition_sets[(graph, 1)],
                    _runs({m: "pipelined" for m in MODELS}),
                    1,
                    tmp_path_factory.mktemp(f"single-{graph}"),
                    patch,
                )
        return done[graph]

    return run


VARIANTS = {  # run name suffix -> options; every variant computes the single-worker model
    "pipelined": {"exchange": "pipelined"},
    "pipelined-bins": {"exchange": "pipelined", "bin_size": 64},
    "ordered-bins": {"exchange": "pipelined", "bin_size": 64, "ordering": "ordered"},
    "barrier": {"exchange": "barrier"},
    "barrier-ordered": {"exchange": "barrier", "ordering": "ordered"},
    "replicate": {"exchange": "replicate"},
    "ring": {"exchange": "pipelined", "allreduce": "ring"},
    "tree": {"exchange": "pipelined", "allreduce": "tree"},
    "lp": {"exchange": "pipelined", "allreduce": "lp"},
}


def _runs(variants: dict[str, str], **options) -> dict:
    common = {"epochs": EPOCHS, "hidden": 8, "heads": 2, "dropout": 0.0, "seed": 1, **options}
    return {f"{model}-{how}": {**common, **VARIANTS[how], "model": model} for model, how in variants.items()}


def _check_against(single: dict, multi: dict, rows: int) -> None:
    """Each run's losses and final weights equal the one-worker run's within 1e-4; forward bytes
    per exchanged layer are exactly the plan's rows x width x 4 (sum |V_i^remote| for p2p; relayed
    rows count at every hop) and the backward pass returns as many."""
    for name, result in multi.items():
        reference = single[f"{name.split('-')[0]}-pipelined"]
        np.testing.assert_allclose(result["loss"], reference["loss"], atol=1e-4, err_msg=name)
        for key in reference:
            if key.startswith("param:"):
                np.testing.assert_allclose(result[key], reference[key], atol=1e-4, err_msg=f"{name} {key}")
        if "replicate" in name:
            assert result["forward_bytes"].sum() == 0
        else:
            expected = [rows * int(w) * 4 for w in result["widths"][1:]]
            assert result["forward_bytes"].tolist() == [expected] * EPOCHS, name
            assert result["backward_bytes"].tolist() == [sum(expected)] * EPOCHS, name  # each row's gradient, once


@pytest.mark.multiproc
@pytest.mark.timeout(600)
@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_multi_worker_training_equals_one_worker(graph, partition_sets, single_runs, tmp_path, monkeypatch):
    """Every model, 2 and 4 workers under the p2p plan: the same loss every epoch and the same
    final weights as one worker; the in-order mode and the executed all-reduce schedules too."""
    single = single_runs(graph)
    for workers in (2, 4):
        runs = _runs({m: "pipelined" for m in MODELS}, plan="p2p")
        if workers == 4:  # small bins: many messages, out-of-order arrival, eager scheduling
            runs.update(_runs({m: "pipelined-bins" for m in ("sage", "gat", "gcn")}, plan="p2p"))
            runs.update(_runs({"gcn": "ordered-bins", "gin": "barrier-ordered"}, plan="p2p"))
            runs.update(_runs({"sage": "ring", "gat": "tree", "commnet": "lp"}, plan="p2p"))
        else:  # the two baselines compute the same function
            runs.update(_runs({m: "barrier" for m in ("gcn", "commnet")}, plan="p2p"))
            runs.update(_runs({m: "replicate" for m in ("gin", "gat")}))
        multi = _run_job(partition_sets[(graph, workers)], runs, workers, tmp_path / f"w{workers}", monkeypatch)
        remote = load_partition_set(partition_sets[(graph, workers)]).manifest["metrics"]["total_remote"]
        assert remote > 0
        _check_against(single, multi, remote)
        if workers == 4:  # the in-order mode runs the same messages: the very same losses as tagged
            np.testing.assert_array_equal(multi["gcn-ordered-bins"]["loss"], multi["gcn-pipelined-bins"]["loss"])
    assert all(r["forward_bytes"].sum() == 0 for r in single.values())


@pytest.mark.multiproc
@pytest.mark.timeout(600)
def test_eight_workers_on_a_dgx1_relay_through_spst_trees(partition_sets, single_runs, tmp_path, monkeypatch):
    """8 CPU workers standing in for a DGX-1's GPUs under SPST (rows relayed through other
    workers, as the plan says) and the LP's spanning-tree all-reduce: every model follows the
    single-worker run."""
    graph = load_graph(GRAPHS["cora"])
    assignment, _ = partition_graph(graph, 8, "g3", 0)
    partdir = tmp_path / "cora-8"
    write_partition_set(
        graph, assignment, 8, partdir, method="g3", seed=0, seconds=0.0, metrics=partition_metrics(graph, assignment, 8)
    )
    from commgraph.plan import plan_allgather
    from commgraph.topology import load_preset

    plan = plan_allgather("spst", load_partition_set(partdir), load_preset("dgx1-v100"), 4 * 8)  # as the trainer
    assert len(plan.stages) == 2 and plan.stages[1]  # relays, not the p2p fallback
    rows = sum(send.ids.size for stage in plan.stages for send in stage)
    assert rows > load_partition_set(partdir).manifest["metrics"]["total_remote"]
    single = single_runs("cora")
    runs = _runs({m: "lp" for m in MODELS}, topology="dgx1-v100", plan="spst")
    runs.update(_runs({"sage": "barrier-ordered", "gat": "ordered-bins"}, topology="dgx1-v100", plan="spst"))
    multi = _run_job(partdir, runs, 8, tmp_path / "w8", monkeypatch)
    _check_against(single, multi, rows)


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.gpu(reason="compares a CUDA run with a CPU run")
def test_one_worker_on_the_gpu_equals_the_cpu(partition_sets, single_runs, tmp_path, monkeypatch):
    """Every model trained on the GPU follows the CPU run: the same losses and weights within float
    rounding (cuSPARSE and the CPU kernels sum in different orders)."""
    cpu = single_runs("cora")
    gpu = _run_job(
        partition_sets[("cora", 1)],
        _runs({m: "pipelined" for m in MODELS}),
        1,
        tmp_path / "gpu",
        monkeypatch,
        device="cuda",
    )
    for name, reference in cpu.items():
        np.testing.assert_allclose(gpu[name]["loss"], reference["loss"], rtol=1e-3, atol=1e-4, err_msg=name)
        for key in reference:
            if key.startswith("param:"):
                np.testing.assert_allclose(
                    gpu[name][key], reference[key], rtol=1e-3, atol=1e-4, err_msg=f"{name} {key}"
                )


def _children(pid: int) -> dict[int, int]:
    """rank -> pid of the ranks of the job launched by process ``pid`` (forked by its zygote, each
    named ``commgraph-rN``; read from /proc)."""
    parents, names = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            names[int(entry.name)] = (entry / "comm").read_text().strip()
        except OSError:
            continue
    zygotes = {p for p, parent in parents.items() if parent == pid}
    return {
        int(name[len("commgraph-r") :]): p
        for p, name in names.items()
        if parents.get(p) in zygotes and name.startswith("commgraph-r")
    }


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "commgraph", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
    )


@pytest.mark.multiproc
@pytest.mark.timeout(180)
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the workers through /proc")
def test_killed_worker_stops_the_whole_job_naming_its_rank(partition_sets, tmp_path):
    metrics = tmp_path / "m.jsonl"
    job = _cli(
        "train",
        str(partition_sets[("cora", 2)]),
        "--workers",
        "2",
        "--epochs",
        "100000",
        "--timeout",
        "30",
        "--metrics-out",
        str(metrics),
        "--quiet",
    )
    deadline = time.monotonic() + 120
    while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 3):
        assert job.poll() is None, job.communicate()
        assert time.monotonic() < deadline, "training never started"
        time.sleep(0.2)
    os.kill(_children(job.pid)[1], signal.SIGKILL)  # mid-epoch: epochs take milliseconds
    killed_at = time.monotonic()
    _, stderr = job.communicate(timeout=60)
    assert time.monotonic() - killed_at < scaled(30)
    assert job.returncode != 0
    assert "worker rank 1 was killed by SIGKILL" in stderr  # the launcher
    assert "rank 0 stopped: worker rank 1" in stderr  # the survivor names it too


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_a_damaged_partition_set_is_refused_once_before_any_worker_starts(partition_sets, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(partition_sets[("cora", 2)], broken)
    features = np.load(broken / "part-1" / "features.npy")
    features[0, 0] += 1  # a valid array of the right shape: only its checksum tells
    np.save(broken / "part-1" / "features.npy", features)
    job = run_commgraph(["train", str(broken), "--workers", "2", "--epochs", "5", "--timeout", "20"])
    stderr = job.stderr
    assert job.returncode == 2
    errors = [line for line in stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "part-1/features.npy does not match its checksum" in errors[0], stderr
    assert "rank" not in stderr  # found by the launcher, not by the workers


@pytest.mark.multiproc
@pytest.mark.timeout(240)
def test_a_worker_error_reaches_the_others(partition_sets, tmp_path):
    """A worker failing on its own exits non-zero; the others stop naming it. Under torchrun there
    is no launcher to check the set first, and with a plan file each rank reads (and checks) only
    its own part: rank 1 finds its damaged file, rank 0 learns it from rank 1."""
    broken = tmp_path / "broken"
    shutil.copytree(partition_sets[("cora", 2)], broken)
    plan = tmp_path / "plan.json"
    assert (
        main(
            [
                "plan",
                "allgather",
                str(broken),
                "--topology",
                "localhost-cpu:2",
                "--feature-dim",
                "16",
                "--planner",
                "p2p",
                "--out",
                str(plan),
            ]
        )
        == 0
    )
    features = np.load(broken / "part-1" / "features.npy")
    features[0, 0] += 1  # a valid array of the right shape: only its checksum tells
    np.save(broken / "part-1" / "features.npy", features)
    port = free_port()
    jobs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc-per-node",
                "1",
                "--node-rank",
                str(node),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(port),
                "-m",
                "commgraph",
                "train",
                str(broken),
                "--epochs",
                "5",
                "--quiet",
                "--device",
                "cpu",
                "--timeout",
                "30",
                "--plan",
                str(plan),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in range(2)
    ]
    stderr = [job.communicate(timeout=200)[1] for job in jobs]
    assert all(job.returncode != 0 for job in jobs)
    assert "rank 1: " in stderr[1] and "part-1/features.npy does not match its checksum" in stderr[1]
    assert "rank 0 stopped: worker rank 1 failed" in stderr[0] and "checksum" in stderr[0]


@pytest.mark.multiproc
@pytest.mark.timeout(300)
def test_resume_continues_to_the_same_losses(partition_sets, tmp_path):
    common = ["train", str(partition_sets[("cora", 2)]), "--workers", "2", "--dropout", "0.5", "--quiet", "--seed", "3"]
    whole, part = tmp_path / "whole.jsonl", tmp_path / "part.jsonl"
    for args in (
        [*common, "--epochs", "8", "--metrics-out", str(whole)],
        [*common, "--epochs", "4", "--metrics-out", str(part), "--checkpoint-dir", str(tmp_path / "ck")],
        [
            *common,
            "--epochs",
            "8",
            "--metrics-out",
            str(part),
            "--checkpoint-dir",
            str(tmp_path / "ck"),
            "--resume",
            "--eval-every",
            "3",
        ],
    ):
        job = run_commgraph(args)
        stdout, stderr = job.stdout, job.stderr
        assert job.returncode == 0, stderr
        epochs = args[args.index("--epochs") + 1]  # counted from the start, also when resumed
        assert stdout.splitlines() == [stdout.splitlines()[0]] and stdout.startswith(f"done: {epochs} epochs"), stdout
        assert "training:" not in stderr  # --quiet: the result, no progress bar
    records = [[json.loads(line) for line in f.read_text().splitlines()] for f in (whole, part)]
    losses = [[r["loss"] for r in run] for run in records]
    assert len(losses[1]) == 8
    assert losses[0] == losses[1]  # bit for bit: weights, Adam state and dropout RNG all restored
    # and evaluating less often changes no loss; epochs 6 (a multiple of 3) and 8 (the last) were evaluated
    assert [r["epoch"] for r in records[1][4:] if r["test_acc"] is not None] == [6, 8]
    assert records[1][7]["test_acc"] == records[0][7]["test_acc"]
    # the best validation epoch survives the resume: epochs 1-4 from the checkpoint, 6 and 8 after it
    best = max((r for r in records[1] if r["val_acc"] is not None), key=lambda r: (r["val_acc"], -r["epoch"]))
    assert stdout.splitlines()[0].endswith(  # the done line, the run's result
        f"best validation accuracy {best['val_acc']:.4f} at epoch {best['epoch']} (test {best['test_acc']:.4f})"
    )


@pytest.mark.multiproc
def test_resume_refuses_another_run(partition_sets, tmp_path, capsys):
    assert main(["train", str(partition_sets[("cora", 1)]), "--epochs", "1", "--resume", "--quiet"]) == 2
    assert "--resume needs --checkpoint-dir" in capsys.readouterr().err
    from commgraph.train import TrainConfig

    written = checkpoint.identity("abc", 2, TrainConfig.build(model="gcn"))
    rng = [torch.get_rng_state()] * 2
    checkpoint.save(tmp_path, {"identity": written, "model": {}, "epoch": 1, "optimizer": {}, "rng": rng})
    with pytest.raises(TrainingError, match="model='gcn', this run has model='sage'"):
        checkpoint.load(tmp_path, checkpoint.identity("abc", 2, TrainConfig.build(model="sage")))
    with pytest.raises(TrainingError, match="no checkpoint"):
        checkpoint.load(tmp_path / "elsewhere", {})


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workers", "3"], "has 2 parts; pass --workers 2"),
        (["--workers", "0"], "--workers must be >= 1"),
        (["--epochs", "0"], "--epochs must be >= 1"),
        (["--bin-size", "0"], "--bin-size must be >= 1"),
        (["--threads", "0"], "--threads must be >= 1"),
        (["--eval-every", "0"], "--eval-every must be >= 1"),
        (["--timeout", "0"], "--timeout must be positive"),
        (["--layers", "0"], "need --layers >= 1"),
        (["--dropout", "1.5"], "0 <= --dropout < 1"),
        (["--lr", "-1"], "need --lr > 0"),
        (["--weight-decay", "-0.1"], "--weight-decay >= 0"),
        (["--predictions-out", "p.txt"], "must end in .npy or .csv"),
        *([(["--device", "cuda"], "torch sees no GPU")] if not torch.cuda.is_available() else []),
    ],
)
@pytest.mark.multiproc
def test_bad_training_requests(partition_sets, args, message, capsys):
    assert main(["train", str(partition_sets[("cora", 2)]), "--quiet", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "rank" not in err  # refused by the launcher, before any worker starts


def _gpus(monkeypatch, count: int) -> None:
    """Pretend torch sees ``count`` GPUs (the device choice only asks torch how many)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


@pytest.mark.parametrize(
    "gpus, choice, workers, expected",
    [
        (0, "auto", 4, "cpu"),
        (1, "auto", 1, "cuda"),
        (1, "auto", 2, "cpu"),
        (2, "auto", 2, "cuda"),
        (1, "cuda", 1, "cuda"),
        (0, "cpu", 1, "cpu"),
        (4, "cpu", 2, "cpu"),
    ],
)
def test_device_choice_gives_each_worker_its_own_gpu(monkeypatch, gpus, choice, workers, expected):
    _gpus(monkeypatch, gpus)
    notes = []
    assert pick_device(choice, workers, say=notes.append) == expected
    # a note exactly when auto passes over GPUs that are too few
    assert bool(notes) == (choice == "auto" and 0 < gpus < workers)
    if notes:
        assert f"{workers} workers but {gpus} GPU(s)" in notes[0] and f"--workers {gpus}" in notes[0]


def test_ranks_that_would_share_a_gpu_or_mix_backends_are_refused_at_join():
    cpu = [("a", "gloo", ""), ("a", "gloo", ""), ("b", "gloo", "")]
    gpus = [("a", "nccl", "GPU-0"), ("a", "nccl", "GPU-1"), ("b", "nccl", "GPU-0")]
    assert placement_conflict(cpu) is None and placement_conflict(gpus) is None
    mixed = placement_conflict([("a", "nccl", "GPU-0"), ("a", "nccl", "GPU-1"), ("b", "gloo", ""), ("b", "gloo", "")])
    assert "rank 0 on a uses nccl but rank 2 on b uses gloo" in mixed and "--device cpu" in mixed
    shared = placement_conflict([("a", "nccl", "GPU-0"), ("b", "nccl", "GPU-0"), ("a", "nccl", "GPU-0")])
    assert "ranks 0 and 2 both run on the same GPU of a (GPU-0)" in shared and "CUDA_VISIBLE_DEVICES" in shared


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_ranks_that_disagree_on_the_backend_stop_at_join(monkeypatch, capfd):
    """One rank sees a GPU and picks NCCL, the other Gloo: both stop when they join, before the
    process group (whose Gloo set-up would wait for the NCCL rank), and say why."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    assert launch_forked([], 2, grace=30, module="fake_gpu_driver") != 0
    out = capfd.readouterr().out
    for rank in (0, 1):
        assert f"rank {rank}: rank 0 on " in out
    assert "uses gloo but rank 1 on" in out and "uses nccl" in out and "--device cpu everywhere" in out


@pytest.mark.multiproc
def test_cuda_with_fewer_gpus_than_workers_is_refused_before_workers_start(partition_sets, monkeypatch, capsys):
    """On one GPU, two NCCL ranks failed only at the first exchange with NCCL's bare "invalid usage"
    (seen on an H100 machine); the launcher now says what to do instead."""
    _gpus(monkeypatch, 1)
    assert main(["train", str(partition_sets[("cora", 2)]), "--quiet", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "needs a GPU per worker" in err and "2 workers would share this machine's 1 GPU(s)" in err
    assert "--workers 1" in err and "rank" not in err


@pytest.mark.multiproc
def test_more_workers_than_nodes_is_refused_before_partitioning(tmp_path, capsys):
    out = tmp_path / "set"
    assert main(["train", "cora", "--workers", "5000", "--partition-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "cannot split 2708 nodes into 5000" in err and "partitioning" not in err and not out.exists()


@pytest.mark.multiproc
def test_graph_without_features_is_refused_before_partitioning(tmp_path, capsys):
    out = tmp_path / "set"
    assert main(["train", "rmat:nodes=500,edges=2000", "--workers", "2", "--partition-dir", str(out)]) == 2
    assert "has no node features, labels, train mask to train on" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.multiproc
@pytest.mark.timeout(240)
def test_two_node_torchrun_on_localhost(partition_sets, tmp_path):
    """Two torchrun "nodes" (one process each) on this machine train like our own launcher does. On
    CPU: each agent sees one local worker, so on a GPU machine both would take GPU 0."""
    port = free_port()
    train = ["train", str(partition_sets[("sbm", 2)]), "--epochs", "5", "--dropout", "0", "--quiet", "--device", "cpu"]
    jobs = []
    for node in range(2):
        jobs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--nnodes",
                    "2",
                    "--nproc-per-node",
                    "1",
                    "--node-rank",
                    str(node),
                    "--master-addr",
                    "127.0.0.1",
                    "--master-port",
                    str(port),
                    "-m",
                    "commgraph",
                    *train,
                    "--metrics-out",
                    str(tmp_path / "torchrun.jsonl"),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for job in jobs:
        _, stderr = job.communicate(timeout=200)
        assert job.returncode == 0, stderr
    ours = run_commgraph([*train, "--workers", "2", "--metrics-out", str(tmp_path / "local.jsonl")])
    assert ours.returncode == 0, ours.stderr
    losses = [
        [json.loads(line)["loss"] for line in (tmp_path / f).read_text().splitlines()]
        for f in ("torchrun.jsonl", "local.jsonl")
    ]
    assert len(losses[0]) == 5 and losses[0] == losses[1]


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_plans_that_do_not_fit_are_refused_before_any_worker_starts(partition_sets, tmp_path, capsys):
    """A plan file made for another partition set, world size or placement, and options no
    worker could run, stop the launcher with one line saying why; no worker starts."""
    two, four = partition_sets[("cora", 2)], partition_sets[("cora", 4)]
    other, wide = tmp_path / "sbm.json", tmp_path / "four.json"
    assert (
        main(
            [
                "plan",
                "allgather",
                str(partition_sets[("sbm", 2)]),
                "--topology",
                "localhost-cpu:2",
                "--feature-dim",
                "8",
                "--planner",
                "p2p",
                "--out",
                str(other),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "plan",
                "allgather",
                str(four),
                "--topology",
                "localhost-cpu:4",
                "--feature-dim",
                "8",
                "--planner",
                "p2p",
                "--out",
                str(wide),
            ]
        )
        == 0
    )
    capsys.readouterr()
    cases = [
        (["--plan", str(other)], "does not fit"),
        (["--plan", str(wide), "--topology", "localhost-cpu:4"], "another world size or placement"),
        (["--plan", str(wide)], "is not a device of topology"),
        (["--plan", str(tmp_path / "missing.json")], "no such file"),
        (["--plan", "magic"], "choose one of auto, p2p"),
        (["--allreduce", "lp", "--topology", "dgx1-v100"], "job runs on 2 of them"),
        (["--placement", "gpu0,gpu0", "--topology", "dgx1-v100"], "lists a device twice"),
        (["--resume", "--checkpoint-dir", str(tmp_path / "none")], "no checkpoint"),
    ]
    for extra, message in cases:
        assert main(["train", str(two), "--workers", "2", "--epochs", "1", "--quiet", *extra]) == 2, extra
        err = capsys.readouterr().err
        assert message in err and err.count("error") == 1 and "error: rank" not in err, (extra, err)
    chain = Topology(
        "chain",
        [Device(f"gpu{g}", "gpu") for g in range(4)],  # GPUs do not forward: 0 cannot reach 2
        [Link(f"gpu{g}", f"gpu{g + 1}", "nvlink", 1, 24.22, 1.0) for g in range(3)],
    )
    write_yaml(chain, tmp_path / "chain.yaml")
    assert (
        main(
            [
                "train",
                str(four),
                "--workers",
                "4",
                "--epochs",
                "1",
                "--quiet",
                "--topology",
                str(tmp_path / "chain.yaml"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "no route from 'gpu0' to 'gpu2'" in err and err.count("error") == 1 and "error: rank" not in err, err


def test_options_are_checked_once_in_the_configuration():
    from commgraph.train import TrainConfig

    with pytest.raises(TrainingError, match="^epochs must be >= 1"):
        TrainConfig.build(epochs=0)
    with pytest.raises(TrainingError, match="unknown allreduce 'fast'"):
        TrainConfig.build(allreduce="fast")
    with pytest.raises(TrainingError, match="^resume needs checkpoint_dir"):
        TrainConfig.build(resume=True)
    with pytest.raises(TrainingError, match="unknown training option.*hiden"):
        TrainConfig.build(hiden=32)
    with pytest.raises(JobError, match="^plan 'fastest'"):
        TrainConfig.build(plan="fastest")
    with pytest.raises(SamplingError, match="^fanouts gives 3 values"):
        TrainConfig.build(sampler="neighbor", fanouts=(5, 5, 5), layers=2)
    config = TrainConfig.build(model="gat", hidden=32, plan="spst", resume=True, checkpoint_dir="ck")
    assert (config.gnn.model, config.gnn.hidden, config.job.plan, config.log.checkpoint_dir) == (
        "gat",
        32,
        "spst",
        "ck",
    )
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config  # as a worker receives it
