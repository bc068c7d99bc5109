"""docs/pyg.md's scripts: each diff the page shows is the diff between a one-process PyG script in
``examples/pyg`` and its distributed twin (at most six changed lines), and the twin, run with
``commgraph run`` and with ``torchrun``, prints what the one-process script prints."""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from commgraph.lifetime import kill_group
from forked import run_commgraph

ROOT = Path(__file__).parents[1]
EXAMPLES = ROOT / "examples" / "pyg"
PAGE = ROOT / "docs" / "pyg.md"
DIFF = re.compile(r"^```diff\n(.*?)^```$", re.S | re.M)
# each pair and the changed lines it may have (docs/pyg.md)
PAIRS = [
    ("gcn.py", "gcn_distributed.py", 6),
    ("sage_sampled.py", "sage_sampled_distributed.py", 6),
    ("link.py", "link_distributed.py", 4),
]


def code(path: Path) -> list[str]:
    """A script's lines after its module docstring."""
    lines = path.read_text().splitlines()
    end = next(i for i, line in enumerate(lines[1:], 1) if line.rstrip().endswith('"""'))
    return lines[end + 1 :]


def changes(plain: Path, distributed: Path) -> list[str]:
    """The changed lines (``-`` and ``+``, blank ones left out) from ``plain`` to ``distributed``."""
    diff = difflib.unified_diff(code(plain), code(distributed), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---") and line[1:].strip()]


def test_each_diff_on_the_page_is_its_examples_diff():
    shown = DIFF.findall(PAGE.read_text())
    assert len(shown) == len(PAIRS)
    for block, (plain, distributed, most) in zip(shown, PAIRS):
        lines = changes(EXAMPLES / plain, EXAMPLES / distributed)
        assert block.splitlines() == lines, distributed
        assert sum(line.startswith("+") for line in lines) <= most, distributed


@pytest.fixture
def planetoid_root(tmp_path: Path, planetoid_dir: Path) -> Path:
    """A folder where PyG's ``Planetoid(root, "Cora")`` finds Cora processed from the raw files (and
    downloads nothing): processed here once, as a user loads a dataset before starting ranks that
    would otherwise all write its processed files at once."""
    from torch_geometric.datasets import Planetoid

    raw = tmp_path / "Planetoid" / "Cora" / "raw"
    raw.mkdir(parents=True)
    for file in planetoid_dir.glob("ind.cora.*"):
        shutil.copy(file, raw)
    Planetoid(str(tmp_path / "Planetoid"), "Cora")
    return tmp_path / "Planetoid"


EPOCH = re.compile(r"Epoch: \d+, .*?Test: \d\.\d{4}")


def printed(result) -> list[str]:
    """The epoch lines a run printed, each once (every rank prints them, and two ranks' lines may
    meet on one line of the shared output)."""
    return sorted(set(EPOCH.findall(result.stdout)))


@pytest.mark.multiproc
@pytest.mark.slow
def test_the_distributed_classifier_prints_what_one_process_prints(planetoid_root, tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    args = ["--root", str(planetoid_root), "--epochs", "5", "--dropout", "0"]
    alone = subprocess.run([sys.executable, str(EXAMPLES / "gcn.py"), *args], capture_output=True, text=True)
    assert alone.returncode == 0, alone.stderr[-2000:]
    run = run_commgraph(["run", "--workers", "2", str(EXAMPLES / "gcn_distributed.py"), *args])
    assert run.returncode == 0, run.stderr[-2000:]
    assert printed(run) == printed(alone) and len(printed(alone)) == 5


@pytest.mark.multiproc
@pytest.mark.slow
def test_the_distributed_classifier_runs_under_torchrun(planetoid_root, tmp_path):
    env = {**os.environ, "COMMGRAPH_HOME": str(tmp_path / "home"), "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        str(EXAMPLES / "gcn_distributed.py"),
    ]
    process = subprocess.Popen(
        [*argv, "--root", str(planetoid_root), "--epochs", "3", "--dropout", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=240)
    finally:
        kill_group(process.pid)
    assert process.returncode == 0, err[-6000:]
    assert len(set(EPOCH.findall(out))) == 3


@pytest.mark.multiproc
@pytest.mark.slow
def test_the_distributed_link_predictor_prints_what_one_process_prints(planetoid_root, tmp_path, monkeypatch):
    """PyG's own negative_sampling draws the same pairs on every rank (the script seeds random), and
    the decoder scores every pair on every rank: the losses and AUCs are the one-process script's."""
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    args = ["--root", str(planetoid_root), "--epochs", "3"]
    alone = subprocess.run([sys.executable, str(EXAMPLES / "link.py"), *args], capture_output=True, text=True)
    assert alone.returncode == 0, alone.stderr[-2000:]
    run = run_commgraph(["run", "--workers", "2", str(EXAMPLES / "link_distributed.py"), *args])
    assert run.returncode == 0, run.stderr[-2000:]
    assert printed(run) == printed(alone) and len(printed(alone)) == 3


@pytest.mark.multiproc
@pytest.mark.slow
def test_the_sampled_script_trains_one_model_on_every_rank(planetoid_root, tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    argv = [str(EXAMPLES / "sage_sampled_distributed.py"), "--root", str(planetoid_root), "--epochs", "2"]
    run = run_commgraph(["run", "--workers", "2", *argv])
    assert run.returncode == 0, run.stderr[-2000:]
    # each rank's loss is its own batch's; DDP keeps one model, so both ranks evaluate it alike
    tests = {}
    for line in EPOCH.findall(run.stdout):
        tests.setdefault(line.split(",")[0], set()).add(line.split("Test: ")[1])
    assert len(tests) == 2 and all(len(values) == 1 for values in tests.values())
