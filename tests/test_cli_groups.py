"""The command line in groups: every group's ``--help`` lists what is below it, and every old spelling
runs as the new one does (same stdout; a note on stderr), hidden from the top-level command list."""

import argparse
import json

import pytest

from commgraph.cli.main import ALIASES, build_parser, main, new_spelling

# figures that are wall-clock measurements, not results: they differ between any two runs
WALL_CLOCK = {"seconds", "stage1_seconds", "stage2_seconds", "decide_us"}


def children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def groups(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    below = children(parser)
    if below:
        yield path, parser, below
    for name, child in below.items():
        yield from groups(child, (*path, name))


@pytest.mark.multiproc
def test_the_top_level_lists_the_groups_and_no_old_spelling():
    top = children(build_parser())
    assert list(top) == ["graph", "partition", "topo", "plan", "sim", "train", "predict", "analyze", "run", "plot"]
    old_names = {old[0] for old in ALIASES} | {"partition-info"}
    assert not old_names & set(top) - {"plan", "partition"}


def test_the_tree_is_the_issue_s():
    tree = {" ".join(path): sorted(below) for path, _, below in groups(build_parser())}
    assert tree["graph"] == ["convert", "datasets", "info"]
    assert tree["partition"] == ["info", "make"]
    assert tree["sim"] == ["dag", "llm", "multipath"]
    assert tree["sim multipath"] == ["h2d", "paths", "simulate"]
    assert tree["plan"] == ["allgather", "allreduce", "broadcast"]


def test_every_group_s_help_lists_its_children(capsys):
    found = list(groups(build_parser()))
    assert len(found) >= 8  # commgraph, graph, graph datasets, partition, topo, plan, sim, sim multipath
    for path, parser, below in found:
        with pytest.raises(SystemExit) as done:
            main([*path, "--help"])
        text = capsys.readouterr().out
        assert done.value.code == 0 and text == parser.format_help()
        listed = [line.split()[0] for line in text.splitlines() if line.startswith("    ") and line.split()]
        assert set(below) <= set(listed), (path, set(below) - set(listed))
        for name in below:  # each child is listed with a line of help
            assert any(
                action.dest == name and action.help for action in parser._subparsers._group_actions[0]._choices_actions
            ), (path, name)


def test_the_top_level_help_marks_the_old_spellings_as_aliases(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for old, new in (
        ("info", "graph info"),
        ("partition-info", "partition info"),
        ("simulate", "sim dag"),
        ("llm simulate", "sim llm"),
        ("multipath simulate", "sim multipath simulate"),
        ("paths", "sim multipath paths"),
        ("plan h2d", "sim multipath h2d"),
        ("partition GRAPH", "partition make GRAPH"),
    ):
        assert f"{old} = {new}" in text


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["info", "cora"], ["graph", "info", "cora"]),
        (["--debug", "datasets", "list"], ["--debug", "graph", "datasets", "list"]),
        (["partition", "cora", "--parts", "2"], ["partition", "make", "cora", "--parts", "2"]),
        (["partition", "--parts", "2", "cora"], ["partition", "make", "--parts", "2", "cora"]),
        (["llm", "simulate", "--model", "x"], ["sim", "llm", "--model", "x"]),
        (["plan", "h2d", "--gpus", "0"], ["sim", "multipath", "h2d", "--gpus", "0"]),
        (["multipath", "simulate"], ["sim", "multipath", "simulate"]),
    ],
)
def test_old_spellings_are_rewritten(capsys, argv, expected):
    assert new_spelling(argv) == expected
    out, err = capsys.readouterr()
    assert out == "" and "is an alias of" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["partition", "make", "cora"],
        ["partition", "info", "d"],
        ["partition", "--help"],
        ["partition"],
        ["plan", "allgather", "d"],
        ["graph", "info", "cora"],
        ["sim", "llm"],
        ["train", "cora"],
    ],
)
def test_new_spellings_are_left_alone(capsys, argv):
    assert new_spelling(argv) == argv
    assert capsys.readouterr() == ("", "")


def scrubbed(text: str):
    """Each stdout line as JSON without its wall-clock figures, or as text."""

    def clean(value):
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if k not in WALL_CLOCK}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    rows = []
    for line in text.splitlines():
        try:
            rows.append(clean(json.loads(line)))
        except json.JSONDecodeError:
            rows.append(line)
    return rows


def same_output(capsys, old: list[str], new: list[str]) -> None:
    assert main(new) == 0
    new_out, new_err = capsys.readouterr()
    assert "alias" not in new_err
    assert main(old) == 0
    old_out, old_err = capsys.readouterr()
    assert "is an alias of" in old_err
    assert old_out or "wrote" in old_err  # a result, or a file written
    assert scrubbed(old_out) == scrubbed(new_out)
    assert [line for line in old_err.splitlines() if line.startswith("wrote ")] == [
        line for line in new_err.splitlines() if line.startswith("wrote ")
    ]


