"""Every command that prints a table offers ``--format text|json|csv|md`` with one help text, and
its ``--format json`` output parses: the command tree is walked whole, and the commands that print
no table are named with what they print instead."""

import argparse
import csv
import io
import json
from pathlib import Path

import pytest

from commgraph.cli.main import build_parser, main
from commgraph.render import FORMAT_HELP, FORMATS

NO_TABLE = {
    "graph convert": "writes a graph file",
    "graph datasets download": "progress and one line a dataset",
    "topo detect": "YAML",
    "topo calibrate": "YAML",
    "topo validate": "one line",
}


def commands(parser=None, path=()):
    """(path, parser) of every command (a parser without subcommands)."""
    parser = parser or build_parser()
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        yield " ".join(path), parser
    for action in groups:
        for name, child in action.choices.items():
            yield from commands(child, (*path, name))


COMMANDS = dict(commands())


def option(parser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


def test_every_command_that_prints_a_table_offers_the_four_formats_one_way():
    assert set(NO_TABLE) < set(COMMANDS)
    for name, parser in COMMANDS.items():
        given = option(parser, "--format")
        if name in NO_TABLE:
            assert given is None, name
            continue
        assert given is not None, f"commgraph {name} prints a table and has no --format"
        assert tuple(given.choices) == FORMATS and given.dest == "output", name
        assert given.help == f"{FORMAT_HELP} (default text)" and parser.get_default("output") == "text", name
        alias = option(parser, "--json")
        assert alias.dest == "output" and alias.const == "json", name


def _checkpoint(directory: Path) -> None:
    """A sage model for cora, saved as ``train --checkpoint-dir`` saves it."""
    import torch

    from commgraph.graph import load_graph
    from commgraph.nn import GNN
    from commgraph.train import checkpoint

    torch.manual_seed(0)
    cora = load_graph("cora")
    model = GNN("sage", cora.features.shape[1], 16, 7)
    identity = {"graph": cora.checksum(), "workers": 1, "model": "sage", "layers": 2, "hidden": 16, "heads": 4}
    state = {"epoch": 1, "model": model.state_dict(), "identity": identity, "widths": {"in": model.in_dim, "out": 7}}
    checkpoint.save(directory, state)


def argv_of(name: str, tmp: Path, cora_set) -> list[str]:
    """A run of command ``name`` (its words) that prints its report, on small inputs."""
    dag, run = tmp / "dag.json", tmp / "run.jsonl"
    script = tmp / "script.py"
    return {
        "graph info": ["cora"],
        "graph datasets list": [],
        "partition make": ["cora", "--parts", "2", "--method", "chunk", "--out", str(tmp / "set")],
        "partition info": [str(cora_set.path)],
        "topo list": [],
        "topo show": ["--topology", "dgx1-v100"],
        "plan allgather": [str(cora_set.path), "--topology", "dgx1-v100", "--feature-dim", "4"],
        "plan allreduce": ["--topology", "p3.8xlarge", "--bytes", "1M"],
        "plan broadcast": ["--topology", "p3.8xlarge", "--root", "gpu0"],
        "sim dag": [str(dag), "--topology", "dgx1-v100"],
        "sim llm": "--model gpt3-13b --tp 4 --pp 2 --microbatches 2 --topology hgx-h100 --scheduler fair".split(),
        "sim multipath simulate": [
            *("--topology", "dgx1-v100", "--workload", "poisson:load=0.5,size=1M,types=cpu0:gpu0,n=20"),
            *("--selector", "direct"),
        ],
        "sim multipath paths": ["--topology", "dgx1-v100", "--src", "cpu0", "--dst", "gpu3"],
        "sim multipath h2d": ["--topology", "dgx1-v100", "--bytes", "1M"],
        "train": [str(cora_set.path), "--dry-run", "--topology", "localhost-cpu:2"],
        "predict": ["cora", "--checkpoint-dir", str(tmp / "ck")],
        "analyze": ["cora", "--algo", "bfs", "--source", "0"],
        "run": ["--workers", "2", "--device", "cpu", "--dry-run", str(script), str(cora_set.path)],
        "plot": [str(run)],
    }[name]


@pytest.mark.slow
def test_every_command_s_json_parses(cora_set, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    (tmp_path / "dag.json").write_text(
        json.dumps({"tasks": [{"id": "x", "type": "transfer", "src": "gpu0", "dst": "gpu4", "bytes": 1e9}]})
    )
    (tmp_path / "run.jsonl").write_text(json.dumps({"epoch": 1, "loss": 1.0, "epoch_seconds": 0.5}) + "\n")
    (tmp_path / "script.py").write_text("pass\n")
    _checkpoint(tmp_path / "ck")
    printed = {}
    for name in set(COMMANDS) - set(NO_TABLE):
        code = main([*name.split(), "--format", "json", *argv_of(name, tmp_path, cora_set)])
        out = capsys.readouterr().out
        assert code == 0, name
        printed[name] = [json.loads(line) for line in out.splitlines()]
    assert len(printed["graph datasets list"]) > 1  # JSON Lines, a dataset a line
    assert all(len(lines) == 1 for name, lines in printed.items() if name != "graph datasets list")


ESTIMATE = {
    "worker_peak_bytes": 180_000_000,
    "machine_peak_bytes": 810_000_000,
    "machine_workers": 2,
    "machine": {"launcher": 300_000_000, "runtime": 150_000_000},
    "worker": {"runtime": 150_000_000, "features": 30_000_000},
    "step_time": {
        "step_seconds": 0.004,
        "epoch_seconds": 0.04,
        "steps_per_epoch": 10,
        "compute_seconds": 0.003,
        "sampling_seconds": 0.0,
        "feature_fetch_seconds": 0.0,
        "halo_exchange_seconds": 0.001,
        "allreduce_seconds": 0.0,
        "defaults": ["compute"],
    },
}


def test_a_dry_run_s_estimates_are_tables_with_scaled_units():
    from commgraph.render import render
    from commgraph.render.runs import estimate_report

    lines = render(estimate_report(ESTIMATE)).splitlines()
    assert lines[0] == "memory estimate: 810 MB per machine (2 workers of 180 MB each)"
    assert lines[1].split() == ["part", "once", "per", "machine", "each", "worker"]
    assert lines[3].split() == ["runtime", "150", "MB", "150", "MB"]
    assert lines[4].split() == ["features", "-", "30.0", "MB"]
    assert "step time estimate: 4.00 ms a step, 40.0 ms an epoch (10 steps)" in lines
    assert next(line for line in lines if line.startswith("compute")).split() == ["compute", "3.00", "ms", "75.0%"]
    assert lines[-1].startswith("defaults, not measured here: compute")
    rows = list(csv.DictReader(io.StringIO(render(estimate_report(ESTIMATE), "csv").split("\n\n")[0])))
    assert rows[0] == {"part": "launcher", "once per machine (B)": "300000000", "each worker (B)": ""}


def test_graph_info_and_the_dataset_list_in_md_and_csv(capsys):
    assert main(["graph", "info", "cora", "--format", "md"]) == 0
    md = capsys.readouterr().out.splitlines()
    assert md[:3] == ["| figure | value |", "| :--- | :--- |", "| graph | cora |"] and "| nodes | 2,708 |" in md
    assert main(["graph", "datasets", "list", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) > 1 and list(rows[0])[:3] == ["name", "size", "nodes"]
    assert all(row["nodes"].isdigit() for row in rows)  # raw counts, no thousands separators
