"""One vocabulary over the whole command tree: every rule is checked on every command of every
group, with no exception listed. A hidden option (help suppressed) is only ever an old spelling of
a visible one (same destination)."""

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from commgraph.atomic import FORCE_HELP
from commgraph.cli.args import byte_count, byte_counts
from commgraph.cli.main import build_parser, main
from commgraph.units import size as whole_bytes

OUTPUTS = re.compile(r"^(out|png|trace|tensorboard|checkpoint_dir|.*_out)$")
RATE = re.compile(r"gbps|gbit|speed|bandwidth", re.I)
BYTES = re.compile(r"^(bytes|sizes|.*_bytes)$")


def subparsers(parser: argparse.ArgumentParser) -> list[argparse._SubParsersAction]:
    return [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]


def tree(parser=None, path=()):
    """(path, parser) for the top level, every group and every command."""
    parser = parser or build_parser()
    yield path, parser
    for action in subparsers(parser):
        for name, child in action.choices.items():
            yield from tree(child, (*path, name))


TREE = list(tree())
COMMANDS = [(path, parser) for path, parser in TREE if not subparsers(parser)]


def arguments(parser, hidden: bool = False) -> list[argparse.Action]:
    """The parser's options and positionals (not --help, --version or a group's subcommands)."""
    return [
        a
        for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction))
        and (a.help == argparse.SUPPRESS) == hidden
    ]


def shown_help(parser, action) -> str:
    """The help text of ``action`` as ``--help`` prints it (defaults appended), on one line."""
    formatter = parser._get_formatter()
    return " ".join(formatter._expand_help(action).split()) if action.help else ""


def everywhere():
    for path, parser in TREE:
        for action in arguments(parser):
            yield " ".join(("commgraph", *path)), parser, action


def name(action) -> str:
    return action.option_strings[0] if action.option_strings else action.metavar or action.dest


def test_the_tree_is_walked_whole():
    assert len(COMMANDS) == 24 and ("sim", "multipath", "paths") in dict(COMMANDS)
    assert sum(1 for _ in everywhere()) > 200


def test_hidden_options_are_only_old_spellings():
    for path, parser in TREE:
        visible = {a.dest for a in arguments(parser)}
        for action in arguments(parser, hidden=True):
            assert action.option_strings and action.dest in visible, (path, action.option_strings)


def test_every_option_and_positional_has_help():
    missing = [f"{prog} {name(action)}" for prog, _, action in everywhere() if not (action.help or "").strip()]
    assert not missing, missing


def test_every_default_is_shown_exactly_once():
    checked = 0
    for prog, parser, action in everywhere():
        text = shown_help(parser, action)
        if action.default is None or action.default is False or action.default == argparse.SUPPRESS:  # "(default: how)"
            assert "(default " not in text, f"{prog} {name(action)} says a default it does not have: {text}"
            continue
        assert f"(default {action.default})" in text, (
            f"{prog} {name(action)}: default {action.default!r} not in {text!r}"
        )
        assert text.count("(default") == 1, f"{prog} {name(action)} states its default twice: {text}"
        checked += 1
    assert checked > 60


def test_the_topology_is_an_option_everywhere():
    found = 0
    for prog, _, action in everywhere():
        mentions = "topology" in action.dest or "TOPOLOGY" in (action.metavar or "")
        if not mentions:
            continue
        assert action.option_strings == ["--topology"], f"{prog}: {name(action)} must be --topology"
        assert action.metavar == "TOPOLOGY" and "commgraph topo list" in action.help, prog
        found += 1
    assert found >= 12


def test_every_image_is_png():
    images = 0
    for prog, _, action in everywhere():
        text = f"{action.metavar} {action.help}".lower()
        if re.search(r"\bpng\b|\.png|\bdraw\b|chart|picture|heat map|cdf", text) and action.option_strings:
            assert action.option_strings == ["--png"] and action.metavar == "FILE.png", (prog, action.option_strings)
            images += 1
    assert images >= 9


def test_every_byte_count_parses_through_one_parser():
    counts = 0
    for prog, _, action in everywhere():
        if BYTES.match(action.dest) or (action.metavar or "").startswith("SIZE"):
            assert action.type in (byte_count, byte_counts, whole_bytes), f"{prog} {name(action)}"  # all parse_bytes
            assert "K/M/G" in action.help, f"{prog} {name(action)}: say the suffixes"
            counts += 1
    assert counts >= 5