def test_each_old_spelling_gives_the_new_spelling_s_output(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    parts, npz = str(tmp_path / "parts"), str(tmp_path / "cora.npz")
    dag = tmp_path / "dag.json"
    dag.write_text(json.dumps({"tasks": [{"id": "x", "type": "transfer", "src": "gpu0", "dst": "gpu4", "bytes": 1e9}]}))
    llm = [
        "--model",
        "gpt3-13b",
        "--tp",
        "4",
        "--pp",
        "2",
        "--microbatches",
        "2",
        "--topology",
        "hgx-h100",
        "--scheduler",
        "fair,hermod",
        "--json",
    ]
    multipath = [
        "--topology",
        "dgx1-v100",
        "--workload",
        "poisson:load=0.5,size=1M,types=cpu0:gpu0,n=20",
        "--selector",
        "direct,toll",
        "--json",
    ]
    cases = [
        (["info", "cora", "--json"], ["graph", "info", "cora", "--json"]),
        (["convert", "cora", "--out", npz, "--force"], ["graph", "convert", "cora", "--out", npz, "--force"]),
        (["datasets", "list", "--json"], ["graph", "datasets", "list", "--json"]),
        (
            ["partition", "cora", "--parts", "2", "--method", "chunk", "--out", parts, "--force", "--json"],
            ["partition", "make", "cora", "--parts", "2", "--method", "chunk", "--out", parts, "--force", "--json"],
        ),
        (["partition-info", parts, "--json"], ["partition", "info", parts, "--json"]),
        (
            ["simulate", str(dag), "--topology", "dgx1-v100", "--json"],
            ["sim", "dag", str(dag), "--topology", "dgx1-v100", "--json"],
        ),
        (["llm", "simulate", *llm], ["sim", "llm", *llm]),
        (["multipath", "simulate", *multipath], ["sim", "multipath", "simulate", *multipath]),
        (
            ["paths", "--topology", "dgx1-v100", "--src", "cpu0", "--dst", "gpu3", "--json"],
            ["sim", "multipath", "paths", "--topology", "dgx1-v100", "--src", "cpu0", "--dst", "gpu3", "--json"],
        ),
        (
            ["plan", "h2d", "--topology", "dgx1-v100", "--gpus", "0,3", "--json"],
            ["sim", "multipath", "h2d", "--topology", "dgx1-v100", "--gpus", "0,3", "--json"],
        ),
    ]
    spelled = {tuple(old[:2]) if (old[0], old[1]) in ALIASES else (old[0],) for old, _ in cases}
    assert spelled >= set(ALIASES) - {("llm",), ("multipath",)}  # every alias that runs something is tried
    for old, new in cases:
        same_output(capsys, old, new)


def test_an_old_spelling_s_errors_are_the_new_one_s(capsys):
    assert main(["llm", "simulate", "--model", "gpt3-13b", "--topology", "hgx-h100", "--scheduler", "nope"]) == 2
    old_err = capsys.readouterr().err
    assert main(["sim", "llm", "--model", "gpt3-13b", "--topology", "hgx-h100", "--scheduler", "nope"]) == 2
    new_err = capsys.readouterr().err
    assert old_err.splitlines()[1:] == new_err.splitlines() and "unknown scheduler" in new_err


@pytest.mark.multiproc
def test_a_command_loads_only_its_own_modules():
    import subprocess
    import sys

    code = (
        "import sys; from commgraph.cli.main import main; main(['topo', 'list']); "
        "print(sorted(m for m in sys.modules if m.startswith('commgraph.cli.') or m == 'torch_geometric'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    loaded = done.stdout.splitlines()[-1]
    assert done.returncode == 0 and "commgraph.cli.topo" in loaded
    assert "commgraph.cli.train" not in loaded and "'torch_geometric'" not in loaded


def test_the_top_level_list_is_the_same_whatever_is_loaded():
    # a top-level Command's help in main.TREE must be the one its module's register gives
    assert build_parser(load=set()).format_help() == build_parser().format_help(), "update main.TREE's help"


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_the_parser_and_a_dry_run_import_no_torch(tmp_path):
    import os
    import subprocess
    import sys

    code = (
        "import sys; from commgraph.cli.main import build_parser, main; build_parser(); "
        "parsed = 'torch' in sys.modules; "
        "code = main(['train', 'cora', '--workers', '2', '--dry-run', '--json', '--partition-dir', "
        f"{str(tmp_path / 'p')!r}]); "
        "print(code, parsed, 'torch' in sys.modules, 'torch_geometric' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "COMMGRAPH_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[-1] == "0 False False False", done.stdout + done.stderr
    assert json.loads(lines[0])["machine_peak_bytes"] > 0
