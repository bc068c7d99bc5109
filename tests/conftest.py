"""Shared fixtures and the suite's tiers.

Markers (registered in pyproject.toml, ``--strict-markers``):

- ``multiproc``: the test starts processes (a forked rank, ``python -m ...``, a spawned explainer,
  any ``subprocess``). The rule is enforced: a test that starts a process without the mark fails at
  teardown, naming the mark to add, so the unit tier (``make test-fast``) never starts one.
- ``gpu``: the test needs a CUDA GPU; it is skipped, with the mark's ``reason``, where torch sees none.
  The process guard leaves these alone: Triton compiles a kernel with ``ptxas`` in a process of its
  own, and the unit tier runs no ``gpu`` test anyway.
- ``slow``: the test takes more than about 5 s on a quiet 2-core machine.

No process outlives its test: every process a test starts from pytest's process with ``subprocess``
that still runs at teardown is killed with SIGKILL, with its process group where it leads one (a
launcher's ranks die with it: each asks for its parent's death signal,
:func:`commgraph.lifetime.die_with_parent`), and so is every other process still below pytest (the
subreaper of all of them: torchrun's workers in sessions of their own, orphans); a test starts its
processes however it likes (``subprocess``, :func:`forked.launch_forked`, :func:`forked.run_commgraph`)
and needs no fixture of its own to stop them. The run fails if any process below pytest still runs
at its end.

``make test-fast`` runs ``-m "not slow and not multiproc and not gpu"``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from multiprocessing import resource_sharer
from multiprocessing import util as mp_util
from pathlib import Path

import pytest
from tqdm import tqdm

PLANETOID_DIR = Path(__file__).parent / "data" / "planetoid"


@pytest.fixture
def planetoid_dir() -> Path:
    """Cora's raw Planetoid files (``ind.cora.*``), vendored under ``tests/data/planetoid``."""
    return PLANETOID_DIR


@pytest.fixture(scope="module")
def cora_set(tmp_path_factory):
    """Cora in two chunk parts, a partition set written once per test module."""
    from commgraph.graph import load_graph
    from commgraph.partition import load_partition_set, partition_graph, partition_metrics, write_partition_set

    graph = load_graph("cora")
    assignment, _ = partition_graph(graph, 2, "chunk", 0)
    out = tmp_path_factory.mktemp("sets") / "cora-2"
    write_partition_set(
        graph, assignment, 2, out, method="chunk", seed=0, seconds=0.0, metrics=partition_metrics(graph, assignment, 2)
    )
    return load_partition_set(out)


@pytest.fixture
def switch_planes():
    """A builder of ``gpus`` GPUs each joined to every one of ``planes`` switches (NVSwitch planes)
    by an NVSwitch port entry of ``gbps``."""
    from commgraph.topology import Device, Link, Topology

    def build(gpus: int, planes: int, gbps: float = 40.0) -> Topology:
        return Topology(
            f"planes-{gpus}x{planes}",
            [Device(f"gpu{g}", "gpu") for g in range(gpus)] + [Device(f"sw{s}", "nvswitch") for s in range(planes)],
            [Link(f"gpu{g}", f"sw{s}", "nvswitch", 2, gbps, 1.0) for g in range(gpus) for s in range(planes)],
        )

    return build


# -- the process guard behind the ``multiproc`` mark ------------------------------------------------

_started: list[str] = []  # what the running test started, in this (pytest's) process
_popens: list[subprocess.Popen] = []  # the processes it started, killed at its teardown if still running


def _note(what: str) -> None:
    if os.getpid() == _PYTEST_PID:
        _started.append(what)


_PYTEST_PID = os.getpid()
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
_execute_child = subprocess.Popen._execute_child
_spawnv_passfds = mp_util.spawnv_passfds


# tools that libraries start on their own (ctypes.util.find_library runs ldconfig, compilers for JIT
# kernels): not the test's processes
_TOOLS = {"ldconfig", "uname", "gcc", "cc", "c++", "g++", "ld"}


def _execute_child_noted(self, args, *rest, **kwargs):
    command = args if isinstance(args, (str, bytes)) else " ".join(map(str, args))
    command = command.decode() if isinstance(command, bytes) else command
    if os.path.basename(command.split(" ", 1)[0]) not in _TOOLS:
        _note(f"subprocess {command}"[:200])
    _execute_child(self, args, *rest, **kwargs)
    if os.getpid() == _PYTEST_PID:
        _popens.append(self)


def _spawnv_passfds_noted(path, args, passfds):
    _note(f"multiprocessing spawn {' '.join(map(str, args))}"[:200])
    return _spawnv_passfds(path, args, passfds)


