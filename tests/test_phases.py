"""``--timeout`` bounds every phase of a job, set-up included (:mod:`commgraph.phases`), and a rank
the kernel kills for memory is named as such.

The stalls are the test hook's (``COMMGRAPH_FAULT=WHERE:PHASE:stall``): the process waits on an
event nobody sets, so only the phase's bound can end it; the tests wait on the job's end."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from commgraph.cli.main import main
from commgraph.errors import JobError
from commgraph.phases import FAULT_ENV, TIMEOUT_FIX, bounded
from deadlines import scaled
from forked import run_commgraph

GRAPH = "sbm:nodes=300,classes=3,features=8,seed=1"
# a phase's bound in the jobs below on a quiet machine, scaled by the load when a job starts: every
# phase but the stalled one takes far less, the workers' start included (ranks forked from pytest's
# warmed process; a fresh interpreter, where pytest's process cannot fork, takes 7-9 s quiet)
SECONDS = 10


@pytest.fixture(scope="module")
def pset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("phases") / "set"
    assert main(["partition", "make", GRAPH, "--parts", "2", "--out", str(out), "--json"]) == 0
    return out


def test_a_launcher_phase_past_its_bound_fails_naming_the_phase_the_seconds_and_the_fix():
    threads = threading.active_count()  # an earlier test's threads may still run
    started = time.monotonic()
    with pytest.raises(JobError) as failed:
        with bounded("partitioning", 0.2):
            try:
                threading.Event().wait()  # nobody sets it: only the bound ends the phase
            except Exception:  # noqa: BLE001 - the phase's own handlers must not take the bound for an error
                pytest.fail("the bound reached an `except Exception`")
    assert str(failed.value) == f"partitioning took more than 0.2 s (--timeout 0.2): {TIMEOUT_FIX}"
    assert time.monotonic() - started < scaled(5)
    with bounded("partitioning", 0.2):  # a phase within its bound: nothing happens after it
        pass
    time.sleep(0.3)
    assert threading.active_count() == threads


@pytest.mark.multiproc
def test_a_launcher_phase_stuck_where_no_exception_gets_out_is_stopped_hard():
    """Code that swallows every exception (a native callback does) cannot be interrupted: a thread
    prints the same line and ends the process."""
    code = (
        "import threading\nfrom commgraph.phases import bounded\nwith bounded('planning the exchanges', 0.2):\n"
        "    while True:\n        try:\n            threading.Event().wait()\n"
        "        except BaseException:\n            pass\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert (
        run.stderr == f"commgraph: error: planning the exchanges took more than 0.2 s (--timeout 0.2): {TIMEOUT_FIX}\n"
    )


@pytest.mark.multiproc
@pytest.mark.parametrize(
    "fault, line",
    [
        ("0:starting", "rank 0 did not finish starting (before joining the job)"),
        # rank 0 waits, setting up, for rank 1: both are named
        ("1:setting up", "rank 0, 1 did not finish setting up (its part of the set, the model)"),
    ],
)
def test_a_rank_stuck_in_set_up_stops_the_job_in_one_line(fault, line, pset, monkeypatch):
    """A rank stuck before it joins (or after, setting up) while the others wait for it: once a
    phase's bound passes, before any waiting rank's own bound, the launcher names the rank furthest
    behind and its phase, and every rank is gone (the suite's end checks that no process is left)."""
    monkeypatch.setenv(FAULT_ENV, f"{fault}:stall")
    bound = math.ceil(scaled(SECONDS))
    started = time.monotonic()
    run = run_commgraph(
        ["train", str(pset), "--workers", "2", "--epochs", "2", "--timeout", str(bound), "--quiet", "--threads", "1"]
    )
    took = time.monotonic() - started
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == [
        f"commgraph: error: {line} within {bound} s (--timeout {bound}); every rank stopped: {TIMEOUT_FIX}"
    ]
    assert bound <= took < bound + scaled(30)


@pytest.mark.multiproc
def test_the_one_rank_run_in_the_launchers_process_stuck_in_set_up_stops_the_job_in_one_line(tmp_path, monkeypatch):
    """A job of one worker runs its rank in the launcher's process: a thread of it times the
    rank's phases, and a rank stuck in one ends the process with the forked ranks' line (the
    clock starts once the launcher's set-up is done, so the interpreter's start is not in it)."""
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(FAULT_ENV, "0:starting:stall")
    bound = math.ceil(scaled(SECONDS))
    started = time.monotonic()
    run = subprocess.run(  # a process of its own: the stuck rank's process is the launcher's
        [sys.executable, "-m", "commgraph", "train", GRAPH, "--workers", "1", "--epochs", "2"]
        + ["--timeout", str(bound), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    took = time.monotonic() - started
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == [
        f"commgraph: error: rank 0 did not finish starting (before joining the job) within {bound} s "
        f"(--timeout {bound}); every rank stopped: {TIMEOUT_FIX}"
    ]
    assert bound <= took < bound + scaled(30)


@pytest.mark.multiproc
def test_partitioning_past_the_timeout_stops_before_any_worker_and_leaves_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(FAULT_ENV, "launcher:partitioning:stall")
    run = run_commgraph(["train", GRAPH, "--workers", "2", "--epochs", "2", "--timeout", "2", "--quiet"])
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == [
        f"commgraph: error: partitioning took more than 2 s (--timeout 2): {TIMEOUT_FIX}, or make the set once "
        "with `commgraph partition make` and run on it"
    ]
    partitions = tmp_path / "home" / "partitions"
    assert not partitions.exists() or not any(partitions.iterdir())


@pytest.mark.multiproc
def test_a_rank_killed_by_sigkill_beyond_the_estimate_is_named_out_of_memory(pset, monkeypatch):
    """``--ignore-memory`` with an estimate beyond the machine: a rank the kernel kills (here it
    SIGKILLs itself as it starts setting up) is named as killed for memory, with the estimate and
    the machine's memory; the other rank is stopped at once, so the line is the only one."""
    monkeypatch.setenv(FAULT_ENV, "1:setting up:sigkill")
    run = run_commgraph(
        ["train", str(pset), "--workers", "2", "--epochs", "1", "--hidden", "3000000", "--ignore-memory"]
        + ["--quiet", "--threads", "1"]
    )
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert re.fullmatch(
        r"commgraph: error: rank 1 was killed by the kernel \(out of memory\?\): the job needs about [\d.]+ GB, "
        r"this machine has [\d.]+ GB available; drop --ignore-memory or lower --hidden, --batch-size or --fanout",
        run.stderr.strip(),
    ), run.stderr
