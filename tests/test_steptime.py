"""Step time predicted before launch: the cost model's arithmetic, its calibration in the topology
YAML (round trip and refusals), ``--dry-run``'s fields, and the metrics' predicted seconds."""

from __future__ import annotations

import io
import json
import os
from dataclasses import replace

import numpy as np
import pytest
import yaml

from commgraph.cli import topo
from commgraph.cli.main import main
from commgraph.errors import PlanError, TopologyError
from commgraph.plan.memory import JobShape
from commgraph.plan.steptime import SampledHops, exchanged_layers, layer_terms, step_work
from commgraph.runtime import compute_probe
from commgraph.sim import steptime
from commgraph.sim.steptime import (
    DEFAULT_COLLECTIVE_S,
    LayerWork,
    StepWork,
    collective_seconds,
    compute_seconds,
    other_machine,
    predict_step,
)
from commgraph.topology import read_yaml, resolve_topology, write_yaml
from commgraph.topology.compute import MODELS, ComputeModel, contention
from commgraph.topology.model import Calibration

MODEL = ComputeModel(
    edge_s={"gcn": 2e-9, "sage": 3e-9, "gat": 5e-9, "gin": 7e-9},
    row_s={"gcn": 1e-10, "sage": 2e-10, "gat": 3e-10, "gin": 4e-10},
    layer_s={"gcn": 1e-4, "sage": 2e-4, "gat": 3e-4, "gin": 4e-4},
    step_s={"gcn": 1e-3, "sage": 2e-3, "gat": 3e-3, "gin": 4e-3},
    sample_edge_s=1e-7,
    sample_batch_s=5e-5,
    gather_byte_s=1e-9,
    efficiency=0.5,
    machine="x86_64 test machine",
    errors={"gcn": 0.1},
)


def test_compute_is_the_formula_on_given_coefficients():
    layers = (LayerWork(1000, 16, 200, 32, 16), LayerWork(1000, 4, 100, 16, 4))
    work = StepWork("sage", layers, sampled=True, sampled_edges=500, gathered_bytes=4000, threads=3, steps=7)
    edge_term = 1000 * 16 + 1000 * 4
    row_term = 200 * 32 * 16 + 100 * 16 * 4
    single = 3e-9 * edge_term + 2e-10 * row_term
    fixed = 2e-3 + 2 * 2e-4  # a step and two layers, not spread over threads
    assert compute_seconds(work, MODEL) == pytest.approx(fixed + single / 2.0, rel=1e-12)  # 1 + (3 - 1) 0.5
    step = predict_step(work, MODEL, halo_seconds=0.25, allreduce_seconds=0.125)
    assert step.sampling == pytest.approx(5e-5 + 500 * 1e-7, rel=1e-12)
    assert step.feature_fetch == pytest.approx(4000 * 1e-9)  # no rows given: the bytes alone
    assert step.step_seconds == pytest.approx(fixed + single / 2 + 1e-4 + 4e-6 + 0.25 + 0.125, rel=1e-12)
    rows = predict_step(replace(work, gathered_rows=100), MODEL, 0.0, 0.0)
    assert rows.feature_fetch == pytest.approx(100 * MODEL.gather_row_s + 4000 * 1e-9, rel=1e-12)
    assert step.epoch_seconds == pytest.approx(7 * step.step_seconds)
    assert step.defaults == ()
    full = replace(work, sampled=False, sampled_edges=0.0)
    assert predict_step(full, MODEL, 0.0, 0.0).sampling == 0.0  # full-graph: no batch drawn


def test_the_probe_fit_recovers_known_coefficients_from_synthetic_timings(monkeypatch):
    # step, layer, edge and row seconds by model; the timings are the formula's exactly
    known = {m: (1e-3 * (i + 1), 2e-4 * (i + 1), 3e-9 * (i + 1), 5e-11 * (i + 1)) for i, m in enumerate(MODELS)}

    def timed(model, graph, width, layers):
        return float(np.dot(known[model], compute_probe._terms(model, graph, width, layers)))

    def sample(graph):
        return [(1.0, float(e), 4e-5 + 2e-8 * e) for e in (1000, 9000, 30000)]

    monkeypatch.setattr(compute_probe, "_step_seconds", timed)
    monkeypatch.setattr(compute_probe, "_sample_points", sample)
    gathered = [(r, b, 5e-8 * r + 1e-9 * b) for r, b in ((2000, 128000), (20000, 1280000), (2000, 4096000))]
    monkeypatch.setattr(compute_probe, "_gather_points", lambda: gathered)
    monkeypatch.setattr(compute_probe, "_together", lambda step, processes: [1.75 * step()] * processes)
    model = compute_probe.probe_compute()
    for m, (step, layer, edge, row) in known.items():
        assert model.step_s[m] == pytest.approx(step, rel=1e-6) and model.layer_s[m] == pytest.approx(layer, rel=1e-6)
        assert model.edge_s[m] == pytest.approx(edge, rel=1e-6) and model.row_s[m] == pytest.approx(row, rel=1e-6)
        assert model.errors[m] < 1e-9
    assert model.sample_batch_s == pytest.approx(4e-5, rel=1e-6) and model.sample_edge_s == pytest.approx(2e-8)
    assert model.gather_byte_s == pytest.approx(1e-9) and model.gather_row_s == pytest.approx(5e-8)
    assert model.errors["gather"] == pytest.approx(0.0, abs=1e-9) and model.cores == (os.cpu_count() or 1)
    assert model.corun == pytest.approx(1.75 if model.cores > 1 else 1.0, rel=1e-12)
    # a fit the line cannot follow reports its worst relative error
    (rate,), error = compute_probe._fit([(1.0, 1.0), (2.0, 3.0)])
    assert rate == pytest.approx(15 / 13) and error == pytest.approx(3 / 13)


