"""Host-resident features against PyTorch's own path and GPU-resident features (issue 19; PyTorch-Direct).

Needs a CUDA GPU (without one it says so in one line and exits 2). ``--run`` picks the stages:

``sweep``: for every row size (default 256 B to 8 KB in powers of two, and the paper's Figure 7
sweep, 2,048 to 2,076 B in 4-byte steps) a float32 table of ``--table-gb`` in host memory and
``--gather-mb`` of random rows per gather; median and spread (min-max) over ``--repeats`` gathers,
after one warm-up, of:
  - ``staged``: PyTorch's own path, the baseline (``FeatureStore(..., zero_copy=False)``: the CPU
    gathers the rows into a pinned buffer, which is copied to the GPU with ``non_blocking``; the
    row ids are on the CPU, where that path wants them);
  - ``zero-copy``: ``FeatureStore(..., "host")``: the table pinned in place, the Triton gather run
    by the GPU on host memory, circular shift where the width needs it (row ids on the GPU);
  - ``naive``: the same kernel without the shift (the paper's "PyD Naive");
  - ``copy``: a pinned host-to-device copy of the gathered bytes (the PCIe ceiling).
  Targets: zero-copy at least 1.6x faster than staged on average; with the shift, the unaligned
  widths within 10% of the 2,048 B time; at 2 KB rows at least 85% of the copy's bandwidth.

``crossover``: ChattyGraph's per-message choice between a zero-copy read and a staged copy, on this
GPU's host link: messages of ChattyGraph's sizes (4 KB to 16 MB) made of random ``--crossover-row``
byte rows of a 1 GB host table, each moved by ``zero-copy`` and by ``staged`` (median of
``--repeats``). The measured crossover (the smallest size from which staging wins) is printed beside
the planner's (:data:`commgraph.plan.methods.METHODS`, priced on a route of the measured pinned copy's
bandwidth).

``pin``: writes a ``--pin-gb`` float32 ``.npy`` table to ``--scratch`` (in chunks: this process
never holds it), then a fresh process pins it for zero-copy reads (``FeatureStore.create(np.load(
path, mmap_mode="r"), cuda, "host")``) and reports the peak resident memory that added
(:mod:`commgraph.runtime.table_memory`). Target: at most 1.1x the table. Reading the file also fills
the kernel's page cache, which is not the process's memory and is not counted.

``train``: full-graph GraphSAGE on one GPU (``commgraph train``, fresh processes) with ``--features
gpu`` and ``--features host`` on an RMAT graph whose table (``--width`` floats a node) takes
``--small-share`` of the GPU's memory: median step time (min-max) after two warm-up epochs, the
placement line the trainer printed, and the peak host memory of the run (launcher and worker
summed, each with its own ~0.6 GB of interpreter and libraries).

``big``: the same with ``--features host`` only, on an RMAT graph whose table takes
``--big-share`` (0.55) of the GPU's memory: nodes = ceil(share x GPU memory / (4 x width)), about
11.5M nodes and 47 GB on an 80 GB H100. Target: it runs, its step time against ``--features gpu``
on the graph that fits (per million nodes, as the graphs differ). The graph is generated and
partitioned (``commgraph partition make SPEC --parts 1``) into ``--scratch`` first unless it is there
already (``prepare`` does only that, and keeps it); ``big`` removes it afterwards unless ``--keep``.

The big graph's preparation alone takes minutes: ``commgraph partition make`` draws the table (rmat's
Gaussian features, on every core), checks and hashes the graph, and writes the part, hashing it as
it goes. On a shared 2-core Xeon VM a 0.82 GB table took 8.3-9.6 s and 1.95 GB of peak host memory
(before the parallel draw and the chunked part writer: 12.5, 34 and 50 s for 0.82, 2.6 and 4.1 GB,
about 2.1x the table in memory). Training it then hashes the set twice more (the launcher, the
worker), reads it and pins it. On a machine that limits a command to 10 minutes and keeps no files
from one command to the next, run:

    python benchmarks/feature_gather.py --quick                # ~3 min: every stage at small sizes,
                                     # then an estimate of the default big stage on this machine
    python benchmarks/feature_gather.py --run train,sweep,pin  # ~4 min: the gather, pinning and
                                     # graph-that-fits figures
    python benchmarks/feature_gather.py --run big              # the big graph, prepared and trained,
                                     # if the estimate says it fits in one command

Where ``--scratch`` persists between commands, ``--run prepare`` then ``--run big`` splits the big
stage in two. Every stage header says how far into the run it starts; lines are printed as they
are made, and a stage that fails says why and the next one runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from commgraph.errors import CommgraphError
from commgraph.graph.datasets import home
from commgraph.graph.nodefile import save_npy_in_chunks
from commgraph.runtime import gather_kernel, table_memory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gather_timing import StageFailed, crossover_stage, measure, report  # noqa: E402
from pss import process_tree  # noqa: E402

SIZES = [256, 512, 1024, 2048, 4096, 8192] + list(range(2052, 2077, 4))
STAGES = ("prepare", "big", "train", "sweep", "crossover", "pin")  # the order they run in
QUICK = {
    "table_gb": 1.0,
    "repeats": 3,
    "sizes": "256,2048,2052,8192",
    "pin_gb": 1.0,
    "small_share": 0.01,
    "big_share": 0.03,
    "epochs": 4,
}
WARM_UP_EPOCHS = 2
SCRATCH = home() / "feature-gather"
BIG_SHARE = 0.55  # of GPU memory: "features take more than half of GPU memory"


# -- pinning a large table ---------------------------------------------------------------------------


def write_table(path: Path, table_bytes: int, width: int) -> None:
    """A float32 ``[table_bytes // (4 width), width]`` ``.npy`` file written a chunk at a time (row r
    holds the value r), so the writer never holds the table."""
    save_npy_in_chunks(
        path,
        np.float32,
        (table_bytes // (4 * width), width),
        lambda start, stop: np.repeat(np.arange(start, stop, dtype=np.float32)[:, None], width, axis=1),
    )


def pin_stage(gigabytes: float, width: int, scratch: Path) -> None:
    table_bytes = int(gigabytes * 1e9)
    check_scratch(scratch, table_bytes)
    with tempfile.TemporaryDirectory(dir=scratch, prefix="pin-") as folder:
        path = Path(folder) / "table.npy"
        started = time.perf_counter()
        write_table(path, table_bytes, width)
        written = time.perf_counter() - started
        measured = table_memory.measure(path, "pin")
    print(
        f"pinning a {measured.table_bytes / 1e9:.1f} GB table (written in {written:.0f} s): peak RSS added "
        f"{measured.peak_added / 1e9:.2f} GB = {measured.ratio:.3f} x the table (target <= 1.10: "
        f"{'met' if measured.ratio <= 1.10 else 'missed'}; the page cache the file read fills is not counted)"
    )


# -- full-graph training -----------------------------------------------------------------------------


def table_nodes(gpu_bytes: int, share: float, width: int) -> int:
    """Nodes of a graph whose float32 ``width``-wide feature table takes ``share`` of ``gpu_bytes``."""
    return math.ceil(share * gpu_bytes / (4 * width))


def rmat_spec(nodes: int, width: int, degree: int) -> str:
    """An RMAT graph spec with ``nodes`` nodes of mean degree ``degree``, ``width`` random features and
    8 random classes (a throughput graph)."""
    return f"rmat:nodes={nodes},edges={nodes * degree // 2},features={width},classes=8"


@dataclass(frozen=True)
class Sampled:
    """A finished command: exit code, its stderr, wall seconds and the peak resident memory of it and
    its descendants together (sampled every 0.1 s)."""

    returncode: int
    stderr: str
    seconds: float
    peak_rss: int


def tree_rss(root: int) -> int:
    """Resident bytes of process ``root`` and all its descendants, from /proc."""
    total = 0
    for pid in process_tree(root):
        try:
            total += int((Path(f"/proc/{pid}/statm")).read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            pass  # gone meanwhile
    return total


def run_sampled(argv: list[str]) -> Sampled:
    """Run ``python -m commgraph ARGV``, sampling its memory while it runs."""
    with tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        job = subprocess.Popen([sys.executable, "-m", "commgraph", *argv], stdout=subprocess.DEVNULL, stderr=err)
        peak = 0
        while job.poll() is None:
            peak = max(peak, tree_rss(job.pid))
            time.sleep(0.1)
        seconds = time.perf_counter() - started
        err.seek(0)
        return Sampled(job.returncode, err.read(), seconds, peak)


@dataclass(frozen=True)
class SizedGraph:
    """A generated graph of the benchmark: its spec, nodes, features a node, and where its set goes."""

    spec: str
    nodes: int
    width: int
    folder: Path

    @property
    def table_bytes(self) -> int:
        return 4 * self.nodes * self.width

    @classmethod
    def sized(cls, share: float, gpu_bytes: int, width: int, degree: int, scratch: Path) -> SizedGraph:
        nodes = table_nodes(gpu_bytes, share, width)
        return cls(rmat_spec(nodes, width, degree), nodes, width, scratch / f"rmat-{nodes}-f{width}-d{degree}")

    def describe(self, gpu_bytes: int) -> str:
        return (
            f"{self.spec}: table {self.table_bytes / 1e9:.1f} GB = {self.table_bytes / gpu_bytes:.2f} of the "
            f"GPU's {gpu_bytes / 1e9:.1f} GB"
        )


@dataclass
class Costs:
    """Seconds that preparing a graph and training it with ``--features host`` took in this run, by
    table bytes: from two sizes, a straight-line estimate for another."""

    prepare: dict[int, float] = field(default_factory=dict)
    host_train: dict[int, float] = field(default_factory=dict)

    def estimate(self, table_bytes: int) -> str | None:
        parts = {}
        for name, seen in (("prepare", self.prepare), ("train", self.host_train)):
            if len(seen) < 2 or table_bytes in seen:
                return None
            slope, start = np.polyfit(list(seen), list(seen.values()), 1)
            parts[name] = start + slope * table_bytes
        total = sum(parts.values())
        return (
            " + ".join(f"{name} ~{seconds:.0f} s" for name, seconds in parts.items())
            + f" = ~{total:.0f} s ({'fits' if total < 540 else 'does not fit'} in a 10-minute command)"
        )


def prepare(graph: SizedGraph, costs: Costs) -> None:
    """The graph's 1-part partition set (``commgraph partition make``), made now unless it is there."""
    if (graph.folder / "manifest.json").is_file():
        print(f"prepared set {graph.folder} is there already: reused")
        return
    check_scratch(graph.folder.parent, int(1.05 * graph.table_bytes))
    print(f"preparing {graph.spec} ({graph.table_bytes / 1e9:.1f} GB table; about 11 s per GB on a 2-core VM) ...")
    done = run_sampled(
        ["partition", "make", graph.spec, "--parts", "1", "--out", str(graph.folder), "--force", "--json"]
    )
    if done.returncode != 0:
        raise StageFailed(
            f"commgraph partition make {graph.spec} failed after {done.seconds:.0f} s, peak host RSS "
            f"{done.peak_rss / 1e9:.1f} GB: {tail(done.stderr)}"
        )
    print(
        f"prepared {graph.spec} -> {graph.folder}: {done.seconds:.0f} s, peak host RSS "
        f"{done.peak_rss / 1e9:.1f} GB = {done.peak_rss / graph.table_bytes:.2f} x the "
        f"{graph.table_bytes / 1e9:.1f} GB table"
    )
    costs.prepare[graph.table_bytes] = done.seconds


