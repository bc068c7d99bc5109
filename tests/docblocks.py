"""The runnable blocks of a docs page's section, for the tests that run a page's code as written."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).parents[1] / "docs"


def python_block(page: str, heading: str) -> str:
    """The one ``python runnable`` block of ``docs/<page>`` under ``heading`` (a whole heading
    line, ``### ...``), before the next heading."""
    section = (DOCS / page).read_text().split(heading + "\n", 1)[1].split("\n#", 1)[0]
    (block,) = re.findall(r"^```python runnable\n(.*?)^```$", section, re.S | re.M)
    return block
