"""docs/heterogeneous.md's distributed ``to_hetero`` script: run with ``commgraph run --workers 2``
it prints what it prints alone."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from forked import run_commgraph

PAGE = Path(__file__).parents[1] / "docs" / "heterogeneous.md"
SECTION = "## A PyG `to_hetero` script, distributed"
EPOCH = re.compile(r"Epoch: \d+, Loss: \d+\.\d{4}")


def script() -> str:
    """The section's Python block."""
    section = PAGE.read_text().split(SECTION, 1)[1]
    return re.search(r"^```python\n(.*?)^```$", section, re.S | re.M).group(1)


@pytest.mark.multiproc
@pytest.mark.slow
def test_the_to_hetero_script_prints_what_it_prints_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    path = tmp_path / "hetero.py"
    path.write_text(script())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # this checkout's commgraph, as the run's ranks
    alone = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env)
    assert alone.returncode == 0, alone.stderr[-2000:]
    run = run_commgraph(["run", "--workers", "2", str(path)])
    assert run.returncode == 0, run.stderr[-2000:]
    lines = sorted(set(EPOCH.findall(alone.stdout)))
    assert sorted(set(EPOCH.findall(run.stdout))) == lines and len(lines) == 3


@pytest.mark.multiproc
@pytest.mark.slow
def test_the_mag_example_trains_across_ranks_as_alone(tmp_path, monkeypatch):
    """examples/pyg/mag_distributed.py (to_hetero GraphSAGE on mag-shaped, featureless types
    embedded), dropout 0: 2 ranks print the losses one process prints."""
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    script = Path(__file__).parents[1] / "examples" / "pyg" / "mag_distributed.py"
    argv = [str(script), "--graph", "mag-shaped:scale=0.001,seed=0", "--epochs", "3", "--dropout", "0"]
    argv += ["--hidden", "16"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    alone = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env)
    assert alone.returncode == 0, alone.stderr[-2000:]
    run = run_commgraph(["run", "--workers", "2", *argv])
    assert run.returncode == 0, run.stderr[-2000:]
    losses = sorted(set(EPOCH.findall(alone.stdout)))
    assert sorted(set(EPOCH.findall(run.stdout))) == losses and len(losses) == 3