@pytest.mark.multiproc
def test_corun_runs_the_step_in_forked_processes_at_once():
    assert compute_probe._together(lambda: 0.25, 3) == [0.25, 0.25, 0.25]
    assert compute_probe._corun(lambda: 0.25, 1) == 1.0  # one core: nothing to share

    def fails() -> float:
        raise RuntimeError("a probe that fails")

    with pytest.raises(TopologyError, match="2 of 2 forked processes failed"):
        compute_probe._together(fails, 2)


def test_a_layer_aggregates_at_its_narrower_width_where_it_transforms_first():
    # gcn narrowing 32 -> 16 transforms its 200 sources and aggregates 16 wide; gin aggregates 32 wide its 100 rows
    assert layer_terms("gcn", [(1000, 200, 100, 32, 16)]) == (1000 * 16, 200 * 32 * 16)
    assert layer_terms("gin", [(1000, 200, 100, 32, 16)]) == (1000 * 32, 100 * 32 * 16)
    assert layer_terms("gat", [(1000, 200, 100, 32, 64)]) == (1000 * 64, 200 * 32 * 64)


def test_full_graph_work_reads_the_largest_part(cora_set):
    shape = JobShape(2, 2, 16, 2, model="gcn")
    work = step_work(cora_set, shape, threads=1)
    parts = [cora_set.part(k, check=False) for k in range(2)]
    edges = max(int(p.indices.shape[0]) for p in parts)
    assert [layer.edges for layer in work.layers] == [edges, edges]
    assert work.layers[0].width_in == 1433 and work.layers[1].width_out == 7
    assert exchanged_layers(shape) == 1 and exchanged_layers(replace(shape, first_layer="owner")) == 2
    assert exchanged_layers(replace(shape, sampler="neighbor", fanouts=(5, 5))) == 0


def test_workers_beyond_the_cores_take_turns(cora_set):
    shape = JobShape(4, 4, 16, 2, model="gcn")
    alone, shared = (step_work(cora_set, shape, threads=1, cores=c) for c in (4, 2))
    assert alone.contention == 1.0 and shared.contention == 2.0 and contention(3, 4) == 1.0
    work = replace(alone, sampled=True, sampled_edges=100, gathered_bytes=800, gathered_rows=10)
    one, two = (predict_step(replace(work, contention=c), MODEL, 0.5, 0.25) for c in (1.0, 2.0))
    for part in ("compute", "sampling", "feature_fetch"):
        assert getattr(two, part) == pytest.approx(2 * getattr(one, part), rel=1e-12)
    assert (two.halo_exchange, two.allreduce) == (0.5, 0.25)  # the exchanges are the simulator's
    assert step_work(cora_set, shape, cores=2, machine_workers=1).threads == 2  # threads default to a worker's cores


def test_busy_cores_slow_one_another_by_the_measured_corun(cora_set):
    # 4 cores that run 1.6x slower all busy: 1 + 0.6 (W - 1) / 3 up to the cores, 1.6 W / 4 beyond
    assert [contention(w, 4, 1.6) for w in (1, 2, 3, 4)] == pytest.approx([1.0, 1.2, 1.4, 1.6], rel=1e-12)
    assert contention(8, 4, 1.6) == pytest.approx(3.2, rel=1e-12) and contention(5, 1, 1.6) == pytest.approx(8.0)
    shape = JobShape(2, 2, 16, 2, model="gcn")
    assert step_work(cora_set, shape, threads=1, cores=2, corun=1.5).contention == pytest.approx(1.5)
    with pytest.raises(TopologyError, match="corun must be a slowdown >= 1"):
        ComputeModel.from_dict({**MODEL.to_dict(), "corun": 0.5})


