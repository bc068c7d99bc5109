"""Fault injection: bad input and damaged files against every surface of the CLI, and kills of a
running job's processes.

``ROWS`` is the table: (command, damage, expected first line). Each row damages a scratch folder
(a file where a folder is asked, a truncated mask file, a hand-edited manifest, ...), runs the
command in this process and expects what the project promises for bad input: exit 2, one line on
stderr that starts ``commgraph: error:`` and names the fault, nothing on stdout, nothing written.
A new surface joins the suite by adding a row. The kill tests run real jobs under timeouts: a
killed worker stops the job within two seconds, no process of it outlives it, a killed explainer
is named, and the survivors name only the rank that died.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from commgraph.atomic import atomic_write
from commgraph.cli.main import main
from commgraph.topology import resolve_topology, write_yaml
from deadlines import scaled, wait_until
from procs import alive, descendants, processes

GRAPH = "sbm:nodes=300,classes=3,features=8,seed=1"


@pytest.fixture(scope="module")
def pset(tmp_path_factory) -> Path:
    """A 2-part partition set of a small graph with features and labels."""
    out = tmp_path_factory.mktemp("faults") / "set"
    assert main(["partition", "make", GRAPH, "--parts", "2", "--out", str(out), "--json"]) == 0
    return out


@dataclass(frozen=True)
class Row:
    """``argv`` with ``{tmp}`` (the scratch folder) and ``{set}`` (the partition set) filled in,
    ``damage`` preparing the scratch folder first, and the text the one error line must hold."""

    name: str
    argv: str
    expect: str
    damage: Callable[[Path, Path], None] = lambda tmp, pset: None


def _file(name: str, data: bytes = b"x") -> Callable[[Path, Path], None]:
    return lambda tmp, pset: (tmp / name).write_bytes(data)


def _folder(name: str) -> Callable[[Path, Path], None]:
    return lambda tmp, pset: (tmp / name).mkdir()


def _masks(kind: str) -> Callable[[Path, Path], None]:
    def damage(tmp: Path, pset: Path) -> None:
        good = tmp / "good.npz"
        np.savez(good, format=np.array("commgraph-dgs-masks/1"), node_prob=np.zeros((2, 300), np.float32))
        data = good.read_bytes()
        good.unlink()
        if kind == "npy":
            with open(tmp / "m", "wb") as handle:
                np.save(handle, np.zeros(3))
            return
        (tmp / "m").write_bytes(
            {
                "empty": b"",
                "truncated": data[: len(data) // 2],
                "text": b"node,prob\n1,0.5\n",
                "corrupt": data[:100] + bytes(200) + data[300:],
            }[kind]
        )

    return damage


def _manifest(change: Callable[[dict], object]) -> Callable[[Path, Path], None]:
    def damage(tmp: Path, pset: Path) -> None:
        shutil.copytree(pset, tmp / "set")
        manifest = json.loads((tmp / "set" / "manifest.json").read_text())
        (tmp / "set" / "manifest.json").write_text(json.dumps(change(manifest)))

    return damage


CHAIN = """name: chain
devices: [{id: gpu0, kind: gpu}, {id: gpu1, kind: gpu}, {id: gpu2, kind: gpu}]
links:
- {a: gpu0, b: gpu1, kind: nvlink, bandwidth_gbps: 25}
- {a: gpu1, b: gpu2, kind: nvlink, bandwidth_gbps: 25}
"""
DAG = '{"tasks": [{"id": "c", "type": "compute", "device": "gpu0", "seconds": 0.1}]}'
MULTIPATH = "sim multipath simulate --topology dgx1-v100 --workload poisson:load=0.5,types=cpu0:gpu0"

ROWS = [
    # a dry run is refused as the run would be
    # refused before partitioning: no cache entry is written (the test checks nothing was)
    Row(
        "topology-too-small",
        f"train {GRAPH} --workers 2 --topology leo-fnic",
        "2 workers but topology 'leo-fnic' has only 1 worker devices: pass --workers 1",
    ),
    Row("dry-run-workers", "train {set} --workers 3 --dry-run", "{set} has 2 parts; pass --workers 2"),
    # 1: a CPU budget that is not finite hung the job (each explainer died of it)
    Row(
        "explain-cpu-inf",
        f"train {GRAPH} --sampler dgs --explain-cpu inf --dgs-wait --timeout 20",
        "--explain-cpu must be a finite number; got inf",
    ),
    Row("timeout-inf", f"train {GRAPH} --timeout inf", "--timeout must be a finite number"),
    # 4: output paths, checked before any work
    Row(
        "convert-out-folder", "graph convert cora --out {tmp}/d.npz", "--out {tmp}/d.npz is a folder", _folder("d.npz")
    ),
    Row(
        "partition-out-file", f"partition make {GRAPH} --parts 2 --out {{tmp}}/f", "--out {tmp}/f is a file", _file("f")
    ),
    Row("topo-png-folder", "topo show --topology dgx1-v100 --png {tmp}", "--png {tmp} is a folder"),
    Row(
        "topo-out-under-file",
        "topo detect --from-file {tmp}/f --out {tmp}/f/t.yaml",
        "{tmp}/f is a file, not a folder",
        _file("f"),
    ),
    Row(
        "plan-out-under-file",
        "plan allgather {set} --topology localhost-cpu:2 --feature-dim 8 --planner p2p --out {tmp}/f/p.json",
        "--out {tmp}/f/p.json: {tmp}/f is a file",
        _file("f"),
    ),
    Row("plan-png-folder", "plan allreduce --topology dgx1-v100 --png {tmp}", "--png {tmp} is a folder"),
    Row(
        "dag-png-folder",
        "sim dag {tmp}/dag.json --topology dgx1-v100 --png {tmp}",
        "--png {tmp} is a folder",
        _file("dag.json", DAG.encode()),
    ),
    Row(
        "llm-trace-folder",
        "sim llm --model gpt3-13b --topology 2xdgx1-v100-ib --trace {tmp}",
        "--trace {tmp} is a folder",
    ),
    Row(
        "llm-png-under-file",
        "sim llm --model gpt3-13b --topology 2xdgx1-v100-ib --png {tmp}/f/t.png",
        "{tmp}/f is a file, not a folder",
        _file("f"),
    ),
    Row("multipath-png-folder", f"{MULTIPATH} --png {{tmp}}", "--png {tmp} is a folder"),
    Row("plot-png-under-file", "plot {tmp}/f --png {tmp}/f/x.png", "{tmp}/f is a file, not a folder", _file("f")),
    Row(
        "predict-out-folder",
        "predict cora --checkpoint-dir {tmp} --out {tmp}/p.npy",
        "--out {tmp}/p.npy is a folder",
        _folder("p.npy"),
    ),
    Row(
        "predict-out-exists",
        "predict cora --checkpoint-dir {tmp} --out {tmp}/p.npy",
        "--out {tmp}/p.npy already exists; pass --force",
        _file("p.npy"),
    ),
    Row(
        "analyze-out-folder",
        "analyze cora --algo bfs --out {tmp}/a.csv",
        "--out {tmp}/a.csv is a folder",
        _folder("a.csv"),
    ),
    Row("train-metrics-folder", f"train {GRAPH} --metrics-out {{tmp}}", "--metrics-out {tmp} is a folder"),
    Row(
        "train-predictions-folder",
        f"train {GRAPH} --predictions-out {{tmp}}/p.npy",
        "--predictions-out {tmp}/p.npy is a folder",
        _folder("p.npy"),
    ),
    Row(
        "train-masks-out-under-file",
        f"train {GRAPH} --sampler dgs --dgs-masks-out {{tmp}}/f/m.npz",
        "{tmp}/f is a file, not a folder",
        _file("f"),
    ),
    Row(
        "train-checkpoint-dir-file",
        f"train {GRAPH} --checkpoint-dir {{tmp}}/f",
        "--checkpoint-dir {tmp}/f is a file",
        _file("f"),
    ),
    # 5: mask files that are not mask files
    *[
        Row(
            f"masks-{kind}",
            "train {set} --sampler dgs --dgs-masks {tmp}/m --explain-cpu 0",
            f"--dgs-masks {{tmp}}/m is {why}",
            _masks(kind),
        )
        for kind, why in (
            ("empty", "empty, damaged"),
            ("truncated", "empty, damaged"),
            ("text", "empty, damaged"),
            ("corrupt", "truncated or damaged"),
            ("npy", "a single .npy array"),
        )
    ],
    # 6: a manifest that does not follow its schema
    Row(
        "manifest-null",
        "partition info {tmp}/set",
        "the manifest must be a JSON object, got null",
        _manifest(lambda m: None),
    ),
    Row(
        "manifest-parts",
        "partition info {tmp}/set",
        "parts is 5 but files lists part folders [0, 1]",
        _manifest(lambda m: {**m, "parts": 5}),
    ),
    Row(
        "manifest-nodes",
        "train {tmp}/set --workers 2",
        "graph.num_nodes must be a JSON integer >= 0, got 'x'",
        _manifest(lambda m: {**m, "graph": {**m["graph"], "num_nodes": "x"}}),
    ),
    # 7: more rails than NICs
    Row("rails-5", "topo show --topology 2xdgx1-v100-ib-rails5", "5 rails but a dgx1-v100 server has 4 NICs"),
    Row("rails-huge", "topo show --topology 2xdgx1-v100-ib-rails99999999999", "99999999999 rails"),
    # 8: a topology YAML that is not UTF-8
    Row(
        "yaml-not-utf8",
        "topo validate {tmp}/t.yaml",
        "{tmp}/t.yaml: not UTF-8 text",
        _file("t.yaml", b"name: x\n\xff\xfe\n"),
    ),
    Row("yaml-folder", "topo validate {tmp}", "{tmp}: cannot read it"),
    # 9: numbers that are not finite
    Row("jitter-inf", f"{MULTIPATH} --jitter-us inf,inf", "--jitter-us must have 0 <= LO <= HI, both finite"),
    Row(
        "kvs-acc-inf",
        "sim multipath simulate --topology dgx1-v100 --workload kvs:ycsb=c,load=1,acc_us=inf",
        "bad workload option 'acc_us=inf': must be a finite number",
    ),
    Row(
        "poisson-load-inf",
        "sim multipath simulate --topology dgx1-v100 --workload poisson:load=inf,types=cpu0:gpu0",
        "bad workload option 'load=inf'",
    ),
    Row("sweep-inf", f"{MULTIPATH} --sweep inf", "--sweep loads must be finite and > 0"),
    Row("bytes-inf", "plan allreduce --topology dgx1-v100 --bytes inf", "bad size 'inf': must be a finite number"),
    # 11: argparse's own errors, in the same one-line form
    Row("argparse-choice", "graph datasets download no-such-set", "invalid choice: 'no-such-set'"),
    Row(
        "argparse-int",
        "sim llm --model gpt3-13b --topology 2xdgx1-v100-ib --iterations 2.5",
        "argument --iterations: invalid int value: '2.5'",
    ),
    Row(
        "argparse-negative-size",
        "plan allreduce --topology dgx1-v100 --bytes -1G",
        "argument --bytes: expected one argument",
    ),
    # 12: sweep options without a sweep, and a sweep too large to run
    Row("seeds-without-sweep", f"{MULTIPATH} --seeds 3", "--seeds and --bound-us apply to a sweep"),
    Row("bound-without-sweep", f"{MULTIPATH} --bound-us 5", "--seeds and --bound-us apply to a sweep"),
    Row("sweep-huge", f"{MULTIPATH} --sweep 0.1:1e9:0.1", "makes 10,000,000,000 points; at most 1000"),
    # 15: GPUs that reach each other only through a GPU that does not forward
    Row(
        "validate-no-route",
        "topo validate {tmp}/chain.yaml",
        "no route from 'gpu0' to 'gpu2' in topology 'chain' (GPUs do not forward here",
        _file("chain.yaml", CHAIN.encode()),
    ),
    # issue 56, 6: inputs of the wrong kind; 5: a YAML syntax error on one line
    Row(
        "dag-binary",
        "sim dag {tmp}/d.json --topology dgx1-v100",
        "{tmp}/d.json: not UTF-8 text (byte 2); expected a JSON file",
        _file("d.json", b"{\n\xff\xfe\x00"),
    ),
    Row("dag-folder", "sim dag {tmp} --topology dgx1-v100", "{tmp}: Is a directory"),
    Row(
        "dag-bytes-inf",
        "sim dag {tmp}/d.json --topology dgx1-v100",
        "task 'x': bytes must be a finite number >= 0, got inf",
        _file("d.json", b'{"tasks": [{"id": "x", "type": "transfer", "src": "gpu0", "dst": "gpu1", "bytes": 1e400}]}'),
    ),
    Row(
        "yaml-syntax",
        "topo validate {tmp}/t.yaml",
        "{tmp}/t.yaml: not valid YAML at line 3, column 1: expected ',' or ']', but got '<scalar>'",
        _file("t.yaml", b"name: x\ndevices: [{id: a, kind: gpu}\nlinks: []\n"),
    ),
    # issue 56, 3: absurd sizes, priced before the work
    Row(
        "sbm-beyond-int64",
        "graph info sbm:nodes=1e20,classes=3,features=8",
        "sbm: nodes 100,000,000,000,000,000,000 is beyond int64's 9,223,372,036,854,775,807",
    ),
    Row(
        "sbm-beyond-memory",
        "graph info sbm:nodes=1e18,classes=3,features=8",
        "sbm with 1,000,000,000,000,000,000 nodes and about 5,000,000,000,000,000,000 edges needs about "
        "379,000,000,000.0 GB but",
    ),
    Row(
        "rmat-keys-beyond-int64",
        "graph info rmat:nodes=1e10,edges=1e6",
        "rmat: nodes x nodes (its edge keys) 100,000,000,000,000,000,000 is beyond int64's",
    ),
    Row(
        "train-epochs-beyond-int64",
        f"train {GRAPH} --epochs 1000000000000000000000 --timeout 20",
        "--epochs 1,000,000,000,000,000,000,000 is beyond int64's 9,223,372,036,854,775,807",
    ),
    Row(
        "llm-fattree-huge",
        "sim llm --model gpt3-13b --topology fattree:k=100000,server=hgx-h100",
        "fattree:k=100000,server=hgx-h100 (250,000,000,000,000 servers, 22,250,012,500,000,000 devices and links) "
        "needs about 13,350,007,500.0 GB but",
    ),
    Row(
        "llm-microbatches-huge",
        "sim llm --model gpt3-13b --topology 2xdgx1-v100-ib --microbatches 1000000000",
        "--microbatches 1000000000 x --iterations 1 (104,000,000,000 tasks, 104 per 1 micro-batch(es) and iteration)",
    ),
    Row(
        "plan-all-1000-servers",
        "plan allreduce --topology 1000xdgx1-v100-ib --planner all",
        "planning ring, ring1, tree, tree1, ps, lp over 8,000 workers would take about",
    ),
    Row(
        "plan-lp-past-the-cap",
        "plan allreduce --topology 256xhgx-h100-ib --planner lp --max-seconds 60",
        "planning lp over 2,048 workers would take about 606 s, more than --max-seconds 60: choose --planner",
    ),
    Row("plan-max-seconds-inf", "plan allreduce --topology dgx1-v100 --max-seconds inf", "--max-seconds must be"),
]


def _tree(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*")}


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "row",
    # a train row may reach the launcher, which forks its zygote before it reads the set and masks
    [pytest.param(row, id=row.name, marks=[pytest.mark.multiproc] * row.argv.startswith("train ")) for row in ROWS],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(row, pset, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))  # a partition cache would be written here
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    row.damage(scratch, pset)
    before = _tree(tmp_path)
    fill = {"tmp": str(scratch), "set": str(pset)}
    try:
        code = main(row.argv.format(**fill).split())
    except SystemExit as stopped:  # argparse
        code = stopped.code
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert (code, out) == (2, ""), (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("commgraph: error: "), err
    assert row.expect.format(**fill) in lines[0], lines[0]
    assert _tree(tmp_path) == before  # nothing written, not even a cache


# -- item 3: the YAML input sim llm's help offers -----------------------------------------------------


@pytest.mark.timeout(120)
def test_sim_llm_reads_a_topology_yaml(tmp_path, capsys):
    yaml_file = tmp_path / "t.yaml"
    write_yaml(resolve_topology("2xdgx1-v100-ib", speeds={"ib": 12.5}), yaml_file)
    assert (
        main(["sim", "llm", "--model", "gpt3-13b", "--topology", str(yaml_file), "--scheduler", "hermod", "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["schedulers"]["hermod"]["iteration_seconds"] > 0
    assert main(["sim", "llm", "--model", "gpt3-13b", "--topology", str(yaml_file), "--speeds", "nv2=40"]) == 2
    assert "edit the YAML file instead" in capsys.readouterr().err


# -- item 13: atomic writes ----------------------------------------------------------------------------


@pytest.mark.multiproc
def test_atomic_writes_follow_the_umask_and_clear_what_a_killed_writer_left(tmp_path):
    target = tmp_path / "checkpoint.pt"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".checkpoint.pt.{dead.stdout.strip()}.abc123.tmp"  # its writer was SIGKILLed
    stale.write_bytes(b"half")
    live = tmp_path / f".checkpoint.pt.{os.getpid()}.def456.tmp"  # a write still running here
    live.write_bytes(b"busy")
    old = os.umask(0o027)
    try:
        with atomic_write(target) as handle:
            handle.write(b"done")
    finally:
        os.umask(old)
    assert target.read_bytes() == b"done" and (target.stat().st_mode & 0o777) == 0o640
    assert not stale.exists() and live.exists()


# -- a full disk: one line naming the file and the bytes, earlier outputs intact, nothing left --------


def _on_a_small_disk(command: str, kib: int, folder: Path) -> subprocess.CompletedProcess:
    """Run ``command`` (a shell line) with a ``kib`` KiB tmpfs mounted on ``folder``, in a user and
    mount namespace of its own (no root needed where user namespaces are allowed)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare to mount a small tmpfs")
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not allowed here: {probe.stderr.decode().strip()}")
    folder.mkdir(exist_ok=True)
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size={kib}k tmpfs {folder} && {command}"],
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.multiproc
def test_a_full_disk_leaves_earlier_files_and_names_the_file_and_bytes(tmp_path):
    disk = tmp_path / "disk"
    script = textwrap.dedent(
        f"""
        import os
        from commgraph.atomic import append_text, atomic_write
        from commgraph.errors import OutputError
        disk = {str(disk)!r}

        def replace(name, data):
            with atomic_write(os.path.join(disk, name)) as handle:
                handle.write(data)

        replace("earlier.bin", b"e" * 1000)
        append_text(os.path.join(disk, "log.txt"), "line 1")
        for key, write, name, data in (
            ("A", replace, "earlier.bin", b"b" * 200_000),
            ("B", append_text, os.path.join(disk, "log.txt"), "y" * 200_000),
            ("C", append_text, os.path.join(disk, "new.txt"), "z" * 200_000),
        ):
            try:
                write(name, data)
            except OutputError as error:
                print(key, error)
        kept = open(os.path.join(disk, "log.txt")).read()
        print("files", sorted(os.listdir(disk)), os.path.getsize(os.path.join(disk, "earlier.bin")), kept)
        """
    )
    run = _on_a_small_disk(f"{sys.executable} -c {shlex.quote(script)}", 64, disk)
    assert run.returncode == 0, run.stderr
    out = run.stdout.splitlines()
    assert out[0].startswith(f"A no space left on the disk of {disk}/earlier.bin (") and "was left as it was" in out[0]
    assert out[1].startswith(f"B no space left on the disk of {disk}/log.txt (200,000 bytes to write, "), out[1]
    assert out[2].startswith(f"C no space left on the disk of {disk}/new.txt (200,000 bytes to write, "), out[2]
    assert out[3] == "files ['earlier.bin', 'log.txt'] 1000 line 1", out[3]  # no temp file, no new.txt