@pytest.mark.parametrize(
    "text, value", [("1G", 2**30), ("512M", 512 * 2**20), ("1e9", 1e9), ("64k", 65536), ("4096", 4096)]
)
def test_sizes_mean_the_same_everywhere(text, value):
    assert byte_count(text) == value and byte_counts(f"{text},{text}") == (value, value)


@pytest.mark.parametrize("text", ["lots", "0", "-1G", "inf", "nan", "1T"])
def test_a_bad_size_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="bad size"):
        byte_count(text)


def test_rates_state_their_unit():
    rates = 0
    for prog, _, action in everywhere():
        label = f"{action.dest} {action.metavar or ''}"
        if not RATE.search(label):
            continue
        text = action.help
        if re.search(r"gbit", label, re.I):
            assert "Gbit/s" in text and "GB/s" not in text, (prog, name(action))
        else:
            assert "GB/s" in text and "Gbit/s" not in text, (prog, name(action))
        rates += 1
    assert rates >= 12


def test_every_command_that_writes_a_file_has_force():
    writers = 0
    for path, parser in COMMANDS:
        outputs = [a for a in arguments(parser) if OUTPUTS.match(a.dest)]
        if not outputs:
            continue
        force = [a for a in arguments(parser) if a.option_strings == ["--force"]]
        assert force and force[0].help == FORCE_HELP, (path, [name(a) for a in outputs])
        writers += 1
    assert writers >= 14


def test_groups_name_their_commands_one_way():
    for path, parser in TREE:
        for action in subparsers(parser):
            assert action.metavar == "COMMAND", path