def test_a_sampled_steps_request_round_is_priced_as_its_collectives(cora_set):
    from commgraph.train.shape import sampled_hops

    shape = JobShape(2, 2, 16, 2, sampler="neighbor", batch_size=32, fanouts=(10, 5), model="sage")
    hops = sampled_hops(cora_set, shape.fanouts, shape.batch_size)
    work = step_work(cora_set, shape, threads=1, hops=hops)
    assert work.collectives == 2 and step_work(cora_set, replace(shape, workers=1), hops=hops).collectives == 0
    assert step_work(cora_set, JobShape(2, 2, 16, 2, model="sage"), threads=1).collectives == 0  # full-graph
    # two collectives of a calibrated 700 us each, beside the rows' reads, on top of the contention
    base = replace(work, gathered_rows=10, gathered_bytes=800, contention=1.5)
    reads = 1.5 * (10 * MODEL.gather_row_s + 800 * MODEL.gather_byte_s)
    priced = predict_step(base, MODEL, 0.0, 0.0, collective_seconds=7e-4)
    assert priced.feature_fetch == pytest.approx(reads + 2 * 7e-4, rel=1e-12) and priced.defaults == ()
    default = predict_step(base, MODEL, 0.0, 0.0)  # not calibrated: the default, and said so
    assert default.feature_fetch == pytest.approx(reads + 2 * DEFAULT_COLLECTIVE_S, rel=1e-12)
    assert default.defaults == ("collective latency",)
    assert predict_step(replace(base, collectives=0), MODEL, 0.0, 0.0).defaults == ()
    topology = resolve_topology("localhost-cpu:2")
    assert collective_seconds(topology) is None
    when = "2024-05-01T12:00:00+00:00"
    timed = replace(topology, calibrated=Calibration(when=when, how="test", host="h", collective_us=700.0))
    assert collective_seconds(timed) == pytest.approx(7e-4, rel=1e-12)


def test_sampled_work_reads_the_measured_hops(cora_set):
    from commgraph.train.shape import sampled_hops

    shape = JobShape(2, 2, 16, 2, sampler="neighbor", batch_size=32, fanouts=(10, 5), model="sage")
    hops = sampled_hops(cora_set, shape.fanouts, shape.batch_size)
    assert hops.destinations[0] == 32 and hops.sources[0] == hops.destinations[1]  # a hop's table: the next's targets
    assert all(e <= d * f for d, e, f in zip(hops.destinations, hops.edges, shape.fanouts))
    work = step_work(cora_set, shape, threads=1, hops=hops)
    assert work.gathered_rows == hops.sources[-1] and work.gathered_bytes == 4 * 1433 * hops.sources[-1]
    assert work.sampled_edges == pytest.approx(sum(hops.edges)) and work.layers[-1].rows <= 32 * 11
    # every training node of the busiest part with all its in-neighbours: counted exactly
    parts = [cora_set.part(k, check=False) for k in range(2)]
    part = max(parts, key=lambda p: int(np.count_nonzero(p.train_mask)))
    train = np.asarray(part.owned)[np.asarray(part.train_mask, dtype=bool)]
    indptr, indices = (np.asarray(a) for a in cora_set.in_edges())
    neighbours = np.concatenate([indices[indptr[v] : indptr[v + 1]] for v in train])
    whole = sampled_hops(cora_set, (-1,), train.size)
    table = np.union1d(train, neighbours).size
    assert whole == SampledHops((float(train.size),), (float(table),), (float(neighbours.size),))
    with pytest.raises(PlanError, match="measured hop by hop"):
        step_work(cora_set, shape, threads=1)


def test_calibrated_compute_round_trips_through_the_yaml(tmp_path):
    topology = resolve_topology("localhost-cpu:2")
    calibrated = Calibration("2026-01-01T00:00:00+00:00", "test", "host", compute=MODEL.to_dict())
    write_yaml(replace(topology, calibrated=calibrated), tmp_path / "t.yaml")
    back = read_yaml(tmp_path / "t.yaml")
    assert ComputeModel.from_dict(back.calibrated.compute) == MODEL
    assert steptime.compute_model(back) == MODEL
    assert steptime.compute_model(topology) == steptime.DEFAULTS  # no calibration: the defaults


@pytest.mark.parametrize(
    "change, names",
    [
        ({"efficiency": 1.5}, "efficiency"),
        ({"sample_edge_s": -1}, "sample_edge_s"),
        ({"step_s": {**MODEL.step_s, "gat": float("nan")}}, "step_s"),
        ({"edge_s": {"gcn": 1e-9}}, "edge_s"),
        ({"speed": 1}, "unknown field"),
    ],
)
def test_a_wrong_compute_section_is_refused(tmp_path, change, names):
    topology = resolve_topology("localhost-cpu:2")
    calibrated = Calibration("2026-01-01T00:00:00+00:00", "test", "host", compute={**MODEL.to_dict(), **change})
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({**topology.to_dict(), "calibrated": calibrated.to_dict()}))
    with pytest.raises(TopologyError, match=names):
        read_yaml(path)


