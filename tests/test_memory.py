"""The worker allocator setting: freed large blocks are reused, not faulted in again."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.multiproc

# allocate, touch and free a 256 MB block again and again; report the page faults of each measured
# round. With the setting glibc can still take a few rounds before it reuses the freed block: in 30
# runs of 20 rounds the last one that faulted was the 8th
PROBE = """
import json, resource, sys
import torch
from commgraph.runtime import keep_freed_memory
took = keep_freed_memory() if sys.argv[1] == "keep" else None
warmup, measured = int(sys.argv[2]), int(sys.argv[3])
faults = []
for _ in range(warmup + measured):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = torch.ones(1 << 26)  # 256 MB, written through (torch's allocator: plain malloc, 4 KB pages)
    del block
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"took": took, "faults": faults[warmup:]}))
"""
WARMUP, MEASURED = 12, 4
PAGES = (1 << 28) // 4096


def _probe(mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode, str(WARMUP), str(MEASURED)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")
def test_freed_large_blocks_are_reused_without_page_faults():
    default, kept = _probe("default"), _probe("keep")
    assert all(f > PAGES // 2 for f in default["faults"])  # glibc unmaps the block: every round faults it in
    assert kept["took"] is True
    assert sum(f > PAGES // 20 for f in kept["faults"]) <= 1, kept["faults"]  # settled: the block is reused


# in a process that keeps freed blocks, the same rounds inside freed_blocks_returned (every block
# unmapped when freed: each round faults it in again), then after it (kept again)
RETURNED = """
import json, resource
import torch
from commgraph.runtime import keep_freed_memory
from commgraph.runtime.memory import freed_blocks_returned

def rounds(n):
    faults = []
    for _ in range(n):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        block = torch.ones(1 << 24)  # 64 MB
        del block
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return faults

keep_freed_memory()
with freed_blocks_returned() as took:
    inside = rounds(4)
after = rounds(16)[12:]
print(json.dumps({"took": took, "inside": inside, "after": after}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")
def test_freed_blocks_go_back_to_the_system_inside_freed_blocks_returned_and_are_kept_after_it():
    out = subprocess.run([sys.executable, "-c", RETURNED], capture_output=True, text=True, check=True, timeout=60)
    probe, pages = json.loads(out.stdout), (1 << 26) // 4096
    assert probe["took"] is True
    assert all(f > pages // 2 for f in probe["inside"]), probe  # unmapped when freed, faulted in again
    assert sum(f > pages // 20 for f in probe["after"]) <= 1, probe  # the setting kept afterwards: reused
