"""The job's set-up in one place: the topology resolver, the ``Job`` context and what the
launcher hands its workers, built from one source."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

from commgraph.cli.main import build_parser
from commgraph.errors import JobError, TopologyError
from commgraph.graph import load_graph
from commgraph.launch import JobSpec, LaunchOptions
from commgraph.launch.launcher import Received, handed_over, worker_argv
from commgraph.partition import partition_graph, partition_metrics, write_partition_set
from commgraph.runtime import World
from commgraph.runtime.job import Job, JobOptions
from commgraph.topology import parse_speeds, resolve_topology, write_yaml
from commgraph.train import TrainConfig


def test_detect_on_a_cpu_job_is_one_cpu_worker_per_rank():
    topology = resolve_topology("detect", workers=3, device="cpu")
    assert topology.name == "localhost-cpu:3" and [d.id for d in topology.workers] == ["cpu0", "cpu1", "cpu2"]
    assert len(resolve_topology("detect", device="cpu").workers) == (os.cpu_count() or 1)


def test_speeds_mean_the_same_everywhere(tmp_path):
    slow = resolve_topology("dgx1-v100", speeds=parse_speeds("nv1=1,nv2=2"))
    fast = resolve_topology("dgx1-v100")
    assert {(link.count, link.bandwidth_gbps) for link in slow.links if link.kind == "nvlink"} == {(1, 1.0), (2, 2.0)}
    assert [link for link in slow.links if link.kind != "nvlink"] == [
        link for link in fast.links if link.kind != "nvlink"
    ]
    write_yaml(fast, tmp_path / "t.yaml")
    assert resolve_topology(tmp_path / "t.yaml").to_dict() == fast.to_dict()
    with pytest.raises(TopologyError, match="speed overrides apply to presets"):
        resolve_topology(tmp_path / "t.yaml", speeds={"pcie": 1.0})
    with pytest.raises(TopologyError, match="not a detected topology"):
        resolve_topology("detect", device="cuda", speeds={"pcie": 1.0})
    with pytest.raises(TopologyError, match="bad --speeds entry 'pcie'"):
        parse_speeds("pcie")
    with pytest.raises(TopologyError, match="not 'tpu'"):
        resolve_topology("detect", device="tpu")


@pytest.fixture(scope="module")
def cora_two(tmp_path_factory):
    graph = load_graph("cora")
    assignment, _ = partition_graph(graph, 2, "chunk")
    out = tmp_path_factory.mktemp("launch") / "set"
    write_partition_set(
        graph, assignment, 2, out, method="chunk", seed=0, seconds=0.0, metrics=partition_metrics(graph, assignment, 2)
    )
    return out


@pytest.mark.multiproc
def test_a_job_refuses_a_set_that_does_not_fit_its_world(cora_two):
    with pytest.raises(JobError, match="has 2 parts but the job has 1 workers; use --workers 2"):
        Job(World.alone(), cora_two)


def test_a_job_of_one_process_plans_and_runs_nothing_across(tmp_path):
    graph = load_graph("cora")
    write_partition_set(
        graph,
        np.zeros(graph.num_nodes, dtype=np.int64),
        1,
        tmp_path / "one",
        method="chunk",
        seed=0,
        seconds=0.0,
        metrics={},
    )
    job = Job(World.alone(), tmp_path / "one", JobOptions(topology="detect", plan="p2p"))
    assert job.topology.name == "localhost-cpu:1" and job.devices == ["cpu0"] and job.ordering == "tagged"
    wiring = job.wire(64)
    assert wiring.plan.planner == "p2p" and wiring.devices == ["cpu0"]
    assert job.exchange(wiring.plan, job.part.owned, job.part.halo).idle


def test_job_options_are_checked_when_made():
    with pytest.raises(JobError, match="^plan 'fastest'"):
        JobOptions(plan="fastest")
    with pytest.raises(JobError, match="unknown ordering 'any'"):
        JobOptions(ordering="any")
    with pytest.raises(TopologyError, match="bad --speeds entry"):
        JobOptions(speeds="nv1")
    for bad, message in (
        ({"workers": 0}, "^workers must be >= 1"),
        ({"timeout": 0}, "^timeout must be positive"),
        ({"threads": 0}, "^threads must be >= 1"),
        ({"device": "tpu"}, "unknown device"),
    ):
        with pytest.raises(JobError, match=message):
            LaunchOptions(**bad)


@pytest.mark.multiproc
def test_the_workers_receive_the_launchers_configuration_as_data(cora_two):
    """The launcher hands each worker its options as data (the launcher's, the job's as it resolved
    them, and the training configuration), not as flags: the worker's command line names the
    command and the partition set alone, and the data gives the same configuration back (the
    launcher's plan and topology files in place of what the user named)."""
    argv = [
        "train",
        "cora",
        "--workers",
        "2",
        "--model",
        "gat",
        "--heads",
        "2",
        "--lr",
        "0.02",
        "--exchange",
        "barrier",
        "--sampler",
        "neighbor",
        "--fanout",
        "5,5",
        "--eval-every",
        "3",
        "--speeds",
        "shm=9",
        "--timeout",
        "30",
        "--threads",
        "1",
        "--quiet",
    ]
    args = build_parser().parse_args(argv)
    launcher, config = LaunchOptions.from_args(args), TrainConfig.from_args(args, progress=False)
    resolved = JobOptions(topology="t.yaml", plan="plan.npz", placement="cpu0,cpu1")
    spec = JobSpec("train", "cora", load_graph, launcher, config.job, data=config.to_dict())
    assert worker_argv(spec, cora_two) == ["train", str(cora_two)]
    given = Received.from_json(handed_over(spec, resolved, config.to_dict(), "cpu"))
    assert given.launch == LaunchOptions(timeout=30.0, threads=1, quiet=True, device="cpu") and given.job == resolved
    again = TrainConfig.from_dict(given.options, job=given.job)
    assert again == replace(config, job=resolved) and again.sampling.fanouts == (5, 5)


def test_the_seed_leaves_the_partition_and_the_partition_seed_changes_it(tmp_path, monkeypatch, capsys):
    """Five --seed values for error bars train on one partition; --partition-seed picks another."""
    from commgraph.cli.main import main

    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path))
    graph = "sbm:nodes=200,classes=2,features=4,seed=0"
    for seed in ("0", "3"):
        assert main(["train", graph, "--workers", "2", "--seed", seed, "--partition", "random", "--dry-run"]) == 0
    assert [p.name.rsplit("-", 1)[1] for p in (tmp_path / "partitions").iterdir()] == ["s0"]
    assert main(["train", graph, "--workers", "2", "--partition-seed", "3", "--partition", "random", "--dry-run"]) == 0
    assert sorted(p.name.rsplit("-", 1)[1] for p in (tmp_path / "partitions").iterdir()) == ["s0", "s3"]