def test_every_command_and_group_has_a_description():
    for path, parser in TREE[1:]:
        assert (parser.description or "").strip(), path


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=" ".join)
def test_a_wrong_option_names_the_command_it_was_given_to(path, capsys):
    with pytest.raises(SystemExit) as stopped:
        main([*path, "--no-such-option"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1
    assert f"(see commgraph {' '.join(path)} --help)" in err, err


@pytest.mark.parametrize(
    "command, rest",
    [
        ("topo show", ["--topology", "dgx1-v100"]),
        ("sim multipath paths", ["--topology", "dgx1-v100", "--src", "cpu0", "--dst", "gpu3"]),
        ("plan allreduce", ["--topology", "dgx1-v100", "--planner", "ring"]),
    ],
)
def test_an_unknown_option_after_valid_ones_names_the_command(command, rest, capsys):
    with pytest.raises(SystemExit):
        main([*command.split(), *rest, "--bogus"])
    assert (
        capsys.readouterr().err
        == f"commgraph: error: unrecognized arguments: --bogus (see commgraph {command} --help)\n"
    )


# -- what the commands print and write ------------------------------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures"
WRITERS = {
    "topo detect": ["topo", "detect", "--from-file", str(FIXTURES / "nvidia-smi-topo-dgx1.txt"), "--out", "{p}.yaml"],
    "topo show": ["topo", "show", "--topology", "dgx1-v100", "--json", "--png", "{p}.png"],
    "plan allreduce": [
        "plan",
        "allreduce",
        "--topology",
        "p3.8xlarge",
        "--planner",
        "ring",
        "--json",
        "--out",
        "{p}.json",
    ],
    "plan broadcast": ["plan", "broadcast", "--topology", "p3.8xlarge", "--root", "gpu0", "--out", "{p}.json"],
    "graph convert": ["graph", "convert", "sbm:nodes=60,classes=2,features=4,seed=0", "--out", "{p}.npz"],
    "sim dag": ["sim", "dag", "{dag}", "--topology", "dgx1-v100", "--json", "--png", "{p}.png"],
    "analyze": ["analyze", "cora", "--algo", "bfs", "--source", "0", "--json", "--out", "{p}.npy"],
    "plot": ["plot", "{run}", "--png", "{p}.png"],
}


@pytest.mark.parametrize("command", WRITERS)
def test_every_writer_refuses_to_overwrite_without_force_and_says_wrote(command, tmp_path, capsys):
    dag, run = tmp_path / "dag.json", tmp_path / "run.jsonl"
    dag.write_text(json.dumps({"tasks": [{"id": "x", "type": "transfer", "src": "gpu0", "dst": "gpu4", "bytes": 1e9}]}))
    run.write_text(json.dumps({"epoch": 1, "loss": 1.0, "train_acc": 0.5, "val_acc": 0.5, "test_acc": 0.5}) + "\n")
    argv = [word.format(p=tmp_path / "result", dag=dag, run=run) for word in WRITERS[command]]
    path = next(word for word in argv if word.startswith(str(tmp_path / "result")))
    assert main(argv) == 0
    out, err = capsys.readouterr()
    said = [line for line in err.splitlines() if "wrote" in line]
    assert len(said) == 1 and re.fullmatch(rf"wrote {re.escape(path)}( \(.+\))?", said[0]), err
    if "--json" in argv:
        json.loads(out)  # stdout is the result alone
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert (
        out == ""
        and err == f"commgraph: error: {argv[argv.index(path) - 1]} {path} already exists; pass --force to replace it\n"
    )
    assert main([*argv, "--force"]) == 0
    assert f"wrote {path}" in capsys.readouterr().err


def test_partition_make_writes_by_the_same_rule(tmp_path, capsys):
    argv = [
        "partition",
        "make",
        "sbm:nodes=60,classes=2,features=4,seed=0",
        "--parts",
        "2",
        "--out",
        str(tmp_path / "p2"),
        "--png",
        str(tmp_path / "p2.png"),
    ]
    assert main(argv) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "wrote" in line]
    assert said == [f"wrote {tmp_path / 'p2'} (2 parts)", f"wrote {tmp_path / 'p2.png'}"]
    assert main(argv) == 2 and "already exists; pass --force" in capsys.readouterr().err
    assert main([*argv, "--force"]) == 0
    assert main([*argv[:-2], "--plot", str(tmp_path / "old.png"), "--force"]) == 0  # the old spelling, hidden
    assert (tmp_path / "old.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_train_puts_the_result_on_stdout_and_no_frames_anywhere(tmp_path):
    argv = [
        sys.executable,
        "-m",
        "commgraph",
        "train",
        "cora",
        "--epochs",
        "2",
        "--hidden",
        "4",
        "--device",
        "cpu",
        "--partition-dir",
        str(tmp_path / "parts"),
        "--metrics-out",
        str(tmp_path / "m.jsonl"),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with open(tmp_path / "out.txt", "w") as out:  # stdout redirected to a file, stderr a pipe: no terminal
        done = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr
    result = (tmp_path / "out.txt").read_text()
    assert result.startswith("done: 2 epochs, loss ") and result.count("\n") == 1  # the result alone
    assert re.search(r"^epoch +1  loss", done.stderr, re.M) and re.search(r"^epoch +2  loss", done.stderr, re.M)
    assert "\r" not in done.stderr and "training:" not in done.stderr  # no bar frames when not on a terminal
    assert done.stderr.splitlines()[-1] == f"wrote {tmp_path / 'm.jsonl'}"


# -- the defects a new user hit -------------------------------------------------------------------------


def test_topo_show_counts_servers_not_the_network(capsys):
    assert main(["topo", "show", "--topology", "2xhgx-h100-ib", "--speeds", "ib=12.5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2xhgx-h100-ib: 2 host(s), 16 gpu")
    speeds = "nv1 20.6, pcie 48 GB/s (hgx-h100's preset); qpi 9.56 GB/s (DGCL's defaults); ib 12.5 GB/s (overridden)"
    assert f"\nspeeds: {speeds}\n" in out
    assert main(["topo", "show", "--topology", "dgx1-v100"]) == 0
    assert capsys.readouterr().out.startswith("dgx1-v100: 1 host(s), 8 gpu")


def test_topo_list_json_is_what_the_table_lists(capsys):
    assert main(["topo", "list"]) == 0
    header, *names = capsys.readouterr().out.split()
    assert header == "preset"
    assert main(["topo", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"presets": names} and "dgx1-v100" in names


def test_the_planning_page_names_the_command_that_lists_presets(capsys):
    text = (Path(__file__).parents[1] / "docs" / "planning.md").read_text()
    claim = re.search(r"`commgraph ([a-z -]+?)( --json)?` lists them", text)
    assert claim, "docs/planning.md no longer says which command lists the presets"
    assert main(claim.group(1).split()) == 0
    assert "dgx-a100" in capsys.readouterr().out.split()


def test_partition_make_notes_only_what_there_is_and_info_does_not_seem_to_rerun(tmp_path, capsys):
    assert main(["partition", "make", "cora", "--parts", "2", "--method", "chunk", "--out", str(tmp_path / "c")]) == 0
    out, err = capsys.readouterr()
    assert "note: 78 connected components" in err and "isolated" not in err
    assert out.splitlines()[0].startswith("cora: chunk into 2 parts in ")
    assert main(["partition", "info", str(tmp_path / "c")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert re.fullmatch(
        rf"{re.escape(str(tmp_path / 'c'))}: cora in 2 parts by chunk \(seed 0; partitioning took "
        r"\d+\.\d\d s\); checksums verified",
        first,
    ), first


@pytest.mark.parametrize("group, command", [("graph", "info"), ("graph", "convert"), ("graph", "datasets")])
def test_graph_commands_describe_themselves_in_today_s_spelling(group, command, capsys):
    with pytest.raises(SystemExit):
        main([group, command, "--help"])
    text = capsys.readouterr().out
    assert f"commgraph {group} {command} " in text and f"commgraph {command} " not in text


def test_text_and_json_spell_the_same_words(capsys, tmp_path):
    argv = ["plan", "allreduce", "--topology", "p3.8xlarge", "--planner", "ring", "--bytes", "1G"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "modeled " in text and "normalized time" in text and "modelled" not in text and "normalised" not in text
    assert main([*argv, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["planners"]["ring"]
    assert {"modeled_seconds", "normalized_time"} <= set(row)
    dag = tmp_path / "dag.json"
    dag.write_text(json.dumps({"tasks": [{"id": "x", "type": "transfer", "src": "gpu0", "dst": "gpu4", "bytes": 1e9}]}))
    assert main(["sim", "dag", str(dag), "--topology", "dgx1-v100", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["makespan_seconds"] > 0


def test_plan_sizes_read_like_every_other_size(capsys):
    seconds = set()
    for size in ("1G", "1073741824", "1024M"):
        assert (
            main(["plan", "allreduce", "--topology", "p3.8xlarge", "--planner", "ring", "--bytes", size, "--json"]) == 0
        )
        seconds.add(json.loads(capsys.readouterr().out)["planners"]["ring"]["modeled_seconds"])
    assert len(seconds) == 1 and seconds.pop() > 0


REPORTS = [
    ("plan", "allgather"),
    ("plan", "allreduce"),
    ("plan", "broadcast"),
    ("sim", "dag"),
    ("sim", "llm"),
    ("sim", "multipath", "simulate"),
    ("sim", "multipath", "paths"),
    ("sim", "multipath", "h2d"),
    ("partition", "info"),
    ("partition", "make"),
    ("topo", "list"),
    ("topo", "show"),
]


@pytest.mark.parametrize("path", REPORTS, ids=" ".join)
def test_every_report_takes_format_and_json_as_its_alias(path):
    """A command that prints a report takes ``--format text|json|csv|md`` and ``--json``, the same
    as ``--format json``: one option definition (``cli.args.add_format``), one destination."""
    parser = dict(COMMANDS)[path]
    options = {o: a for a in arguments(parser) for o in a.option_strings}
    assert tuple(options["--format"].choices) == ("text", "json", "csv", "md")
    assert options["--format"].dest == options["--json"].dest == "output" and options["--json"].const == "json"
    assert parser.get_default("output") == "text"


def test_graph_file_format_is_graph_format():
    """A command that reads a GRAPH names the file's format ``--graph-format``; ``--format`` is the report's."""
    for path in [("analyze",), ("train",), ("predict",), ("graph", "info"), ("partition", "make")]:
        options = {o: a for a in arguments(dict(COMMANDS)[path]) for o in a.option_strings}
        assert options["--graph-format"].choices == ("snap", "ogb", "planetoid", "npz")
        assert options["--graph-format"].dest == "graph_format"
