"""Long simulations report progress on stderr (``commgraph.sim.progress``): checked on small cases
with the thresholds lowered to zero, so every stage and the event loop's last tick print at once;
at the real thresholds a short run prints nothing."""

import json
import threading

import pytest

from commgraph.cli.main import main
from commgraph.sim import Transfer, progress, simulate
from commgraph.topology import load_preset
from deadlines import wait_until

LLM = ["sim", "llm", "--model", "gpt3-13b", "--tp", "4", "--pp", "2", "--microbatches", "2", "--topology", "hgx-h100"]


@pytest.fixture
def at_once(monkeypatch):
    """Every line prints: no silent start, no interval between lines."""
    monkeypatch.setattr(progress, "AFTER_SECONDS", 0.0)
    monkeypatch.setattr(progress, "EVERY_SECONDS", 0.0)


def test_sim_llm_reports_each_stage_and_the_event_loop_on_stderr_with_json_on_stdout(at_once, capsys):
    assert main([*LLM, "--scheduler", "megatron,hermod", "--json"]) == 0
    captured = capsys.readouterr()
    assert set(json.loads(captured.out)["schedulers"]) == {"megatron", "hermod"}
    lines = captured.err.splitlines()
    stages = [line.split(" (")[0] for line in lines if "tasks done" not in line and "still running" not in line]
    assert stages == [
        "sim llm: building the DAG",
        "sim llm: scheduling megatron",
        "sim llm: simulating megatron",
        "sim llm: scheduling hermod",
        "sim llm: simulating hermod",
        "sim llm: simulating free communication",
        "sim llm: the floor",
    ]
    ticks = {line.split(": ")[1]: line.split(" simulated s, ")[1] for line in lines if "tasks done" in line}
    assert {"simulating megatron", "simulating hermod", "simulating free communication"} <= set(ticks)
    for counts in ticks.values():  # each loop's last tick: every task finished
        done, total = counts.split(" tasks done")[0].split(" of ")
        assert done == total


def test_sim_dag_and_plan_report_their_simulations(at_once, capsys, tmp_path):
    dag = tmp_path / "dag.json"
    dag.write_text(json.dumps({"tasks": [{"id": "x", "type": "transfer", "src": "gpu0", "dst": "gpu4", "bytes": 4e7}]}))
    assert main(["sim", "dag", str(dag), "--topology", "dgx1-v100", "--json"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("sim dag: simulating 1 tasks (") and err[1].startswith("sim dag: simulating 1 tasks: ")
    assert "1 of 1 tasks done" in err[1]
    assert main(["plan", "allreduce", "--topology", "p3.8xlarge", "--planner", "ring", "--json"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("plan: pricing ring (") and "tasks done" in err


def test_short_runs_and_runs_outside_a_report_stay_silent(capsys):
    assert main([*LLM, "--scheduler", "megatron"]) == 0
    assert capsys.readouterr().err == ""
    progress.stage("outside")  # no report: nothing to say
    result = simulate(load_preset("hgx-h100"), [Transfer("x", "gpu0", "gpu1", 1e9)], timeline=False)
    assert result.makespan > 0 and capsys.readouterr().err == ""


def test_a_report_prints_no_more_often_than_its_interval(monkeypatch, capsys):
    monkeypatch.setattr(progress, "AFTER_SECONDS", 0.0)
    monkeypatch.setattr(progress, "EVERY_SECONDS", 1e9)
    with progress.reporting("test"):
        progress.stage("one")  # a stage always prints once the run is long
        net = load_preset("hgx-h100")
        simulate(net, [Transfer("x", "gpu0", "gpu1", 1e9)], timeline=False)  # its tick is within the interval
        progress.stage("two")
    assert [line.split(" (")[0] for line in capsys.readouterr().err.splitlines()] == ["test: one", "test: two"]


def test_a_long_stage_without_ticks_says_it_is_still_running(monkeypatch, capsys):
    """A stage that neither ticks nor starts another (building a DAG, an LP) still prints a line
    every HEARTBEAT_SECONDS once the run is long, and the heartbeat stops with the report."""
    monkeypatch.setattr(progress, "AFTER_SECONDS", 0.0)
    monkeypatch.setattr(progress, "HEARTBEAT_SECONDS", 0.01)
    said = []
    with progress.reporting("test"):
        progress.stage("solving")
        assert wait_until(lambda: said.extend(capsys.readouterr().err.splitlines()) or len(said) >= 2, 60)
    assert said[0].startswith("test: solving (") and said[1].startswith("test: solving, still running (")
    capsys.readouterr()
    assert not any(t.name == "commgraph-progress" for t in threading.enumerate())


def test_a_run_that_turns_long_inside_a_stage_names_it_at_once(monkeypatch, capsys):
    """A stage that began before the run was long (``sim llm`` building an 8,192-GPU DAG) is named
    on stderr as soon as the run passes AFTER_SECONDS, not a heartbeat interval later."""
    monkeypatch.setattr(progress, "AFTER_SECONDS", 0.05)
    monkeypatch.setattr(progress, "HEARTBEAT_SECONDS", 1e9)
    said = []
    with progress.reporting("test"):
        progress.stage("building the DAG")  # too early to print
        assert wait_until(lambda: said.extend(capsys.readouterr().err.splitlines()) or said, 60)
    assert [line.split(" (")[0] for line in said] == ["test: building the DAG"]