def _kill_left_running() -> None:
    """SIGKILL every process the test started that still runs (its group too, where it leads one),
    then every other process still below pytest: what those started in sessions of their own
    (torchrun's workers) or left orphaned, which pytest, their subreaper, now parents. Resource
    trackers of Python's multiprocessing are left to exit by themselves (they remove named
    semaphores once their owners are gone); the run's end checks they did."""
    from commgraph.lifetime import kill_group
    from procs import alive, descendants

    for process in _popens:
        if process.poll() is not None:  # exited and reaped: its pid may be another process's now
            continue
        if os.getpgid(process.pid) == process.pid:
            kill_group(process.pid)
        else:
            process.kill()
        process.wait()
    _popens.clear()
    below = descendants(_PYTEST_PID)
    for pid in alive(pid for pid, seen in below.items() if "multiprocessing.resource_tracker" not in seen[2]):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


def _own_tracker(seen: tuple[int, str, str]) -> bool:
    parent, _, command = seen
    return parent == _PYTEST_PID and "multiprocessing.resource_tracker" in command


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run fails if a process it started still runs at its end. pytest is the child subreaper
    of everything it starts (:func:`pytest_configure`), so an orphaned rank is still found below it."""
    from procs import alive, descendants

    if session.config.pluginmanager.has_plugin("dsession"):  # pytest-xdist's controller: each worker checks its own
        return
    # pytest's own resource tracker (its multiprocessing semaphores) lives until pytest exits
    left = {pid: seen for pid, seen in descendants(_PYTEST_PID).items() if not _own_tracker(seen)}
    running = alive(left)
    for pid in running:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    if running:
        listed = "; ".join(f"{pid}: {left[pid][2][:120]}" for pid in running[:5])
        print(f"\n{len(running)} process(es) outlived their test and were killed: {listed}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config: pytest.Config) -> None:
    if sys.platform.startswith("linux"):  # orphans of the processes a test starts become pytest's children
        ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # no tqdm monitor thread in this process: ForkedZygote.fork forks no process with other
    # threads, so while one runs, launches from here start a fresh interpreter instead of forking
    # this warmed one
    tqdm.monitor_interval = 0
    # one compute thread in this process: an OpenMP team started here would be copied, without its
    # threads, into every rank forked from here, and a rank's first parallel op would wait on them
    # for ever (commgraph's launchers fork their zygote before any work, so only tests meet this)
    import torch

    torch.set_num_threads(1)
    subprocess.Popen._execute_child = _execute_child_noted
    mp_util.spawnv_passfds = _spawnv_passfds_noted
    os.register_at_fork(before=lambda: _note("os.fork"))


def pytest_unconfigure(config: pytest.Config) -> None:
    subprocess.Popen._execute_child = _execute_child
    mp_util.spawnv_passfds = _spawnv_passfds


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``gpu`` tests are skipped where torch sees no CUDA GPU."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    for item in gpu_items:
        reason = item.get_closest_marker("gpu").kwargs.get("reason", "needs a CUDA GPU")
        item.add_marker(pytest.mark.skip(reason=f"{reason} (torch sees no CUDA GPU)"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    _started.clear()
    _popens.clear()
    return (yield)


def _stop_resource_sharer() -> None:
    """A tensor put on a multiprocessing queue from here (an online DGS explainer made in a test)
    lends its storage's file descriptor through multiprocessing's resource sharer, a thread that
    then serves for the rest of the process; while it runs, :meth:`ForkedZygote.fork` forks nothing
    and every later job of the session starts a fresh interpreter (about 8 s of CPU each)."""
    if resource_sharer._resource_sharer._thread is not None:
        resource_sharer.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    result = yield
    if _started or _popens:
        _kill_left_running()
        _stop_resource_sharer()
    if _started and item.get_closest_marker("multiproc") is None and item.get_closest_marker("gpu") is None:
        first = _started[0]
        count = len(_started)
        _started.clear()
        pytest.fail(
            f"{item.nodeid} started {count} process(es) (first: {first}) but is not marked multiproc: "
            "add @pytest.mark.multiproc so that the unit tier (make test-fast) leaves it out",
            pytrace=False,
        )
    return result


@pytest.fixture
def bridge_alone():
    """A one-process bridge world (``commgraph.pyg.init()`` outside any job), shut down after the
    test: no process group may outlive it, or the next job's ranks forked from this process would
    find one already initialised."""
    import commgraph.pyg as cg

    session = cg.init()
    yield session
    cg.shutdown()


@pytest.fixture
def alone(bridge_alone, tmp_path, monkeypatch):
    """:func:`bridge_alone` with commgraph's home (where ``cg.partition`` writes its sets) in the
    test's own folder."""
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path))
    return bridge_alone