@dataclass(frozen=True)
class TrainRun:
    """Step times (seconds, epochs after the warm-up), the trainer's ``features:`` line, and the run."""

    steps: list[float]
    placement: str
    run: Sampled

    def line(self, table_bytes: int) -> str:
        return (
            f"step {np.median(self.steps) * 1e3:.1f} ms ({min(self.steps) * 1e3:.1f}-{max(self.steps) * 1e3:.1f}), "
            f"run {self.run.seconds:.0f} s, peak host RSS {self.run.peak_rss / 1e9:.1f} GB "
            f"= {self.run.peak_rss / table_bytes:.2f} x the table\n      {self.placement}"
        )


def train(folder: Path, features: str, epochs: int) -> TrainRun:
    """Full-graph GraphSAGE on one GPU on the partition set ``folder`` with ``--features features``."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "m.jsonl"
        done = run_sampled(
            [
                "train",
                str(folder),
                "--workers",
                "1",
                "--device",
                "cuda",
                "--model",
                "sage",
                "--features",
                features,
                "--epochs",
                str(epochs),
                "--eval-every",
                str(epochs),
                "--timeout",
                "600",
                "--metrics-out",
                str(metrics),
            ]
        )
        said = [
            line.removeprefix("commgraph: ")
            for line in done.stderr.splitlines()
            if line.startswith("commgraph: features:")
        ]
        placement = said[0] if said else "no features line printed"
        if done.returncode != 0:
            why = "out of GPU memory" if "out of memory" in done.stderr.lower() else f"exit {done.returncode}"
            raise StageFailed(
                f"training {folder.name} with --features {features}: {why} after {done.seconds:.0f} s, "
                f"peak host RSS {done.peak_rss / 1e9:.1f} GB; {placement}; {tail(done.stderr)}"
            )
        seconds = [json.loads(line)["epoch_seconds"] for line in metrics.read_text().splitlines()]
    return TrainRun(seconds[WARM_UP_EPOCHS:], placement, done)


def per_million(run: TrainRun, nodes: int) -> float:
    return float(np.median(run.steps)) * 1e3 / (nodes / 1e6)


def tail(stderr: str, lines: int = 3) -> str:
    """The last lines of a failed command's stderr, on one line."""
    return " | ".join(line.strip() for line in stderr.strip().splitlines()[-lines:])


