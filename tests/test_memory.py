"""The worker allocator setting: freed large blocks are reused, not faulted in again."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# allocate, touch and free a 256 MB block again and again; report the page faults of the last rounds
# (glibc may still return the first few to the kernel while it settles its heap)
PROBE = """
import json, resource, sys
import torch
from commgraph.runtime import keep_freed_memory
took = keep_freed_memory() if sys.argv[1] == "keep" else None
def round_():
    block = torch.ones(1 << 26)  # 256 MB, written through (torch's allocator: plain malloc, 4 KB pages)
    del block
for _ in range(6):
    round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(2):
    round_()
print(json.dumps({"took": took, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""
PAGES = (1 << 28) // 4096


def _probe(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")
def test_freed_large_blocks_are_reused_without_page_faults():
    default, kept = _probe("default"), _probe("keep")
    assert default["faults"] > PAGES  # glibc unmaps the block: every page faults in again, every round
    assert kept["took"] is True and kept["faults"] < PAGES // 20
