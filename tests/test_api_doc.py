"""docs/api.md's ``python runnable`` blocks, run in order as one script from an empty folder: the
Python API page works as written."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).parents[1] / "docs" / "api.md"
BLOCK = re.compile(r"^```python runnable\n(.*?)^```$", re.S | re.M)


def runnable_blocks(text: str) -> list[str]:
    return BLOCK.findall(text)


def test_the_page_has_runnable_blocks_for_each_step():
    blocks = runnable_blocks(DOC.read_text())
    script = "\n".join(blocks)
    assert len(blocks) >= 4
    for call in (
        "load_graph(",
        "write_partition_set(",
        "plan_allgather(",
        "price(",
        "train_worker(",
        "compare_schedulers(",
    ):
        assert call in script, f"docs/api.md runs no {call}"


@pytest.mark.multiproc
def test_the_api_page_runs_as_written(tmp_path):
    script = tmp_path / "api_doc.py"
    script.write_text("\n\n".join(runnable_blocks(DOC.read_text())))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "COMMGRAPH_HOME": str(tmp_path / "home")}
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "spst: " in done.stdout and "epoch 50: loss" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["cora-1", "cora-8"]


def test_blocks_are_found_only_when_marked_runnable():
    text = "```python runnable\na = 1\n```\n\n```python\nb = 2\n```\n\n```python runnable\nc = 3\n```\n"
    assert runnable_blocks(text) == ["a = 1\n", "c = 3\n"]