@pytest.mark.multiproc
@pytest.mark.slow
def test_training_onto_a_full_disk_stops_in_one_line_naming_the_file(pset, tmp_path):
    disk = tmp_path / "disk"
    command = shlex.join(
        [sys.executable, "-m", "commgraph", "train", str(pset), "--workers", "2", "--epochs", "3"]
        + ["--metrics-out", f"{disk}/m.jsonl", "--checkpoint-dir", f"{disk}/ckpt", "--quiet", "--threads", "1"]
    )
    run = _on_a_small_disk(command, 8, disk)
    assert run.returncode != 0
    assert f"no space left on the disk of {disk}/ckpt/checkpoint.pt (" in run.stderr, run.stderr
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr, run.stderr


@pytest.mark.multiproc
def test_a_partition_set_onto_a_full_disk_is_one_line_and_nothing_half_written(tmp_path):
    disk = tmp_path / "disk"
    argv = [sys.executable, "-m", "commgraph", "partition", "make", "cora", "--parts", "2", "--method", "chunk"]
    command = shlex.join([*argv, "--out", f"{disk}/set"]) + f"; echo exit $?; ls -A {disk}"
    run = _on_a_small_disk(command, 256, disk)
    assert run.returncode == 0, run.stderr
    error = run.stderr.strip().splitlines()[-1]  # the lines before it are the progress lines
    assert error.startswith(f"commgraph: error: no space left on the disk of {disk}/set (more than "), run.stderr
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    status, *left = run.stdout.splitlines()
    assert status != "exit 0" and left == [], run.stdout  # failed, and no set nor temporary folder left


