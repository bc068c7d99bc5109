"""docs/pyg.md's scripts: each diff the page shows is the diff between a one-process PyG script in
``examples/pyg`` and its distributed twin (at most six changed lines), and the twin, run with
``commgraph run`` and with ``torchrun``, prints what the one-process script prints."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
EXAMPLES = ROOT / "examples" / "pyg"
PAGE = ROOT / "docs" / "pyg.md"
DIFF = re.compile(r"^```diff\n(.*?)^```$", re.S | re.M)
PAIRS = [("gcn.py", "gcn_distributed.py")]


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
    for block, (plain, distributed) in zip(shown, PAIRS):
        lines = changes(EXAMPLES / plain, EXAMPLES / distributed)
        assert block.splitlines() == lines, distributed
        assert sum(line.startswith("+") for line in lines) <= 6, distributed
