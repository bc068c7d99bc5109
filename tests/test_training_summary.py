"""A training run summarised from its metrics file (:mod:`commgraph.study.training`): exact
spreads, shares and means from known records, None for what an older run did not record, and
``commgraph plot`` printing the same summary in every format."""

import csv
import io
import json

import pytest

from commgraph.cli.main import main
from commgraph.study.training import RunSummary, Spread, summarize_run, summarize_runs

RECORDS = [
    {"epoch": 1, "loss": 2.0, "epoch_seconds": 0.4, "comm_wait_seconds": 0.1, "comm_bytes": 100},
    {"epoch": 2, "loss": 1.5, "epoch_seconds": 0.2, "comm_wait_seconds": 0.0, "comm_bytes": 300},
    {"epoch": 3, "loss": 1.0, "epoch_seconds": 0.6, "comm_wait_seconds": 0.2, "comm_bytes": 200},
]
MOVED = {"allreduce_bytes": 50, "feature_bytes": 0}
STEPS = ((0.2, 0.3), (0.2, 0.1), (0.25, 0.2))


def records() -> list[dict]:
    return [
        {**r, **MOVED, "total_bytes": r["comm_bytes"] + 50, "predicted_step_seconds": p, "measured_step_seconds": m}
        for r, (p, m) in zip(RECORDS, STEPS, strict=True)
    ]


def test_a_run_s_spreads_share_bytes_and_step_times_are_exact():
    run = summarize_run(records())
    assert run.epochs == 3 and run.loss == 1.0
    assert run.epoch_seconds == Spread(0.4, 0.2, 0.6) and run.comm_wait_seconds == Spread(0.1, 0.0, 0.2)
    assert run.wait_share == pytest.approx(0.3 / 1.2)
    assert run.bytes == {"halo": 200.0, "all-reduce": 50.0, "total": 250.0}  # features: zero every epoch
    assert run.predicted_step_seconds == 0.2 and run.measured_step_seconds == 0.2
    assert run.measured_over_predicted == 1.0


def test_what_an_older_run_did_not_record_is_none():
    run = summarize_run([{"epoch": 1, "loss": 0.5}])
    assert run == RunSummary(1, 0.5, None, None, None, {}, None, None)
    assert run.measured_over_predicted is None


def test_runs_are_summarised_in_order_and_reported_as_they_end():
    steps = []
    summary = summarize_runs({"a": records(), "b": RECORDS}, progress=steps.append)
    assert list(summary.runs) == ["a", "b"] and steps == ["summarise a", "summarise b"]
    assert summary.runs["b"].bytes == {"halo": 200.0} and summary.runs["b"].predicted_step_seconds is None


def test_plot_prints_the_summary_in_every_format(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records()))
    assert main(["plot", str(path), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == json.loads(json.dumps(summarize_runs({"run": records()}).to_dict())) and err == ""
    assert main(["plot", str(path), "--format", "csv"]) == 0
    runs, moved = capsys.readouterr().out.split("\n\n")
    (row,) = csv.DictReader(io.StringIO(runs))
    assert float(row["epoch median (s)"]) == 0.4 and float(row["wait share (fraction)"]) == pytest.approx(0.25)
    assert next(csv.DictReader(io.StringIO(moved))) == {
        "run": "run",
        "halo (B)": "200.0",
        "all-reduce (B)": "50.0",
        "total (B)": "250.0",
    }
    assert main(["plot", str(path)]) == 0
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header[:4] == ["run", "epochs", "last", "loss"]
    assert main(["plot", str(path), "--y", "epoch_s"]) == 2
    assert "give --png FILE.png" in capsys.readouterr().err