def big_stage(big: SizedGraph, gpu_bytes: int, epochs: int, keep: bool, costs: Costs) -> float:
    """``--features host`` on the graph that does not fit; returns its ms per step per million nodes."""
    prepare(big, costs)
    print(
        f"graph whose features take {big.table_bytes / gpu_bytes:.0%} of GPU memory "
        f"(target: more than half), {big.describe(gpu_bytes)}"
    )
    try:
        run = train(big.folder, "host", epochs)
    finally:
        if not keep:  # a failed run too: the later stages need the disk
            shutil.rmtree(big.folder)
    costs.host_train[big.table_bytes] = run.run.seconds
    print(f"  --features host: {run.line(big.table_bytes)}")
    print(
        f"full-graph GraphSAGE with --features host on a graph whose features take more than half of GPU "
        f"memory: runs ({'met' if big.table_bytes > gpu_bytes / 2 else 'missed: the graph is not that large'})"
    )
    return per_million(run, big.nodes)


def train_stage(
    small: SizedGraph, gpu_bytes: int, epochs: int, keep: bool, big_per_million: float | None, costs: Costs
) -> None:
    """Both placements on the graph that fits, and the big graph's host step against the gpu one."""
    prepare(small, costs)
    print(f"graph that fits, {small.describe(gpu_bytes)}")
    runs = {}
    try:
        for features in ("gpu", "host"):
            runs[features] = train(small.folder, features, epochs)
            print(f"  --features {features:<4}: {runs[features].line(small.table_bytes)}")
    finally:
        if not keep:
            shutil.rmtree(small.folder)
    costs.host_train[small.table_bytes] = runs["host"].run.seconds
    ratio = np.median(runs["host"].steps) / np.median(runs["gpu"].steps)
    print(f"  host / gpu step time on the graph that fits: {ratio:.2f}x")
    if big_per_million is not None:
        gpu = per_million(runs["gpu"], small.nodes)
        print(
            f"step per million nodes: {big_per_million:.1f} ms with --features host on the big graph against "
            f"{gpu:.1f} ms with --features gpu on the graph that fits ({big_per_million / gpu:.2f}x)"
        )


