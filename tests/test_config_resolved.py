"""One training configuration, resolved once: options hold parsed values with their defaults in
their definitions, the launcher resolves what is left open, workers receive the configuration as
data (``--fanout`` is parsed once per job), the plan reads the run's own resolved shape, and
library errors name parameters that the CLI spells as flags."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from commgraph.cli import in_flags
from commgraph.cli.main import build_parser
from commgraph.errors import SamplingError, TrainingError
from commgraph.train.config import TrainConfig
from commgraph.train.shape import job_shape

TESTS = Path(__file__).parent


def _parsed(*argv: str) -> TrainConfig:
    return TrainConfig.from_args(build_parser().parse_args(["train", "cora", *argv]), progress=False)


def test_options_hold_parsed_values_and_their_defaults():
    sampling = _parsed("--sampler", "neighbor", "--fanout", "10,-1").sampling
    assert sampling.fanouts == (10, -1)
    assert (sampling.batch_size, sampling.peer_rows, sampling.layer_size, sampling.clusters_per_batch) == (
        1024,
        "map",
        512,
        1,
    )
    dgs = TrainConfig.build(sampler="dgs", layers=3).sampling
    assert dgs.fanouts == (10, 10, 10)  # the default, one per layer
    assert (dgs.feature_rate, dgs.epsilon, dgs.dgs_rule, dgs.explain_in) == (0.85, 0.1, "keep-local", "process")
    assert dgs.explain_period == dgs.explainer_options().period == 30
    assert TrainConfig().sampling.fanouts is None  # full-graph training draws nothing


def test_the_neighbor_samplers_structure_is_resolved_once_for_the_job():
    config = TrainConfig.build(sampler="neighbor")
    assert config.unresolved and config.sampling.structure is None
    assert config.resolved(spans_machines=False).sampling.structure == "replicated"
    assert config.resolved(spans_machines=True).sampling.structure == "partitioned"
    assert not config.resolved(spans_machines=True).unresolved
    given = TrainConfig.build(sampler="neighbor", structure="partitioned")
    assert given.resolved(spans_machines=False) is given  # what the user gave stays
    rgcn = TrainConfig.build(model="rgcn", sampler="neighbor")  # R-GCN samples the whole graph's relations
    assert rgcn.resolved(spans_machines=True).sampling.structure == "replicated"
    dgs = TrainConfig.build(sampler="dgs")
    assert dgs.resolved(spans_machines=True) is dgs


def test_the_memory_estimate_reads_the_structure_the_run_uses(cora_set):
    config = TrainConfig.build(sampler="neighbor", fanouts=(5, 5), progress=False)
    assert job_shape(config, cora_set, 2).structure == "replicated"  # our launcher: every worker on one machine
    assert job_shape(config.resolved(spans_machines=True), cora_set, 2).structure == "partitioned"
    shape = job_shape(TrainConfig.build(sampler="dgs", batch_size=64), cora_set, 2)
    assert (shape.structure, shape.batch_size, shape.fanouts, shape.peer_rows) == ("replicated", 64, (10, 10), "map")


def test_a_configuration_crosses_as_json_data_and_comes_back_the_same():
    config = _parsed("--sampler", "dgs", "--fanout", "4,3", "--hidden", "8", "--dgs-rule", "split", "--lr", "0.02")
    data = json.loads(json.dumps(config.to_dict()))
    assert data["sampling"]["fanouts"] == [4, 3]
    assert TrainConfig.from_dict(data) == config


@pytest.mark.parametrize(
    "flat, error, library, cli",
    [
        (
            dict(sampler="neighbor", fanouts=(10, 10, 10)),
            SamplingError,
            "fanouts gives 3 values but the model has layers 2",
            "--fanout gives 3 values but the model has --layers 2",
        ),
        (dict(sampler="neighbor", batch_size=0), TrainingError, "batch_size must be >= 1", "--batch-size must be >= 1"),
        (
            dict(fanouts=(5, 5)),
            TrainingError,
            "fanouts is an option of sampler neighbor|dgs",
            "--fanout is an option of --sampler neighbor|dgs",
        ),
        (
            dict(sampler="dgs", explain_period=0),
            TrainingError,
            "explain_period (T_ex) must be >= 1",
            "--explain-period (T_ex) must be >= 1",
        ),
    ],
)
def test_library_errors_name_parameters_and_the_cli_spells_them_as_flags(flat, error, library, cli):
    with pytest.raises(error) as raised:
        TrainConfig.build(**flat)
    assert str(raised.value).startswith(library) and "--" not in str(raised.value)
    assert in_flags(raised.value, build_parser(load={"train"})).startswith(cli)


def _run_driver(name: str, log, argv: list[str], tmp_path) -> int:
    """Run the test driver ``name`` (it writes what the job's ranks saw to ``log``) on ``commgraph
    ARGV...`` as a fresh process, check it succeeded, and return its pid (the launcher's)."""
    driver = subprocess.Popen(
        [sys.executable, str(TESTS / name), str(log), *argv],
        env={**os.environ, "COMMGRAPH_HOME": str(tmp_path / "home")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, err = driver.communicate(timeout=600)
    finally:
        driver.kill()
    assert driver.returncode == 0, err
    return driver.pid


@pytest.mark.multiproc
@pytest.mark.slow
def test_fanout_is_parsed_once_per_job(tmp_path):
    """A 2-worker job parses ``--fanout`` once, on the launcher; its workers check the fanouts they
    receive (so the counting reached them) and never parse them."""
    if torch.cuda.is_available():
        pytest.skip("where torch sees CUDA each rank execs a fresh interpreter, which counts nothing")
    log = tmp_path / "calls"
    graph = "sbm:nodes=200,classes=2,features=4,seed=0"
    argv = ["train", graph, "--workers", "2", "--partition", "random", "--epochs", "1", "--threads", "1"]
    argv += ["--sampler", "neighbor", "--fanout", "3,2", "--batch-size", "32", "--quiet"]
    launcher = str(_run_driver("fanout_count_driver.py", log, argv, tmp_path))
    calls = [line.split() for line in log.read_text().splitlines()]
    assert [pid for name, pid in calls if name == "parse_fanouts"] == [launcher]
    checked = {pid for name, pid in calls if name == "check_fanouts"} - {launcher}
    assert len(checked) == 2, calls  # both ranks checked the fanouts they were handed


def test_a_path_that_holds_a_parameters_name_keeps_it():
    error = TrainingError("dgs_masks /tmp/dgs_masks.npz: no such file", parameters=("dgs_masks",))
    assert in_flags(error, build_parser(load={"train"})) == "--dgs-masks /tmp/dgs_masks.npz: no such file"


def _site(pset, device: str = "cpu", free_bytes=None):
    """What a launcher knows of a job on ``pset``, one worker per part, on this machine's topology."""
    from commgraph.plan.allgather import placement
    from commgraph.runtime.comm import match_ordering
    from commgraph.runtime.options import JobOptions, JobSite
    from commgraph.topology import resolve_topology

    topology = resolve_topology("detect", workers=pset.num_parts, device="cpu")
    ordering = match_ordering("auto", "nccl" if device == "cuda" else "gloo")
    return JobSite(JobOptions(ordering=ordering), pset, topology, placement(pset, topology, None), device, free_bytes)


def _autos(data) -> list:
    """Every ``auto`` in ``data`` (nested dicts and lists)."""
    if isinstance(data, dict):
        return [a for value in data.values() for a in _autos(value)]
    if isinstance(data, list):
        return [a for value in data for a in _autos(value)]
    return [data] if data == "auto" else []


def test_the_launcher_decides_each_auto_as_a_worker_would(cora_set):
    from commgraph.nn import GNN
    from commgraph.plan.choose import choose_job_allreduce
    from commgraph.plan.features import place_features
    from commgraph.train.resolve import gradient_bytes, resolve_on_launcher
    from commgraph.train.shape import first_layer_choice

    config = TrainConfig.build(hidden=8, epochs=3, progress=False)
    site = _site(cora_set)
    resolved = resolve_on_launcher(config, site).config
    assert _autos({**resolved.to_dict(), "job": None}) == []  # the job's plan is the launcher's file
    assert resolved.job.ordering == "tagged"  # Gloo; on NCCL ordered
    assert _site(cora_set, "cuda").options.ordering == "ordered"
    # features: a CPU's table is host memory whatever is asked
    width = cora_set.part(0).features.shape[1]
    assert place_features(resolved.comm.features, "cpu", 1).placement == place_features("auto", "cpu", 1).placement
    # allreduce: the worker's choice for its model's gradient bytes
    model = GNN("sage", width, 8, 7, layers=2, heads=4, dropout=0.5)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert gradient_bytes(config, site) == nbytes
    assert resolved.comm.allreduce == choose_job_allreduce("auto", site.topology, site.devices, nbytes).name
    # first layer: the worker's rule, for both of its outcomes
    assert resolved.comm.first_layer == first_layer_choice(config, width, 2).mode == "owner"
    wide = TrainConfig.build(hidden=4096, epochs=3, progress=False)
    assert resolve_on_launcher(wide, site).config.comm.first_layer == first_layer_choice(wide, width, 2).mode
    assert first_layer_choice(wide, width, 2).mode == "features"
    # sampled training: the steps ship features, the full-graph evaluation follows the rule
    sampled = TrainConfig.build(sampler="neighbor", hidden=8, epochs=3, progress=False)
    comm = resolve_on_launcher(sampled, site).config.comm
    assert (comm.first_layer, comm.evaluation_first_layer) == ("features", first_layer_choice(sampled, width, 2).mode)
    assert comm.evaluation_first_layer == "owner"
    # what the user gave stays
    given = TrainConfig.build(features="gpu", allreduce="native", first_layer="features", progress=False)
    kept = resolve_on_launcher(given, site).config.comm
    assert (kept.features, kept.allreduce, kept.first_layer) == ("gpu", "native", "features")


def test_link_predictions_workers_receive_its_allreduce_decided_for_its_encoder(cora_set):
    import torch

    from commgraph.plan.choose import choose_job_allreduce
    from commgraph.pyg.link_training import build_encoder, resolved_link_data
    from commgraph.train.config import NODE_ONLY

    config = TrainConfig.build(task="link", model="sage", hidden=8, epochs=3, progress=False)
    site = _site(cora_set)
    data = resolved_link_data(config, site)
    unused = {name for names in NODE_ONLY.values() for name in names}  # link's workers never read these
    used = {section: {k: v for k, v in values.items() if k not in unused} for section, values in data.items()}
    assert _autos({**used, "job": None}) == [] and data["job"]["ordering"] == "tagged"
    encoder = build_encoder(config, int(cora_set.part(0).features.shape[1]))
    nbytes = sum(p.numel() * p.element_size() for p in encoder.parameters())
    assert nbytes == 4 * (1433 * 8 * 2 + 8 + 8 * 8 * 2 + 8) and isinstance(encoder, torch.nn.Module)
    assert data["comm"]["allreduce"] == choose_job_allreduce("auto", site.topology, site.devices, nbytes).name
    given = TrainConfig.build(task="link", model="sage", allreduce="native", progress=False)
    assert resolved_link_data(given, site)["comm"]["allreduce"] == "native"


@pytest.mark.parametrize("free, placed", [(10**12, "gpu"), (10**6, "host")])
def test_features_on_gpus_follow_the_free_memory(cora_set, free, placed):
    from commgraph.plan.features import place_features
    from commgraph.train.resolve import resolve_on_launcher

    site = _site(cora_set, "cuda", (free, 2 * free))
    table = max(cora_set.part(k).features.shape[0] for k in range(2)) * cora_set.part(0).features.shape[1] * 4
    resolved = resolve_on_launcher(TrainConfig.build(progress=False), site).config.comm
    assert resolved.features == placed == place_features("auto", "cuda", table, free).placement


@pytest.mark.multiproc
@pytest.mark.slow
def test_a_jobs_workers_receive_no_auto(tmp_path):
    """Both ranks of a 2-worker job receive the configuration with every ``auto`` decided."""
    if torch.cuda.is_available():
        pytest.skip("where torch sees CUDA each rank execs a fresh interpreter, which records nothing")
    log = tmp_path / "received"
    argv = ["train", "cora", "--workers", "2", "--partition", "chunk", "--epochs", "1", "--hidden", "8"]
    argv += ["--threads", "1", "--quiet"]
    _run_driver("received_driver.py", log, argv, tmp_path)
    received = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(received) == 2 and received[0] == received[1]
    assert _autos(received[0]) == []
    comm, job = received[0]["options"]["comm"], received[0]["job"]
    assert (comm["features"], comm["first_layer"], job["ordering"]) == ("host", "owner", "tagged")
    assert comm["allreduce"] in ("native", "lp", "tree", "ps")


@pytest.mark.parametrize("model", ["rgcn", "hgt"])
def test_a_typed_models_gradient_bytes_leave_the_embeddings_out(model, tmp_path):
    """R-GCN's and HGT's gradient bytes, as the launcher counts them on the ``meta`` device, are
    the shared parameters a worker's model sums (its embeddings' rows stay with their owners)."""
    from commgraph.graph import load_graph
    from commgraph.partition import load_partition_set
    from commgraph.partition.typed import make_typed_partition_set
    from commgraph.train.resolve import gradient_bytes
    from commgraph.train.rgcn import typed_model

    make_typed_partition_set(load_graph("mag-shaped:scale=0.0005,seed=0"), 2, tmp_path / "k2", seed=0)
    pset = load_partition_set(tmp_path / "k2")
    config = TrainConfig.build(model=model, hidden=8, **({"bases": 2} if model == "rgcn" else {}), progress=False)
    typed = pset.manifest["typed"]
    widths = [int(typed["num_features"][t]) for t in typed["node_types"]]
    owned = [np.arange(3, dtype=np.int64)] * len(widths)  # a worker's rows: embeddings the sum leaves out
    classes = max(int(np.max(pset.part(k).labels, initial=-1)) for k in range(2)) + 1
    worker = typed_model(config, widths, len(typed["relations"]), owned, classes)
    nbytes = sum(p.numel() * p.element_size() for p in worker.shared_parameters() if p.requires_grad)
    assert gradient_bytes(config, _site(pset)) == nbytes > 0
