"""Sizes priced before the work (:mod:`commgraph.sizes`): the room a process has under an
address-space limit, refusals under ``ulimit -v``, a rank's failed allocation said in one line,
evaluation passes counted without a pass per epoch, and planning announced on stderr."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from commgraph import sizes
from commgraph.cli.main import main
from commgraph.errors import GraphSpecError
from commgraph.launch import rank
from commgraph.plan.first_layer import evaluation_passes

SRC = str(Path(__file__).resolve().parents[1] / "src")
ULIMIT_V = 6_000_000 * 1024  # `ulimit -v 6000000`, as a shared machine or a container gives


def test_room_is_the_address_space_limit_less_what_is_mapped_when_that_is_smaller(monkeypatch):
    cap = sizes._mapped_bytes() + 10**6
    monkeypatch.setattr(sizes.resource, "getrlimit", lambda which: (cap, cap))
    room = sizes.room()
    assert room.source == "left under this process's address-space limit (ulimit -v)"
    assert 0 < room.bytes <= 10**6
    with pytest.raises(GraphSpecError, match=r"^x needs about 0.0 GB but 0.0 GB is left under .*\(ulimit -v\): y$"):
        sizes.check_room("x", 2 * 10**6, GraphSpecError, "y")
    monkeypatch.setattr(sizes.resource, "getrlimit", lambda which: (resource.RLIM_INFINITY,) * 2)
    assert sizes.room() == sizes.Room(sizes.available_bytes(), "available on this machine")


def test_counts_beyond_int64_and_caps_are_refused_naming_both():
    sizes.check_count("--epochs", sizes.INT64_MAX, GraphSpecError)
    with pytest.raises(GraphSpecError, match="^--epochs 9,223,372,036,854,775,808 is beyond int64's 9,223,"):
        sizes.check_count("--epochs", sizes.INT64_MAX + 1, GraphSpecError)


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ULIMIT_V, ULIMIT_V))


@pytest.mark.multiproc
@pytest.mark.parametrize(
    "argv, expect",
    [
        (["graph", "info", "sbm:nodes=1e9,classes=3,features=8"], "sbm with 1,000,000,000 nodes"),
        (
            ["sim", "llm", "--model", "gpt3-13b", "--topology", "1000000xdgx1-v100-ib"],
            "1000000xdgx1-v100-ib (1,000,000",
        ),
    ],
)
def test_under_ulimit_v_a_size_that_does_not_fit_is_refused_before_it_is_allocated(argv, expect):
    done = subprocess.run(
        [sys.executable, "-m", "commgraph", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limited,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"commgraph: error: {expect}"), done.stderr
    assert "left under this process's address-space limit (ulimit -v)" in done.stderr


@pytest.mark.parametrize(
    "exc, said",
    [
        (
            RuntimeError(
                "[enforce fail at alloc_cpu.cpp:118] data. DefaultCPUAllocator: can't allocate memory: you tried "
                "to allocate 3600000000 bytes. Error code 12 (Cannot allocate memory)"
            ),
            "an allocation of 3.6 GB failed",
        ),
        (
            type("OutOfMemoryError", (RuntimeError,), {})("CUDA out of memory. Tried to allocate 2.00 GiB."),
            "an allocation of 2.00 GiB failed",
        ),
        (MemoryError("Unable to allocate 6.94 EiB for an array with shape (10,)"), "an allocation of 6.94 EiB failed"),
        (MemoryError(), "an allocation failed"),
        (RuntimeError("shape mismatch"), None),
    ],
)
def test_a_failed_allocation_is_said_with_its_size(exc, said):
    assert rank.out_of_memory(exc) == said


def test_a_rank_that_runs_out_of_memory_says_so_in_one_line_and_exits_2(monkeypatch):
    monkeypatch.setenv("RANK", "1")

    def die(world, message: str, code: int):  # the rank's os._exit, as an exception this test can catch
        raise SystemExit((message, code))

    def prepare():
        raise MemoryError("Unable to allocate 1.00 TiB for an array with shape (10,)")

    monkeypatch.setattr(rank, "_die", die)
    with pytest.raises(SystemExit) as stopped:
        rank.run_rank(5.0, "cpu", False, prepare, lambda world, prepared: None)
    assert stopped.value.code == (
        f"commgraph: error: rank 1 ran out of memory: an allocation of 1.00 TiB failed; {rank.OOM_ADVICE}",
        2,
    )


@pytest.mark.parametrize("epochs, every, passes", [(10, 3, 4), (9, 3, 3), (1, 5, 1), (10**21, 1, 10**21)])
def test_evaluation_passes_are_counted_without_a_pass_per_epoch(epochs, every, passes):
    assert evaluation_passes(epochs, every) == passes


def test_planning_that_takes_long_is_announced_and_each_planner_end_said(monkeypatch, capsys):
    monkeypatch.setattr("commgraph.cli.plan.SAY_AFTER_SECONDS", 0.0)
    assert main(["plan", "allreduce", "--topology", "dgx1-v100", "--planner", "ring1", "--json"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("commgraph: planning over 8 workers takes about ") and err[0].endswith(" s")
    assert err[1].startswith("commgraph: ring1 planned in ") and len(err) == 2


def test_topo_show_counts_the_hosts_with_a_device_that_is_not_a_switch(capsys):
    assert main(["topo", "show", "--topology", "3xdgx1-v100-ib"]) == 0
    assert capsys.readouterr().out.startswith("3xdgx1-v100-ib: 3 host(s), 24 gpu,")