def test_a_model_from_another_machine_is_warned_about():
    assert "x86_64 test machine" in other_machine(MODEL)
    assert other_machine(replace(MODEL, machine=steptime.machine_kind())) is None
    assert other_machine(steptime.DEFAULTS) is None


def test_calibrate_refuses_a_bad_compute_fit_unless_forced(monkeypatch):
    bad = replace(MODEL, errors={"gcn": 0.1, "gather": 0.7})
    monkeypatch.setattr("commgraph.runtime.compute_probe.probe_compute", lambda: bad)
    topology = replace(
        resolve_topology("localhost-cpu:2"), calibrated=Calibration("2026-01-01T00:00:00+00:00", "t", "h")
    )
    with pytest.raises(TopologyError, match="'gather'.*70%.*--force"):
        topo._with_compute(topology, False, io.StringIO())
    assert topo._with_compute(topology, True, io.StringIO()).calibrated.compute == bad.to_dict()


def test_dry_run_json_carries_the_step_time_and_names_defaults(cora_set, capsys):
    args = ["train", str(cora_set.path), "--dry-run", "--json", "--hidden", "16", "--topology", "localhost-cpu:2"]
    assert main(args) == 0
    step = json.loads(capsys.readouterr().out)["step_time"]
    parts = ("compute", "sampling", "feature_fetch", "halo_exchange", "allreduce")
    assert step["step_seconds"] == pytest.approx(sum(step[f"{p}_seconds"] for p in parts))
    assert step["epoch_seconds"] == pytest.approx(step["steps_per_epoch"] * step["step_seconds"])
    assert step["halo_exchange_seconds"] > 0 and step["defaults"] == ["compute", "sampling", "feature fetch"]
    assert main(args[:-1] + ["4xdgx1-v100-ib", "--workers", "2"]) == 0  # a cluster's topology still predicts
    assert main([*args[:3], "--topology", "localhost-cpu:2", "--hidden", "16"]) == 0
    text = capsys.readouterr().out
    assert "step time estimate" in text and "defaults, not measured here: compute, sampling, feature fetch" in text


def test_dry_run_prices_the_compute_on_the_threads_given(cora_set, tmp_path, capsys):
    topology = resolve_topology("localhost-cpu:2")
    calibrated = Calibration("2026-01-01T00:00:00+00:00", "test", "host", compute=MODEL.to_dict())
    write_yaml(replace(topology, calibrated=calibrated), tmp_path / "t.yaml")
    compute = {}
    for threads in (1, 3):
        args = ["train", str(cora_set.path), "--model", "gcn", "--dry-run", "--json", "--topology", "localhost-cpu:2"]
        assert main([*args, "--cost-model", str(tmp_path / "t.yaml"), "--threads", str(threads)]) == 0
        compute[threads] = json.loads(capsys.readouterr().out)["step_time"]["compute_seconds"]
    fixed = MODEL.step_s["gcn"] + 2 * MODEL.layer_s["gcn"]  # two layers; the sized terms: 1 + (3 - 1) 0.5 faster
    assert compute[3] - fixed == pytest.approx((compute[1] - fixed) / 2, rel=1e-9)


@pytest.mark.multiproc
def test_every_epoch_records_predicted_beside_measured(tmp_path):
    metrics = tmp_path / "m.jsonl"
    args = ["train", "cora", "--epochs", "2", "--hidden", "8", "--quiet", "--device", "cpu", "--threads", "1"]
    assert main([*args, "--partition-dir", str(tmp_path / "parts"), "--metrics-out", str(metrics)]) == 0
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert len(records) == 2
    for record in records:
        assert record["predicted_step_seconds"] > 0 and record["predicted_epoch_seconds"] > 0
        assert record["measured_step_seconds"] == pytest.approx(record["epoch_seconds"] / record["steps"])
    png = tmp_path / "p.png"
    assert main(["plot", str(metrics), "--predicted", "--png", str(png)]) == 0 and png.stat().st_size > 0
    sampled = ["--sampler", "neighbor", "--batch-size", "64", "--steps-per-epoch", "2", "--epochs", "1"]
    sampled += ["--partition-dir", str(tmp_path / "parts"), "--metrics-out", str(metrics), "--force"]
    assert main([*args, *sampled]) == 0
    record = json.loads(metrics.read_text().splitlines()[-1])
    assert record["steps"] == 2 and 0 < record["measured_step_seconds"] * 2 <= record["epoch_seconds"]  # steps only