# -- items 1, 2, 14, 16: kills of a running job --------------------------------------------------------


def _start(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "commgraph", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for(job: subprocess.Popen, found: Callable[[], int | None], seconds: float = 150) -> int:
    deadline = time.monotonic() + scaled(seconds)
    while (pid := found()) is None:
        assert job.poll() is None, job.communicate()
        assert time.monotonic() < deadline, "the job never got there"
        time.sleep(0.1)
    return pid


def _rank(job: subprocess.Popen, rank: int) -> int | None:
    return next((pid for pid, (_, name, _) in descendants(job.pid).items() if name == f"commgraph-r{rank}"), None)


def _explainer(job: subprocess.Popen, rank: int) -> int | None:
    below = descendants(job.pid)
    return next(
        (
            pid
            for pid, (parent, _, command) in below.items()
            if "multiprocessing.spawn" in command and below.get(parent, (0, ""))[1] == f"commgraph-r{rank}"
        ),
        None,
    )


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the job's processes through /proc")
def test_a_killed_dgs_worker_stops_the_job_in_2_s_naming_only_it_and_leaves_no_process(tmp_path):
    """Three DGS workers, each with its explainer process; rank 1 is SIGKILLed mid-training. The
    job must stop within 2 s (measured here with a margin for a loaded machine), the survivors must
    name rank 1 alone (not rank 0, which stopped because of it), and no process of the job, the
    explainers and their resource trackers included, may be alive 5 s after the launcher returns."""
    parts = tmp_path / "set3"
    assert main(["partition", "make", GRAPH, "--parts", "3", "--out", str(parts), "--json"]) == 0
    metrics = tmp_path / "m.jsonl"
    job = _start(
        "train",
        str(parts),
        "--workers",
        "3",
        "--epochs",
        "100000",
        "--sampler",
        "dgs",
        "--batch-size",
        "32",
        "--timeout",
        "60",
        "--quiet",
        "--metrics-out",
        str(metrics),
        "--threads",
        "1",
    )
    _wait_for(job, lambda: 1 if metrics.is_file() and len(metrics.read_text().splitlines()) >= 2 else None)
    _wait_for(job, lambda: _explainer(job, 1))
    everything = set(descendants(job.pid))
    os.kill(_rank(job, 1), signal.SIGKILL)
    killed = time.monotonic()
    _, err = job.communicate(timeout=60)
    took = time.monotonic() - killed
    assert job.returncode == 1 and "worker rank 1 was killed by SIGKILL" in err, err
    assert took < scaled(2.5), f"the job took {took:.2f} s to stop"
    assert "Warning" not in err and "leaked" not in err, err  # no resource tracker's nor import's warnings
    survivors = [line for line in err.splitlines() if "stopped:" in line]
    assert survivors and all("worker rank 1 " in line for line in survivors), err
    assert wait_until(lambda: not alive(everything), 5), [processes().get(pid) for pid in alive(everything)]


@pytest.mark.multiproc
@pytest.mark.slow
def test_a_successful_dgs_run_prints_no_warning(pset):
    """Each DGS explainer is a fresh interpreter that imports PyG: no import-time warning of it
    (``torch.jit.script`` is deprecated) reaches the user."""
    run = subprocess.run(
        [sys.executable, "-m", "commgraph", "train", str(pset), "--workers", "2", "--epochs", "2"]
        + ["--sampler", "dgs", "--batch-size", "32", "--quiet", "--threads", "1"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr
    assert "Warning" not in run.stderr and "warn(" not in run.stderr, run.stderr


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the job's processes through /proc")
def test_a_killed_explainer_during_dgs_wait_is_named_at_once(pset):
    """--dgs-wait with an explanation that would take hours: killing rank 1's explainer stops the
    job at once with its name, not at --timeout (and not blaming rank 0)."""
    job = _start(
        "train",
        str(pset),
        "--workers",
        "2",
        "--epochs",
        "5",
        "--sampler",
        "dgs",
        "--dgs-wait",
        "--explain-epochs",
        "100000000",
        "--explain-loss-threshold",
        "0",
        "--timeout",
        "100",
        "--quiet",
    )
    victim = _wait_for(job, lambda: _explainer(job, 1))
    everything = set(descendants(job.pid))
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    _, err = job.communicate(timeout=90)
    took = time.monotonic() - killed
    assert took < scaled(10), f"the job took {took:.2f} s to stop"
    assert f"rank 1: the DGS explainer process (pid {victim}) was killed by SIGKILL" in err, err
    assert "worker rank 1 exited with code 2" in err, err
    assert wait_until(lambda: not alive(everything), 5), [processes().get(pid) for pid in alive(everything)]


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the job's processes through /proc")
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_job_in_one_line_naming_the_last_checkpoint(how, pset, tmp_path):
    """SIGTERM to the launcher (``kill``, a scheduler's pre-emption) or SIGINT to its process group
    (Ctrl-C): one line saying how far the job got and that its last checkpoint is intact, no
    native trace from torch's store, exit 128 + the signal, every rank gone within 2 s and no
    process of the job 5 s later."""
    checkpoints = tmp_path / "ckpt"
    job = subprocess.Popen(
        [sys.executable, "-m", "commgraph", "train", str(pset), "--workers", "2", "--epochs", "100000"]
        + ["--checkpoint-dir", str(checkpoints), "--timeout", "60", "--quiet", "--threads", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a shell gives a foreground job
    )
    _wait_for(job, lambda: 1 if (checkpoints / "checkpoint.pt").is_file() else None)
    everything = set(descendants(job.pid))
    signum = signal.Signals[how]
    if signum == signal.SIGINT:
        os.killpg(job.pid, signum)
    else:
        os.kill(job.pid, signum)
    sent = time.monotonic()
    _, err = job.communicate(timeout=60)
    took = time.monotonic() - sent
    lines = err.splitlines()
    assert job.returncode == 128 + signum, err
    assert len(lines) == 1, err
    assert re.fullmatch(
        rf"commgraph: stopped by {how} after epoch \d+ of 100000; the last checkpoint, "
        rf"{re.escape(str(checkpoints / 'checkpoint.pt'))} \(epoch \d+\), is intact; every rank stopped",
        lines[0],
    ), lines[0]
    assert took < scaled(2.5), f"the job took {took:.2f} s to stop"
    assert wait_until(lambda: not alive(everything), 5), [processes().get(pid) for pid in alive(everything)]


def test_a_rank_that_stopped_because_of_another_is_not_named_dead():
    """Item 14: rank 0 exited because rank 1 died, so neither beats any more; rank 2 must name
    rank 1 alone (rank 0 said it stopped), not "worker rank 0, 1 died"."""
    import torch
    import torch.distributed as dist

    from commgraph.runtime.world import World

    store = dist.HashStore()
    stopped = World(rank=0, size=3, local_rank=0, device=torch.device("cpu"), backend="gloo", timeout=5.0, _store=store)
    stopped.report_stopped()
    survivor = World(
        rank=2, size=3, local_rank=2, device=torch.device("cpu"), backend="gloo", timeout=5.0, _store=store
    )
    failed = survivor.explain(ConnectionError("Connection reset by peer"))
    assert str(failed).startswith("worker rank 1 died (no heartbeat for 0.8 s)"), failed
    store.set("commgraph/failed/1", "was killed by SIGKILL")  # the launcher's word, when it has one
    assert str(survivor.explain(ConnectionError("reset"))) == "worker rank 1 failed: was killed by SIGKILL"
