"""Studies (:mod:`commgraph.study`): the CLI and ``benchmarks/`` print the same report of one study
call each, a study reports its steps to a progress callback, and a report holds what it returns
whether or not it keeps each run."""

import json
import sys
from pathlib import Path

import pytest

from commgraph.cli import llm as llm_cli
from commgraph.cli.main import main
from commgraph.study import compare_schedulers, compare_selectors, sweep_selectors
from commgraph.topology import load_preset
from commgraph.workload import Layout, ModelSpec, gpu, model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import llm_schedulers  # noqa: E402

FATTREE = "fattree:k=4,server=hgx-h100,nics=1,latency=1,bisection=full"  # the benchmark's 128 GPUs


@pytest.fixture
def calls(monkeypatch):
    """Every comparison :func:`compare_schedulers` returns, to the CLI and to the benchmark."""
    made = []

    def spy(*args, **kwargs):
        made.append(compare_schedulers(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(llm_cli, "compare_schedulers", spy)
    monkeypatch.setattr(llm_schedulers, "compare_schedulers", spy)
    return made


def test_the_benchmark_and_sim_llm_print_the_same_numbers_from_one_study_call(calls, capsys):
    case = ["--iterations", "1", "--microbatches", "2", "--routing-alpha", "1"]
    llm_schedulers.main(
        ["--part", "scale", "--models", "gpt3-13b", "--gpus", "128", "--schedulers", "megatron,hermod", *case]
    )
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| gpt3-13b"))
    argv = ["sim", "llm", "--model", "gpt3-13b", "--topology", FATTREE, "--speeds", "ib=12.5,pcie=64"]
    assert main([*argv, "--dp-collective", "zero2", "--scheduler", "megatron,hermod", *case, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(calls) == 2  # one study call each
    assert calls[0].to_dict() == calls[1].to_dict()
    rows, top = report["schedulers"], report["ceiling"]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1:] == [
        "2",
        f"{report['flows']:,}",
        f"{rows['megatron']['iteration_seconds']:.3f}",
        f"{rows['hermod']['iteration_seconds']:.3f}",
        f"{top['free_communication_seconds']:.3f}",
        f"{top['ceiling']:.3f}x",
        f"{top['link_seconds']:.3f}",
        f"{rows['hermod']['speedup']:.3f}x",
        f"{top['floor_seconds']:.3f}",
        *(f"{rows[s]['makespan_seconds'] / top['floor_seconds']:.3f}x" for s in ("megatron", "hermod")),
        *cells[-3:-1],  # the headroom closed: checked below
        cells[-1],  # wall seconds
    ]
    reached = rows["hermod"]["headroom_reached"]
    assert cells[-3] == ("-" if reached is None else f"{reached:.0%}")


def test_a_comparison_reports_its_steps_and_the_same_rows_without_its_runs():
    topology = load_preset("hgx-h100")
    layout = Layout(2, 2, 2, 1, 2)
    steps = []
    kept = compare_schedulers(model("gpt3-13b"), layout, gpu("h100"), topology, ["fair", "hermod"])
    dropped = compare_schedulers(
        model("gpt3-13b"), layout, gpu("h100"), topology, ["fair", "hermod"], keep_outcomes=False, progress=steps.append
    )
    assert steps == [
        "build",
        "schedule fair",
        "simulate fair",
        "schedule hermod",
        "simulate hermod",
        "free communication",
        "floor",
    ]
    assert set(kept.outcomes) == {"fair", "hermod"} and dropped.outcomes == {}
    assert kept.to_dict() == dropped.to_dict()


def test_one_matching_per_scheduler_leaves_the_others_at_their_default():
    topology = load_preset("hgx-h100")
    layout = Layout(1, 2, 4, 4, 2)
    spec, h100 = ModelSpec("tiny-moe", 2, 512, 8, 512, 1, 1000, experts=8, top_k=2, ffn=1024), gpu("h100")
    mixed = compare_schedulers(spec, layout, h100, topology, ["fair", "hermod"], matching={"hermod": "direct"})
    direct = compare_schedulers(spec, layout, h100, topology, ["fair", "hermod"], matching="direct")
    default = compare_schedulers(spec, layout, h100, topology, ["fair", "hermod"])
    assert mixed.schedulers == direct.schedulers  # fair sends directly by default
    assert mixed.schedulers["fair"] == default.schedulers["fair"]
    assert mixed.schedulers["hermod"] != default.schedulers["hermod"]  # hermod's default is Algorithm 3


def test_selector_studies_report_each_step_and_the_cli_prints_their_reports(capsys):
    topology = load_preset("leo-fnic")
    done = []
    from commgraph.plan.multipath import load_workload

    comparison = compare_selectors(
        load_workload(topology, "kvs:load=1,n=60"), ["direct", "toll-inflight"], progress=done.append
    )
    assert done == ["direct", "toll-inflight"]
    assert main(["sim", "multipath", "simulate", "--topology", "leo-fnic", "--workload", "kvs:load=1,n=60",
                 "--selector", "direct,toll-inflight", "--json"]) == 0  # fmt: skip
    printed, mine = json.loads(capsys.readouterr().out), json.loads(json.dumps(comparison.to_dict()))
    for report in (printed, mine):  # decision times are wall times
        assert all(row.pop("decide_us") >= 0 for row in report["selectors"].values())
    assert printed == mine
    done.clear()
    report = sweep_selectors(topology, "kvs:load=1,n=60", [0.3, 0.6], ["direct"], seeds=2, progress=done.append)
    assert done == ["load 0.3 seed 0", "load 0.3 seed 1", "load 0.6 seed 0", "load 0.6 seed 1"]
    assert report.bound_s == pytest.approx(2 * report.points[0].row("direct")["median_s"])
    assert report.to_dict()["sustainable_per_s"]["direct"] == report.sustainable()["direct"] > 0
