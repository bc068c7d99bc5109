"""benchmarks/pss.py's sampler, which benchmarks/memory.py uses: the PSS sum over a process tree, and its cap."""

import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from deadlines import scaled, wait_until  # noqa: E402
from pss import GB, measure  # noqa: E402

pytestmark = pytest.mark.multiproc

MB = 2**20

# A parent that touches 150 MB of private pages, starts a child that touches 80 MB, writes the child's
# pid to argv[1] and waits for it.
TREE = textwrap.dedent("""
    import subprocess, sys, time
    held = bytearray(150 * 2**20)
    for i in range(0, len(held), 4096):
        held[i] = 1
    child = subprocess.Popen([sys.executable, "-c",
        "import time\\nb = bytearray(80 * 2**20)\\nfor i in range(0, len(b), 4096): b[i] = 1\\ntime.sleep({sleep})"])
    open(sys.argv[1], "w").write(str(child.pid))
    child.wait()
""")


def alive(pid: int) -> bool:
    """A process that still runs (a killed child nobody has reaped yet is a zombie: not alive)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_peak_sums_the_tree_and_keeps_each_process_peak(tmp_path):
    run = measure([sys.executable, "-c", TREE.format(sleep=1.0), str(tmp_path / "pid")], every=0.1)
    assert run.status == "ok" and run.returncode == 0
    assert run.root_peak_bytes >= 150 * MB
    assert len(run.other_peak_bytes) == 1 and 80 * MB <= run.other_peak_bytes[0] < 150 * MB
    # both alive at once for 1 s: the sum holds both, and PSS never counts a page twice
    assert 230 * MB <= run.peak_bytes <= run.root_peak_bytes + run.other_peak_bytes[0]


def test_cap_kills_every_process_of_the_tree(tmp_path):
    started = time.perf_counter()
    run = measure([sys.executable, "-c", TREE.format(sleep=60), str(tmp_path / "pid")], every=0.1, cap_bytes=200 * MB)
    assert run.status == "capped" and run.returncode == -9
    assert run.peak_bytes > 200 * MB and time.perf_counter() - started < scaled(10)
    child = int((tmp_path / "pid").read_text())
    assert wait_until(lambda: not alive(child), 2)


def test_exit_2_is_a_refusal_with_its_line():
    run = measure([sys.executable, "-c", "import sys; sys.exit(1)"], every=0.1)
    assert run.status == "failed"
    run = measure(
        [sys.executable, "-c", "import sys; print('estimate 9 GB > 4 GB', file=sys.stderr); sys.exit(2)"], every=0.1
    )
    assert run.status == "refused" and run.stderr_tail == "estimate 9 GB > 4 GB"
    assert run.peak_bytes < 1 * GB


# Holds 30 MB for 0.6 s, writes a line to argv[1] (its first phase is over), then holds 200 MB more for 0.6 s.
PHASES = textwrap.dedent("""
    import sys, time
    first = bytearray(30 * 2**20)
    for i in range(0, len(first), 4096):
        first[i] = 1
    time.sleep(0.6)
    open(sys.argv[1], "w").write("done\\n")
    second = bytearray(200 * 2**20)
    for i in range(0, len(second), 4096):
        second[i] = 1
    time.sleep(0.6)
""")


def test_until_keeps_the_first_phase_peak_apart(tmp_path):
    marker = tmp_path / "marker"
    run = measure([sys.executable, "-c", PHASES, str(marker)], every=0.1, until=lambda: marker.is_file())
    assert run.status == "ok" and run.before_bytes is not None
    assert 30 * MB <= run.before_bytes < 200 * MB  # the interpreter and the first 30 MB, not the second phase
    assert run.peak_bytes >= run.before_bytes + 150 * MB
    assert measure([sys.executable, "-c", "pass"], every=0.1).before_bytes is None  # no phase asked for
