"""The one renderer (``commgraph.render``): quantities scaled for a reader, typed tables written as
text (header row, chosen row marked), JSON, CSV and Markdown that parse back, the commands that
print them under ``--format``, and the data behind each picture."""

import ast
import csv
import io
import json
import re
from pathlib import Path

import pytest

from commgraph.cli.main import main
from commgraph.plan import choose_allreduce
from commgraph.plan.choose import EXECUTABLE, fastest_plan
from commgraph.render import Column, Report, Shown, Table, render
from commgraph.render.multipath import selectors_report
from commgraph.render.pictures import METRICS, metric_panels, plan_bars, scheduler_bars
from commgraph.render.schedulers import scheduler_report
from commgraph.render.units import count, nbytes, seconds
from commgraph.topology import load_preset

PNG = b"\x89PNG"
SRC = Path(__file__).resolve().parents[1] / "src" / "commgraph"
LLM = ["sim", "llm", "--model", "gpt3-13b", "--tp", "4", "--pp", "2", "--microbatches", "2", "--topology", "hgx-h100"]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.12501, "125 ms"),
        (0.29104027, "291 ms"),
        (2.9e-4, "290 us"),
        (12.5, "12.5 s"),
        (3e-9, "3.00 ns"),
        (0.0, "0 s"),
    ],
)
def test_seconds_are_scaled_to_the_value(value, text):
    assert seconds(value) == text


@pytest.mark.parametrize(
    ("value", "text"), [(1234567, "1.23 MB"), (999, "999 B"), (2.5e9, "2.50 GB"), (1000, "1.00 KB"), (0, "0 B")]
)
def test_bytes_are_decimal(value, text):
    assert nbytes(value) == text


def test_a_count_of_one_is_singular():
    assert (count(1, "epoch"), count(2, "epoch"), count(1_000, "node")) == ("1 epoch", "2 epochs", "1,000 nodes")


TABLE = Table(
    (Column("name", "planner", "text"), Column("t", "modeled", "s"), Column("b", "bytes", "B"), Column("n", "stages")),
    (
        {"name": "p2p", "t": 0.12501, "b": 1234567.0, "n": 2},
        {"name": "replicate", "t": Shown(0.0, "none"), "b": 0.0, "n": 1_000},
    ),
    chosen=0,
    chosen_by="--plan auto",
)
REPORT = Report({"planners": ["p2p", "replicate"]}, (TABLE,), before=("above",), after=("below",))


def test_text_has_a_header_row_scaled_units_and_the_chosen_row_marked():
    lines = render(REPORT, "text").splitlines()
    assert lines[0] == "above" and lines[-1] == "below"
    assert lines[1].split() == ["planner", "modeled", "bytes", "stages"]
    assert lines[2].split() == ["*", "p2p", "125", "ms", "1.23", "MB", "2"]
    assert lines[3].split() == ["replicate", "none", "0", "B", "1,000"]  # not 0.00: none
    assert lines[4] == "* chosen by --plan auto"


def test_csv_md_and_json_parse_back():
    rows = list(csv.DictReader(io.StringIO(render(REPORT, "csv"))))
    assert rows[0] == {
        "planner": "p2p",
        "modeled (s)": "0.12501",
        "bytes (B)": "1234567.0",
        "stages": "2",
        "chosen": "1",
    }
    assert rows[1]["modeled (s)"] == "0.0" and rows[1]["chosen"] == "0"  # raw values: the number, not the words
    md = render(REPORT, "md").splitlines()
    header = md.index("| planner | modeled | bytes | stages |")
    assert md[header + 1] == "| :--- | ---: | ---: | ---: |" and md[header + 2] == "| p2p \\* | 125 ms | 1.23 MB | 2 |"
    assert "\\* chosen by --plan auto" in md
    assert json.loads(render(REPORT, "json")) == REPORT.data


def test_a_slower_scheduler_reads_slower_not_a_negative_share():
    row = {
        "iteration_seconds": 1.2,
        "makespan_seconds": 1.2,
        "tokens_per_second": 1e5,
        "speedup": 0.9,
        "headroom_reached": -53.24,
        "coflows": {"pp": {"mean_seconds": 0.125}},
    }
    text = render(scheduler_report({"schedulers": {"fair": row}, "baseline": "megatron"}))
    assert "slower" in text and "-5324%" not in text and "pp 125 ms" in text and "vs megatron" in text


def test_decide_time_is_scaled_per_request():
    row = {"mean_s": 5e-6, "median_s": 4e-6, "p99_s": 1e-5, "decide_us": 291040.27, "links": []}
    text = render(selectors_report({"selectors": {"lp": row}}, "first"))
    assert "291 ms" in text and "us/request" not in text and "291040" not in text