def check_scratch(folder: Path, needed: int) -> None:
    """Refuse to write ``needed`` bytes to ``folder`` unless it is on a disk with that much room."""
    folder.mkdir(parents=True, exist_ok=True)
    kind = filesystem(folder)
    if kind in ("tmpfs", "ramfs"):
        raise StageFailed(
            f"{folder} is on {kind} (memory), which would hold the table a further time; pass --scratch on a disk"
        )
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise StageFailed(
            f"{folder} has {free / 1e9:.1f} GB free, this stage writes "
            f"{needed / 1e9:.1f} GB; free some or pass --scratch elsewhere"
        )


def filesystem(path: Path) -> str:
    """The type of the filesystem ``path`` lies on, from /proc/mounts (the longest mount point)."""
    resolved, best, kind = str(path.resolve()), "", "unknown"
    for line in Path("/proc/mounts").read_text().splitlines():
        _, point, fstype, *_ = line.split()
        if (resolved == point or resolved.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
            best, kind = point, fstype
    return kind


USAGE = __doc__[__doc__.index("The big graph's preparation") :]


class Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown, the epilog as written."""


# -- the command -------------------------------------------------------------------------------------


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=USAGE, formatter_class=Formatter)
    parser.add_argument(
        "--run", default="big,train,sweep,crossover,pin", help=f"stages, comma-separated, of {', '.join(STAGES)}"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke test of every stage: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in QUICK.items()),
    )
    parser.add_argument("--table-gb", type=float, default=4.0, help="sweep: host feature table per row size (GB)")
    parser.add_argument("--gather-mb", type=float, default=256.0, help="sweep: bytes gathered per call (MB)")
    parser.add_argument("--repeats", type=int, default=10, help="sweep: timed gathers per method and size")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="sweep: row sizes in bytes, multiples of 4")
    parser.add_argument("--crossover-row", type=int, default=1024, help="crossover: bytes per row of a message")
    parser.add_argument("--pin-gb", type=float, default=10.0, help="pin: the table's size (GB); 0 skips the stage")
    parser.add_argument("--width", type=int, default=1024, help="train, big: features (float32) per node")
    parser.add_argument("--degree", type=int, default=10, help="train, big: mean degree of the RMAT graphs")
    parser.add_argument(
        "--small-share", type=float, default=0.05, help="train: the graph that fits, its table as a share of GPU memory"
    )
    parser.add_argument("--big-share", type=float, default=BIG_SHARE, help="big: its table as a share of GPU memory")
    parser.add_argument(
        "--epochs", type=int, default=6, help=f"train, big: epochs per run, the first {WARM_UP_EPOCHS} not timed"
    )
    parser.add_argument(
        "--scratch", type=Path, default=SCRATCH, help="where tables and partition sets are written (a disk, not tmpfs)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the partition sets made (train, big)")
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    stages = [stage for stage in args.run.split(",") if stage]
    unknown = sorted(set(stages) - set(STAGES))
    if unknown or not stages:
        parser.error(f"--run takes stages of {', '.join(STAGES)}; got {args.run!r}")
    if args.epochs <= WARM_UP_EPOCHS:
        parser.error(f"--epochs must be more than the {WARM_UP_EPOCHS} warm-up epochs")
    args.stages = stages
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not torch.cuda.is_available():
        print("feature_gather: needs a CUDA GPU and torch sees none; nothing measured", file=sys.stderr)
        return 2
    if not gather_kernel.available():
        print("feature_gather: needs Triton (it ships with torch's Linux wheels); nothing measured", file=sys.stderr)
        return 2
    sys.stdout.reconfigure(line_buffering=True)  # every line out at once, should a time limit cut the run
    device = torch.device("cuda")
    gpu_bytes = torch.cuda.get_device_properties(device).total_memory
    print(
        f"# {torch.cuda.get_device_name(device)} ({gpu_bytes / 1e9:.1f} GB), torch {torch.__version__}, "
        f"stages {','.join(args.stages)}"
    )
    small = SizedGraph.sized(args.small_share, gpu_bytes, args.width, args.degree, args.scratch)
    big = SizedGraph.sized(args.big_share, gpu_bytes, args.width, args.degree, args.scratch)
    started = time.perf_counter()
    big_per_million, failed, costs = None, [], Costs()
    for stage in STAGES:  # big before train, so that its set leaves the disk before the others are written
        if stage not in args.stages or (stage == "pin" and args.pin_gb <= 0):
            continue
        print(f"## {stage} (at {time.perf_counter() - started:.0f} s)")
        try:
            if stage == "prepare":
                prepare(big, costs)
            elif stage == "big":
                big_per_million = big_stage(big, gpu_bytes, args.epochs, args.keep, costs)
            elif stage == "train":
                train_stage(small, gpu_bytes, args.epochs, args.keep, big_per_million, costs)
            elif stage == "sweep":
                print(f"table {args.table_gb} GB, {args.gather_mb} MB per gather, median (min-max) of {args.repeats}")
                report(
                    [
                        measure(size, int(args.table_gb * 1e9), int(args.gather_mb * 1e6), args.repeats, device)
                        for size in sorted({int(s) for s in args.sizes.split(",")})
                    ]
                )
            elif stage == "crossover":
                crossover_stage(args.crossover_row, args.repeats, device)
            else:
                pin_stage(args.pin_gb, args.width, args.scratch)
        except (StageFailed, CommgraphError) as error:
            print(f"## {stage} failed: {error}")
            failed.append(stage)
        except Exception:  # a bug or a CUDA error: its traceback, and the other stages still run
            print(f"## {stage} failed:\n{traceback.format_exc()}")
            failed.append(stage)
    default_big = SizedGraph.sized(BIG_SHARE, gpu_bytes, args.width, args.degree, args.scratch)
    estimate = costs.estimate(default_big.table_bytes)
    if estimate:
        print(
            f"the default big stage ({default_big.table_bytes / 1e9:.1f} GB table) on this machine, estimated "
            f"from this run's graphs: {estimate}"
        )
    print(f"## done (at {time.perf_counter() - started:.0f} s)" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
