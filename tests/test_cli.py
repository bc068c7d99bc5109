import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from commgraph import __version__
from commgraph.cli.main import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_info_cora_json(capsys):
    code, out, err = run(capsys, "info", "cora", "--json")
    stats = json.loads(out)
    assert code == 0 and err == ""
    assert (stats["num_nodes"], stats["num_features"], stats["num_classes"]) == (2708, 1433, 7)
    assert stats["num_edges"] == 10556


def test_info_table_and_synthetic_spec(capsys):
    code, out, _ = run(capsys, "info", "sbm:nodes=200,classes=2,features=4,seed=0")
    assert code == 0
    assert "nodes" in out and "200" in out and "train / val / test nodes" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["info", "nope"], "is not a bundled graph"),
        (["info", "rmat:nodes=5"], "missing edges"),
    ],
)
def test_errors_are_one_line_and_nonzero(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_bad_file_error_names_file_and_line(capsys, tmp_path):
    path = tmp_path / "g.txt.gz"
    path.write_bytes(gzip.compress(b"0 1\n1 two\n"))
    code, _, err = run(capsys, "info", str(path))
    assert code == 2 and f"{path}, line 2: expected an integer, found 'two'" in err


def test_debug_shows_traceback(capsys):
    code, _, err = run(capsys, "--debug", "info", "nope")
    assert code == 2 and "Traceback" in err


def test_convert_writes_npz_and_refuses_to_overwrite(capsys, tmp_path):
    out = tmp_path / "c.npz"
    assert run(capsys, "convert", "cora", "--out", str(out))[0] == 0
    code, _, err = run(capsys, "convert", "cora", "--out", str(out))
    assert code == 2 and "pass --force" in err
    code, out_text, _ = run(capsys, "info", str(out), "--json")
    assert json.loads(out_text)["num_nodes"] == 2708


def test_console_script_version_and_help():
    script = Path(sys.executable).parent / "commgraph"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "commgraph"]
    result = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == f"commgraph {__version__}"
    result = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "info" in result.stdout