@pytest.fixture(scope="module")
def cora2(tmp_path_factory):
    parts = tmp_path_factory.mktemp("render") / "cora2"
    assert main(["partition", "make", "cora", "--parts", "2", "--method", "chunk", "--out", str(parts), "--json"]) == 0
    return parts


def allgather(capsys, cora2, *options):
    argv = ["plan", "allgather", str(cora2), "--topology", "dgx1-v100", "--feature-dim", "16", *options]
    assert main(argv) == 0
    return capsys.readouterr().out


def test_plan_allgather_text_shows_the_header_and_the_plan_auto_takes(capsys, cora2):
    result = json.loads(allgather(capsys, cora2, "--json"))["planners"]
    chosen = fastest_plan({name: result[name]["modeled_seconds"] for name in EXECUTABLE})
    lines = allgather(capsys, cora2).splitlines()
    assert lines[0].split()[:4] == ["planner", "modeled", "per", "layer"]
    assert [line.split()[1] for line in lines if line.startswith("*")] == [chosen, "chosen"]
    assert lines[-1] == "* chosen by --plan auto"
    replicate = next(line for line in lines if line.split()[0] == "replicate")
    assert replicate.split()[1] == "none" and "0.00" not in replicate


def test_plan_allgather_formats_parse_back(capsys, cora2):
    expected = json.loads(allgather(capsys, cora2, "--format", "json"))["planners"]
    rows = list(csv.DictReader(io.StringIO(allgather(capsys, cora2, "--format", "csv"))))
    assert {r["planner"]: float(r["modeled per layer (s)"]) for r in rows} == {
        n: r["modeled_seconds"] for n, r in expected.items()
    }
    assert sum(int(r["chosen"]) for r in rows) == 1
    md = allgather(capsys, cora2, "--format", "md").splitlines()
    assert md[1].startswith("| :--- | ---: |") and len(md) >= 2 + len(expected)


def test_plan_allreduce_csv_and_bars_against_the_bound(capsys, tmp_path):
    argv = ["plan", "allreduce", "--topology", "p3.8xlarge", "--bytes", "1e8"]
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert main([*argv, "--format", "csv", "--png", str(tmp_path / "bars.png")]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["planner"] for r in rows] == list(result["planners"])
    assert {r["planner"]: float(r["algbw (GB/s)"]) for r in rows} == {
        n: r["bandwidth"]["algbw_gbps"] for n, r in result["planners"].items()
    }
    assert (tmp_path / "bars.png").read_bytes()[:4] == PNG
    chosen = next((r["planner"] for r in rows if r["chosen"] == "1"), None)
    times, algbw = plan_bars(result, chosen, 1e8)
    bound = min(r["bandwidth"]["bound"]["algbw_gbps"] for r in result["planners"].values())
    assert algbw.lines == {"throughput bound": bound} and algbw.values == tuple(
        r["bandwidth"]["algbw_gbps"] for r in result["planners"].values()
    )
    scale = {"s": 1.0, "ms": 1e-3, "us": 1e-6}[times.ylabel.split("(")[1].rstrip(")")]
    assert times.lines["throughput bound"] * scale == pytest.approx(1e8 / (bound * 1e9))
    assert times.chosen == (list(result["planners"]).index(chosen) if chosen else None)


