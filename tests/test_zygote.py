"""Ranks forked from one warmed interpreter: exit codes come back per rank, a failed rank stops the
job with its rank named, and no rank outlives its zygote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commgraph.runtime import launch_local
from deadlines import scaled

pytestmark = pytest.mark.multiproc

DRIVER = """
import os, sys, time
from pathlib import Path
rank = int(os.environ["RANK"])
line = f"rank {rank} of {os.environ['WORLD_SIZE']} warm {'torch' in sys.modules} pid {os.getpid()}"
(Path(__file__).parent / "ranks" / str(os.getpid())).write_text(line)
if sys.argv[1] == "fail" and rank == 1:
    sys.exit(5)
if sys.argv[1] == "sleep":
    time.sleep(120)
"""


@pytest.fixture
def driver(tmp_path, monkeypatch):
    (tmp_path / "zygote_driver.py").write_text(DRIVER)
    (tmp_path / "ranks").mkdir()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    return tmp_path


def _reports(driver: Path) -> list[list[str]]:
    """What each rank of the last job wrote (a file a rank, named by its pid), split into words;
    the files are then removed for the next job."""
    files = sorted((driver / "ranks").iterdir())
    lines = [path.read_text().split() for path in files]
    for path in files:
        path.unlink()
    return lines


@pytest.mark.timeout(120)
def test_every_rank_runs_the_module_with_its_own_rank_forked_warm_or_fresh(driver, capfd):
    """Each rank runs the module with its own rank in a process of its own; forked ranks have the
    zygote's imports, while ranks that will use CUDA (``fresh``) exec a new interpreter: none of the
    zygote's imports, and still their ranks, exit codes and the job stopped by a failed one."""
    for fresh, warm in ((False, "True"), (True, "False")):
        assert launch_local(["ok"], 3, grace=10, module="zygote_driver", fresh=fresh) == 0
        lines = _reports(driver)
        assert sorted(line[1] for line in lines) == ["0", "1", "2"]
        assert len({line[-1] for line in lines}) == 3  # three processes
        assert {line[5] for line in lines} == {warm}
    assert launch_local(["fail"], 2, grace=1, module="zygote_driver", fresh=True) == 1
    assert "worker rank 1 exited with code 5" in capfd.readouterr().err


@pytest.mark.timeout(120)
def test_a_failed_rank_stops_the_job_with_its_rank_named(driver, capfd):
    started = time.monotonic()
    assert launch_local(["fail"], 2, grace=1, module="zygote_driver") == 1
    assert "worker rank 1 exited with code 5" in capfd.readouterr().err
    assert time.monotonic() - started < scaled(60)  # rank 0 would sleep 120 s: it was killed


@pytest.mark.timeout(120)
def test_no_rank_outlives_a_killed_zygote(driver):
    read, write = os.pipe()
    zygote = subprocess.Popen(
        [sys.executable, "-m", "commgraph.runtime.zygote", str(write), "2", "zygote_driver", "sleep"],
        pass_fds=(write,),
        env={**os.environ, "WORLD_SIZE": "2"},
        stdout=subprocess.DEVNULL,
    )
    os.close(write)
    reports = os.fdopen(read)
    pids = [int(reports.readline().split()[2]) for _ in range(2)]
    zygote.send_signal(signal.SIGKILL)
    zygote.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


FORKED = """
import sys
from commgraph.runtime import launch_local
from commgraph.runtime.zygote import ForkedZygote
zygote = ForkedZygote.fork()
assert zygote is not None, "a fresh process runs no other thread"
code = launch_local(["ok"], 2, grace=10, module="zygote_driver", zygote=zygote)
unused = ForkedZygote.fork()
unused.discard()
print("result", code, zygote.returncode, unused.returncode is not None, unused.pid, flush=True)
"""


@pytest.mark.timeout(120)
def test_a_zygote_forked_from_the_launcher_runs_the_job_or_exits_unused(driver):
    """In a fresh process, as the launcher forks it (a process with threads gets no forked zygote)."""
    done = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr
    assert sorted(line[1] for line in _reports(driver)) == ["0", "1"]
    result = next(line.split() for line in done.stdout.splitlines() if line.startswith("result"))
    assert result[1:4] == ["0", "0", "True"] and not _alive(int(result[4]))


def test_a_job_of_one_rank_runs_in_the_launchers_process_and_leaves_it_as_it_was(capfd):
    """Nothing forks for a job of one rank: the command's entry runs here with rank 0's
    environment and threads, which are put back after; its exit code comes back as a forked rank's."""
    import torch

    from commgraph.runtime.launch import HERE_ENV

    seen = {}

    def entry(argv: list[str]) -> int:
        seen.update(pid=os.getpid(), argv=argv, threads=torch.get_num_threads())
        seen.update({name: os.environ[name] for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", HERE_ENV)})
        return 3

    environ, threads = dict(os.environ), torch.get_num_threads()
    assert launch_local(["train", "SET"], 1, threads_per_worker=threads + 1, fresh=False, here=entry) == 1
    assert seen == {
        "pid": os.getpid(),
        "argv": ["train", "SET"],
        "threads": threads + 1,
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        HERE_ENV: "1",
    }
    assert dict(os.environ) == environ and torch.get_num_threads() == threads
    assert "commgraph: error: worker rank 0 exited with code 3; the job stopped" in capfd.readouterr().err
    assert launch_local(["train", "SET"], 1, fresh=False, here=lambda argv: 0) == 0
