"""``--memory-budget``: parsed once, the estimate split into what stays resident and what streams
from disk, a budget below the minimum refused, one above the machine warned about, and the memory
cgroup made (or, where none can be, why said in one line)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from commgraph.errors import JobError, TrainingError
from commgraph.launch import cgroup
from commgraph.launch.launcher import check_budget
from commgraph.plan import memory
from commgraph.plan.memory import JobShape, estimate_memory, reached_nodes
from commgraph.render import render
from commgraph.render.runs import estimate_report
from commgraph.train.config import TrainConfig

SAMPLED = dict(sampler="neighbor", batch_size=64, fanouts=(5, 5))


def _parsed(*argv: str) -> TrainConfig:
    parser = argparse.ArgumentParser()
    TrainConfig.add_arguments(parser)
    return TrainConfig.from_args(parser.parse_args(list(argv)))


def test_the_budget_is_parsed_once_as_whole_bytes():
    assert _parsed("--memory-budget", "8G").comm.memory_budget == 8 << 30
    assert _parsed("--memory-budget", "512M").comm.memory_budget == 512 << 20
    assert _parsed().comm.memory_budget is None
    assert TrainConfig.from_dict(TrainConfig.build(memory_budget=1 << 30).to_dict()).comm.memory_budget == 1 << 30
    with pytest.raises(SystemExit):
        _parsed("--memory-budget", "8X")
    with pytest.raises(TrainingError, match="must be a size > 0"):
        TrainConfig.build(memory_budget=0)


def test_under_a_budget_features_and_structure_stream_and_the_rest_is_resident(cora_set):
    shape = JobShape(2, 2, hidden=16, layers=2, **SAMPLED)
    plain = estimate_memory(cora_set, shape)
    width, table = 1433, plain.worker["features"]
    read_ahead = memory.READ_AHEAD_STAGES * 4 * width * reached_nodes(2708, 64, (5, 5))
    # the resident parts: the plain estimate less the features and the mapped files, plus each worker's read-ahead
    minimum = (
        plain.machine_peak_bytes - plain.machine["structure"] - plain.machine["features"] - 2 * (table - read_ahead)
    )
    roomy = estimate_memory(cora_set, JobShape(2, 2, hidden=16, layers=2, memory_budget=1 << 34, **SAMPLED))
    assert roomy.minimum_bytes == minimum
    assert roomy.cache_bytes == table  # room for the whole table: all of it cached
    assert roomy.streamed == {"structure": plain.machine["structure"], "features": 0}
    tight = estimate_memory(cora_set, JobShape(2, 2, hidden=16, layers=2, memory_budget=minimum + 4000000, **SAMPLED))
    assert tight.cache_bytes == int(4000000 * memory.CACHE_SHARE) // 2
    assert tight.streamed["features"] == 2 * (table - tight.cache_bytes)
    assert tight.machine_peak_bytes == minimum + 2 * tight.cache_bytes <= tight.budget
    assert "streamed from disk" in render(estimate_report(tight.to_dict()))
    full = estimate_memory(cora_set, JobShape(2, 2, hidden=16, layers=2, memory_budget=1 << 34))
    assert full.minimum_bytes == full.machine_peak_bytes and not full.streamed  # full-graph streams nothing


def test_a_budget_below_the_minimum_is_refused_naming_it_and_one_above_the_machine_warned(cora_set, monkeypatch):
    shape = JobShape(2, 2, hidden=16, layers=2, **SAMPLED)
    low = estimate_memory(cora_set, JobShape(**{**shape.__dict__, "memory_budget": 1 << 20}))
    said = []
    minimum = f"{low.minimum_bytes / 1e9:.2f} GB"
    with pytest.raises(JobError, match=f"below this job's minimum of {minimum}.*at least {minimum}"):
        check_budget(low, said.append)
    monkeypatch.setattr("commgraph.launch.launcher.machine_bytes", lambda: 1 << 31)
    check_budget(estimate_memory(cora_set, JobShape(**{**shape.__dict__, "memory_budget": 1 << 31})), said.append)
    assert said == []
    check_budget(estimate_memory(cora_set, JobShape(**{**shape.__dict__, "memory_budget": 1 << 32})), said.append)
    assert len(said) == 1 and "above this machine's 2.15 GB of memory" in said[0]


def test_without_a_memory_hierarchy_the_reason_is_one_line(tmp_path):
    mounts, own = tmp_path / "mounts", tmp_path / "cgroup"
    mounts.write_text("proc /proc proc rw 0 0\n")
    own.write_text("0::/\n")
    assert "no memory cgroup hierarchy" in cgroup.cap_memory(1 << 30, "x", mounts, own)
    mounts.write_text(f"cgroup {tmp_path / 'unmounted'} cgroup rw,memory 0 0\n")  # a hierarchy that is not there
    own.write_text("4:memory:/\n")
    reason = cgroup.cap_memory(1 << 30, "x", mounts, own)
    assert reason.startswith("no memory cgroup can be made here (v1") and "\n" not in reason


@pytest.mark.multiproc
def test_a_process_joins_the_cap_and_leaves_it_on_release():
    cap = cgroup.cap_memory(256 << 20, cgroup.job_cgroup_name() + "-test")
    if isinstance(cap, str):
        pytest.skip(cap)
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        cap.join(child.pid)
        assert int((cap.path / cap.limit_file).read_text()) == 256 << 20
        assert cap.path.name in Path(f"/proc/{child.pid}/cgroup").read_text()
        cap.release()
        assert not cap.path.exists()
        assert cap.path.name not in Path(f"/proc/{child.pid}/cgroup").read_text()
    finally:
        child.kill()
        child.wait()
        cap.release()