def test_sim_llm_formats_names_no_network_and_draws_a_bar_per_scheduler(capsys, tmp_path):
    argv = [*LLM, "--scheduler", "megatron,hermod"]
    assert main([*argv, "--png", str(tmp_path / "llm.png")]) == 0
    text = capsys.readouterr().out
    assert "no network links" in text and "no network Gbit/s" not in text
    header = next(line for line in text.splitlines() if line.startswith("scheduler"))
    assert header.split()[:4] == ["scheduler", "iteration", "makespan", "tokens/s"]
    assert main([*argv, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {r["scheduler"]: float(r["iteration (s)"]) for r in rows} == {
        n: r["iteration_seconds"] for n, r in report["schedulers"].items()
    }
    (panel,) = scheduler_bars(report)
    assert panel.labels == ("megatron", "hermod") and set(panel.lines) == {
        "ceiling: free communication",
        "floor (per iteration)",
    }
    assert (tmp_path / "llm.png").read_bytes()[:4] == PNG
    assert main([*argv, "--format", "md"]) == 0
    assert "| scheduler | iteration | makespan |" in capsys.readouterr().out


def test_partition_info_formats(capsys, cora2):
    assert main(["partition", "info", str(cora2), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert main(["partition", "info", str(cora2), "--json"]) == 0
    parts = json.loads(capsys.readouterr().out)["parts"]
    assert [int(r["nodes"]) for r in rows] == [p["num_nodes"] for p in parts]
    assert main(["partition", "info", str(cora2), "--format", "md"]) == 0
    assert "| part | nodes | edges | remote |\n| ---: | ---: | ---: | ---: |" in capsys.readouterr().out


def test_partition_make_formats(capsys, tmp_path):
    make = ["partition", "make", "cora", "--parts", "2", "--method", "chunk"]
    assert main([*make, "--out", str(tmp_path / "j"), "--json"]) == 0
    parts = json.loads(capsys.readouterr().out)["parts"]
    assert main([*make, "--out", str(tmp_path / "c"), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [int(r["nodes"]) for r in rows] == [p["num_nodes"] for p in parts]
    assert main([*make, "--out", str(tmp_path / "m"), "--format", "md"]) == 0
    assert "| part | nodes | edges | remote |\n| ---: | ---: | ---: | ---: |" in capsys.readouterr().out


def test_topo_list_formats(capsys):
    assert main(["topo", "list", "--format", "json"]) == 0
    names = json.loads(capsys.readouterr().out)["presets"]
    assert main(["topo", "list", "--format", "csv"]) == 0
    assert [r["preset"] for r in csv.DictReader(io.StringIO(capsys.readouterr().out))] == names
    assert main(["topo", "list", "--format", "md"]) == 0
    assert capsys.readouterr().out.startswith("| preset |\n| :--- |\n")


RECORDS = [
    {"epoch": 1, "loss": 1.0, "epoch_seconds": 0.5, "comm_wait_seconds": 0.1, "total_bytes": 2e6},
    {"epoch": 2, "loss": 0.5, "epoch_seconds": 0.4, "comm_wait_seconds": 0.05, "total_bytes": 2e6},
]


def test_plot_draws_epoch_time_communication_wait_and_bytes(capsys, tmp_path):
    panels = metric_panels({"a": RECORDS}, list(METRICS))
    assert [p.series["a"] for p in panels] == [((1, 2), (0.5, 0.4)), ((1, 2), (0.1, 0.05)), ((1, 2), (2.0, 2.0))]
    assert [p.ylabel for p in panels] == ["epoch time (s)", "communication wait (s)", "bytes per epoch (MB)"]
    run = tmp_path / "a.jsonl"
    run.write_text("\n".join(json.dumps(r) for r in RECORDS))
    assert main(["plot", str(run), "--png", str(tmp_path / "m.png"), "--y", "epoch_s,comm_wait,bytes"]) == 0
    assert (tmp_path / "m.png").read_bytes()[:4] == PNG and "a: 2 epochs" in capsys.readouterr().err
    assert main(["plot", str(run), "--png", str(tmp_path / "n.png"), "--y", "loss_s"]) == 2
    assert "--y 'loss_s': choose from epoch_s, comm_wait, bytes" in capsys.readouterr().err


@pytest.mark.parametrize(("topology", "auto"), [("p3.8xlarge", "lp"), ("dgx1-v100", "native")])
def test_plan_allreduce_marks_the_row_allreduce_auto_takes(capsys, topology, auto):
    """The mark follows ``choose_allreduce``: a planned row is marked; where torch's own wins, no
    row is and a line says so."""
    assert choose_allreduce(load_preset(topology), 1e8) == auto
    assert main(["plan", "allreduce", "--topology", topology, "--bytes", "1e8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    marked = [line.split()[1] for line in lines if line.startswith("* ")]
    if auto == "native":
        assert marked == [] and any(line.startswith("--allreduce auto takes native") for line in lines)
    else:
        assert marked == [auto, "chosen"] and "* chosen by --allreduce auto" in lines


def test_partition_make_json_keeps_its_progress_on_stderr(capsys, tmp_path):
    argv = ["partition", "make", "cora", "--parts", "2", "--method", "chunk", "--out", str(tmp_path / "p"), "--json"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["method"] == "chunk"
    assert err.startswith("partitioning cora (2,708 nodes, 10,556 edges) into 2 parts with chunk\n")


def test_no_printed_text_names_binary_byte_units():
    """Bytes print in one system, decimal (KB, MB, GB): no string the sources print says KiB, MiB or GiB."""
    found = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for path in sorted(SRC.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.search(r"\d ?[KMG]iB|\b[KMG]iB\b", node.value)
    ]
    assert not found, found
