"""``commgraph run --workers N SCRIPT ARGS...``: a user's own script as N ranks that ``cg.init()``
joins into one job; a failed rank stops the others and is named with its reason; a script that never
joins is refused; a partition set among its arguments is checked and its memory estimated first.
The ranks are forked from pytest's process (:func:`forked.run_commgraph`)."""

import textwrap
import time

import pytest
import torch.distributed as dist

from commgraph.graph import load_graph
from commgraph.launch.options import RunOptions
from commgraph.launch.script import dry_run, partition_sets
from commgraph.partition import load_partition_set, partition_graph, write_partition_set
from commgraph.plan.choose import choose_allgather
from commgraph.pyg.world import DEFAULT_TIMEOUT
from commgraph.runtime.launch import _first_failure
from commgraph.runtime.world import failed_key, stopped_key
from commgraph.topology import resolve_topology
from deadlines import scaled
from forked import run_commgraph


def script(tmp_path, body: str, name: str = "script.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


@pytest.fixture
def two_parts(tmp_path):
    """A partition set of two parts of a small generated graph."""
    graph = load_graph("sbm:nodes=60,classes=2,features=4,seed=0")
    assignment, _ = partition_graph(graph, 2, "chunk", 0)
    write_partition_set(graph, assignment, 2, tmp_path / "parts", method="chunk", seed=0, seconds=0, metrics={})
    return tmp_path / "parts"


ALL_REDUCE = """
    import os
    import sys

    import torch
    import torch.distributed as dist

    import commgraph.pyg as cg

    session = cg.init()
    total = torch.tensor([float(cg.rank() + 1)])
    dist.all_reduce(total)  # torch's default group: the one DDP takes
    env = [os.environ[k] for k in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMP_NUM_THREADS")]
    print(f"rank {cg.rank()} of {cg.world_size()}: sum {total.item():g}, env {env}, "
          f"threads {torch.get_num_threads()}, timeout {session.world.timeout:g}, argv {sys.argv[1:]}", flush=True)
"""


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_two_ranks_join_one_job_and_get_the_script_s_arguments(tmp_path):
    path = script(tmp_path, ALL_REDUCE)
    done = run_commgraph(["run", "--workers", "2", "--threads", "1", "--timeout", "30", path, "--workers", "7", "x"])
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        expected = (
            f"rank {rank} of 2: sum 3, env ['{rank}', '2', '1'], threads 1, timeout 30, argv ['--workers', '7', 'x']"
        )
        assert expected in done.stdout, done.stdout  # two ranks' lines may meet on one line of the output


RAISES = """
    import sys
    import time

    import torch
    import torch.distributed as dist

    import commgraph.pyg as cg

    cg.init()
    if cg.rank() == 1:
        with open(sys.argv[2], "w") as handle:
            handle.write(str(time.time()))
        raise ValueError("boom")
    if sys.argv[1] == "collective":
        dist.all_reduce(torch.ones(1))  # fails as soon as rank 1 is gone
    while True:  # never notices: the launcher kills it
        time.sleep(0.05)
"""
RAISE_LINE = textwrap.dedent(RAISES).splitlines().index('    raise ValueError("boom")') + 1


@pytest.mark.multiproc
@pytest.mark.timeout(120)
@pytest.mark.parametrize("waits_in", ["collective", "sleep"])
def test_a_raising_rank_stops_the_job_and_is_named(tmp_path, waits_in):
    path, raised = script(tmp_path, RAISES), tmp_path / "raised"
    done = run_commgraph(["run", "--workers", "2", path, waits_in, str(raised)])
    stopped_after = time.time() - float(raised.read_text())
    assert done.returncode == 1
    named = f"commgraph: error: rank 1 failed: ValueError: boom (script.py, line {RAISE_LINE})"
    assert named in done.stderr.splitlines(), done.stderr
    assert f'script.py", line {RAISE_LINE}' in done.stderr and "raise ValueError" in done.stderr  # python's traceback
    assert stopped_after < 5, stopped_after  # the grace (1.5 s), not the 300 s collective timeout
    if waits_in == "collective":
        assert "commgraph: rank 0 stopped: rank 1 failed" in done.stderr


def test_a_rank_that_stopped_because_of_another_is_not_named_first():
    store = dist.HashStore()  # ranks 0 and 1 seen failing in one poll; 0 said it stopped because of 1
    store.set(stopped_key(0), "1")
    store.set(failed_key(1), "ValueError: boom (script.py, line 3)")
    assert _first_failure(store, [(0, 1), (1, 1)], [1, 1]) == ((1, 1), "ValueError: boom (script.py, line 3)")
    assert _first_failure(dist.HashStore(), [(0, 1), (1, -9)], [1, -9]) == ((0, 1), None)


def test_a_raising_rank_still_unwinding_is_named_before_the_peer_it_stopped():
    store = dist.HashStore()  # rank 0's collective failed and it exited while rank 1 still unwinds
    store.set(stopped_key(0), "1")
    store.set(failed_key(1), "ValueError: boom (script.py, line 3)")
    assert _first_failure(store, [(0, 1)], [1, None]) == ((1, 1), "ValueError: boom (script.py, line 3)")
    lone = dist.HashStore()  # a rank that says it stopped, with no rank saying why: itself
    lone.set(stopped_key(0), "1")
    assert _first_failure(lone, [(0, 1)], [1, None]) == ((0, 1), None)


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_the_script_s_exit_code_is_the_job_s(tmp_path):
    path = script(tmp_path, "import sys, commgraph.pyg as cg\ncg.init()\nsys.exit(3 if cg.rank() == 1 else 0)\n")
    done = run_commgraph(["run", "--workers", "2", path])
    assert done.returncode == 3 and "commgraph: error: rank 1 exited with code 3" in done.stderr


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_a_script_that_never_calls_init_is_refused(tmp_path):
    path = script(tmp_path, "print('alone')\n")
    done = run_commgraph(["run", "--workers", "2", path])
    assert done.returncode == 2 and done.stdout.count("alone") == 2
    error = [line for line in done.stderr.splitlines() if line.startswith("commgraph: error:")]
    assert len(error) == 1 and f"{path} never called commgraph.pyg.init(): add `import commgraph.pyg" in error[0]


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_a_rank_that_never_calls_init_stops_the_ranks_that_did(tmp_path):
    text = (
        "import os, time, torch\n"
        "if os.environ['RANK'] == '0':\n"
        "    import commgraph.pyg as cg\n"
        "    cg.init()\n"
        "    torch.distributed.barrier()\n"
    )
    path = script(tmp_path, text)
    started = time.monotonic()
    done = run_commgraph(["run", "--workers", "2", "--timeout", "100", path])
    assert done.returncode == 2 and time.monotonic() - started < scaled(60)
    assert "commgraph: error: rank 1 failed: " in done.stderr and "never called commgraph.pyg.init()" in done.stderr


def test_help_shows_the_defaults():
    done = run_commgraph(["run", "--help"])
    text = " ".join(done.stdout.split())
    assert done.returncode == 0 and "--workers N" in text and "SCRIPT ..." in text
    assert "(default auto)" in text and f"(default {DEFAULT_TIMEOUT})" in text and "(default: cores / workers)" in text
    assert RunOptions.timeout == DEFAULT_TIMEOUT  # run's default is cg.init's alone


def test_a_missing_script_is_one_line():
    done = run_commgraph(["run", "--workers", "2", "no-such-script.py"])
    assert done.returncode == 2 and done.stderr == "commgraph: error: no-such-script.py: no such script\n"


def test_partition_sets_are_found_among_the_arguments(two_parts, tmp_path):
    args = ["--data", str(two_parts), f"--parts={two_parts}", str(tmp_path), "--lr=0.1"]
    assert partition_sets(args) == [two_parts, two_parts]


def test_dry_run_prints_the_estimate_of_the_set(two_parts, tmp_path):
    done = run_commgraph(["run", "--workers", "2", "--dry-run", script(tmp_path, "pass\n"), str(two_parts)])
    assert done.returncode == 0 and "memory estimate:" in done.stdout and "(2 workers of" in done.stdout
    assert "job: 2 ranks on this machine" in done.stdout and "step time: not predicted" in done.stdout


def test_dry_run_prices_the_halo_refresh_by_the_plan_the_bridge_picks(two_parts):
    pset = load_partition_set(two_parts)
    rows = sum(pset.part(k).num_halo for k in range(2))
    topology = resolve_topology("detect", workers=2, device="cpu")
    data = dry_run(RunOptions(workers=2, device="cpu"), ["--data", str(two_parts)])
    assert data["job"] == {"ranks": 2, "device": "cpu", "backend": "Gloo", "threads": None, "topology": topology.name}
    (found,) = data["sets"]
    assert found["path"] == str(two_parts) and found["exchange"]["halo_rows"] == rows
    for layer, columns in zip(found["exchange"]["layers"], (4, 16), strict=True):  # the set's 4 features, then hidden
        choice = choose_allgather("auto", pset, topology, 4 * columns)
        assert layer["columns"] == columns and layer["bytes"] == 4 * rows * columns
        assert layer["modeled_seconds"] == choice.modeled_seconds and layer["planner"] == choice.plan.planner
    assert dry_run(RunOptions(workers=2, device="cpu"), [])["sets"] == []


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_a_set_that_does_not_fit_is_refused_before_any_rank_starts(two_parts, tmp_path, monkeypatch):
    ran = tmp_path / "ran"
    path = script(tmp_path, f"open({str(ran)!r}, 'w').close()\n")
    monkeypatch.setattr("commgraph.launch.launcher.available_bytes", lambda: 10**6)
    done = run_commgraph(["run", "--workers", "2", path, str(two_parts)])
    assert done.returncode == 2 and "--ignore-memory starts it anyway" in done.stderr and not ran.exists()
    done = run_commgraph(["run", "--workers", "3", path, str(two_parts)])
    assert done.returncode == 2 and "has 2 parts but the job has 3 ranks" in done.stderr and not ran.exists()


BUDGETED = """
    import os
    import sys

    import commgraph.pyg as cg

    cg.init()
    loader = cg.NeighborLoader(sys.argv[1], num_neighbors=[2], batch_size=8)
    batches = sum(1 for _ in loader)
    print(f"rank {cg.rank()}: budget {os.environ['COMMGRAPH_MEMORY_BUDGET']} {loader.memory_budget}, "
          f"{loader.fetch.store.placement}, {batches} batches", flush=True)
"""


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_a_budget_below_the_sets_minimum_is_refused_before_any_rank_starts(two_parts, tmp_path):
    ran = tmp_path / "ran"
    path = script(tmp_path, f"open({str(ran)!r}, 'w').close()\n")
    done = run_commgraph(["run", "--workers", "2", "--memory-budget", "1M", path, str(two_parts)])
    assert done.returncode == 2 and not ran.exists()
    assert "--memory-budget 0.00 GB is below this job's minimum of " in done.stderr
    assert "raise the budget to at least" in done.stderr and len(done.stderr.splitlines()) == 1


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_a_budget_is_checked_capped_and_handed_to_the_ranks_loaders(two_parts, tmp_path, monkeypatch):
    """Above the machine's memory: warned; where no cgroup can be made: one line; the ranks get the
    budget, and their cg.NeighborLoader reads the part's features from its file through the cache."""
    monkeypatch.setattr("commgraph.launch.launcher.machine_bytes", lambda: 2 << 30)
    monkeypatch.setattr("commgraph.launch.launcher.cap_memory", lambda budget, name: "no memory cgroup here (test)")
    path = script(tmp_path, BUDGETED)
    done = run_commgraph(["run", "--workers", "2", "--threads", "1", "--memory-budget", "4G", path, str(two_parts)])
    assert done.returncode == 0, done.stderr
    assert "--memory-budget 4.29 GB is above this machine's 2.15 GB of memory" in done.stderr
    assert "commgraph: no memory cgroup here (test): the budget is kept by the code" in done.stderr
    for rank in (0, 1):
        assert f"rank {rank}: budget {4 << 30} {4 << 30}, disk, " in done.stdout
