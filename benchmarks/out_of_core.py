"""Training a graph larger than its memory budget (issue 54): papers100M's shape under a cgroup cap.

In the scratch folder ``--work`` the benchmark:

1. **sets up** a ``papers-shaped:nodes=N`` graph (:mod:`commgraph.graph.papers`, 128 float16
   features) as a ``--method chunk`` partition set per worker count (``--feature-dtype float16``),
   written straight from the generator (:mod:`commgraph.partition.streamed`: no graph file), ``nice
   -n 19`` (it is disk-bound), each command inside a memory cgroup of ``--budget`` bytes: the
   set-up seconds, the sets' bytes on disk against the budget, and the cgroup's peak. One worker
   count at a time, its sets are made, trained on and deleted, so the disk holds one full-size set
   and one slice at most; before the full-size set is written its bytes are estimated from its
   slice's (bytes a node, times the nodes) and refused, in one line, if they do not fit the free
   disk less a :data:`MARGIN`;
2. **trains under the cap**: ``commgraph train SET --workers W --memory-budget B`` with GraphSAGE,
   ``--layers 3 --hidden 256 --fanout 15,10,5 --batch-size 1024``, one epoch of ``--steps`` steps
   and the sampled evaluation after it, its process tree inside a cgroup v1 of the same limit made
   here (the launcher's own cap is a child of it), after the sets' pages are dropped from the page
   cache (``posix_fadvise(DONTNEED)`` on their files: every row the cache misses comes from disk);
3. **trains in memory** the same job, the same per-step work, on a slice that fits
   (``papers-shaped:nodes=--slice-nodes``), without a budget.

Per run it prints seeds per second (``W * batch`` over the measured step seconds of the
``--metrics-out`` record), the bytes the workers read from storage (``/proc/PID/io`` read_bytes,
``cache_disk_bytes``) against the feature bytes the cache missed (``cache_missed_bytes``), the
cgroup's peak (``memory.max_usage_in_bytes``: page cache included), its ``failcnt`` (the limit hit
and reclaimed), its OOM kills (``oom_kill`` of ``memory.oom_control``) and its swap, and the
1-minute load before and after. The closing lines give the targets' ratios: seeds per second under
the cap over the in-memory slice's (>= 0.5) and disk bytes over missed bytes (<= 1.5).

With ``--lock FILE`` every training run holds ``flock FILE`` (a machine shared by several
benchmark runners); the set-up does not.

    python benchmarks/out_of_core.py --work WORK [--nodes 53000000] [--slice-nodes 2000000]
        [--budget 8G] [--workers 1,4] [--steps 200] [--lock FILE] [--keep]

The default ``--nodes`` writes about 22 GB (1 part) to 27 GB (4 parts) of partition set, 2.6x to
3.2x an 8 GiB budget, one at a time. Needs root for the cgroups (cgroup v1's memory controller); the
scratch data is deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from commgraph.launch.cgroup import MemoryCap, cap_memory  # noqa: E402
from commgraph.units import size  # noqa: E402
from pss import GB, commgraph_argv, commgraph_env  # noqa: E402

MODEL = ["--layers", "3", "--hidden", "256", "--sampler", "neighbor", "--fanout", "15,10,5", "--batch-size", "1024"]
BATCH = 1024


@dataclass
class Capped:
    """A command run inside a memory cgroup of its own: its seconds and what the group saw."""

    seconds: float
    peak_bytes: int
    failcnt: int
    oom_kills: int
    swap_bytes: int
    load: tuple[float, float]
    returncode: int


def run_capped(argv: list[str], limit: int, env: dict, name: str) -> Capped:
    """``argv`` with its whole process tree inside a new memory cgroup of ``limit`` bytes."""
    cap = cap_memory(limit, f"commgraph-bench-{os.getpid()}-{name}")
    if not isinstance(cap, MemoryCap):
        raise SystemExit(f"out_of_core: no memory cgroup can be made here ({cap}); run it as root on cgroup v1 or v2")
    wrapped = ["sh", "-c", f'echo $$ > {cap.path / "cgroup.procs"} && exec "$@"', "sh", *argv]
    before = os.getloadavg()[0]
    started = time.perf_counter()
    try:
        returncode = subprocess.run(wrapped, env=env).returncode
        seconds = time.perf_counter() - started
        stats = _group_stats(cap)
    finally:
        cap.release()
    return Capped(seconds, *stats, (before, os.getloadavg()[0]), returncode)


def _group_stats(cap: MemoryCap) -> tuple[int, int, int, int]:
    """The group's peak bytes, limit hits, OOM kills and swap (cgroup v1 or v2)."""

    def read(name: str, default: str = "0") -> str:
        path = cap.path / name
        return path.read_text() if path.exists() else default

    def field(text: str, key: str) -> int:
        return next((int(line.split()[1]) for line in text.splitlines() if line.split()[:1] == [key]), 0)

    if cap.version == 2:
        events = read("memory.events", "")
        return (
            int(read("memory.peak")),
            field(events, "max"),
            field(events, "oom_kill"),
            int(read("memory.swap.current")),
        )
    peak = int(read("memory.max_usage_in_bytes"))
    swap = max(int(read("memory.memsw.max_usage_in_bytes", str(peak))) - peak, 0)
    return peak, int(read("memory.failcnt")), field(read("memory.oom_control", ""), "oom_kill"), swap


def drop_cached(folder: Path) -> None:
    """Drop ``folder``'s files from the page cache, so that what a run reads comes from disk."""
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


MARGIN = 10 * GB  # free disk left beside the largest set


def set_up(args, spec: str, parts: int, out: Path, env: dict) -> Capped:
    argv = ["nice", "-n", "19"] + commgraph_argv(
        args.python,
        ["partition", "make", spec, "--parts", str(parts), "--method", "chunk", "--feature-dtype", "float16"]
        + ["--out", str(out), "--force"],
    )
    run = run_capped(argv, args.budget, env, f"setup-{out.name}")
    if run.returncode:
        raise SystemExit(f"out_of_core: partition make {spec} failed (exit {run.returncode})")
    return run


def check_room(work: Path, slice_set: Path, args) -> int:
    """The full-size set's bytes, estimated from its slice's bytes a node; refused in one line when
    they do not fit the free disk less :data:`MARGIN`."""
    estimate = int(folder_bytes(slice_set) / args.slice_nodes * args.nodes)
    free = shutil.disk_usage(work).free
    if estimate > free - MARGIN:
        raise SystemExit(
            f"out_of_core: a {args.nodes:,}-node set takes about {estimate / GB:.1f} GB; {work} has "
            f"{free / GB:.1f} GB free, {MARGIN / GB:.0f} GB of which stay free: free some disk or pass fewer --nodes"
        )
    return estimate


def train(args, partdir: Path, workers: int, budget: int | None, env: dict, tag: str) -> tuple[Capped, dict]:
    metrics = args.work / f"{tag}.jsonl"
    options = ["train", str(partdir), "--workers", str(workers), *MODEL, "--epochs", "1"]
    options += ["--steps-per-epoch", str(args.steps), "--metrics-out", str(metrics), "--force", "--quiet"]
    options += ["--timeout", "1800"] + ([] if budget is None else ["--memory-budget", str(budget)])
    argv = (["flock", str(args.lock)] if args.lock else []) + commgraph_argv(args.python, options)
    drop_cached(partdir)
    run = run_capped(argv, budget or args.machine, env, tag)
    if run.returncode:
        raise SystemExit(f"out_of_core: {tag} failed (exit {run.returncode})")
    return run, json.loads(metrics.read_text().splitlines()[-1])


def row(tag: str, run: Capped, record: dict, workers: int) -> dict:
    step = record["measured_step_seconds"]
    return {
        "run": tag,
        "seeds_per_s": workers * BATCH / step,
        "step_ms": 1e3 * step,
        "disk_gb": (record["cache_disk_bytes"] or 0) / GB,
        "missed_gb": (record["cache_missed_bytes"] or 0) / GB,
        "peak_gb": run.peak_bytes / GB,
        "failcnt": run.failcnt,
        "oom_kills": run.oom_kills,
        "swap_gb": run.swap_bytes / GB,
        "val_acc": record["val_acc"],
        "seconds": run.seconds,
        "load": f"{run.load[0]:.2f}->{run.load[1]:.2f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="scratch folder (deleted after, unless --keep)")
    parser.add_argument("--nodes", type=int, default=53_000_000, help="the capped graph's nodes (about 20 GB of set)")
    parser.add_argument("--slice-nodes", type=int, default=2_000_000, help="the in-memory slice's nodes")
    parser.add_argument("--budget", type=size, default=8 << 30, help="the memory budget (K/M/G suffixes)")
    parser.add_argument("--workers", default="1,4", help="worker counts, comma-separated")
    parser.add_argument("--steps", type=int, default=200, help="training steps of each run")
    parser.add_argument("--lock", type=Path, default=None, help="hold flock FILE around each training run")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args()
    args.machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    args.work.mkdir(parents=True, exist_ok=True)
    env = {**commgraph_env(), "COMMGRAPH_HOME": str(args.work / "home")}
    counts = [int(w) for w in args.workers.split(",")]
    setup_seconds, setup_peak, set_bytes, rows = 0.0, 0, 0, []
    try:
        for workers in counts:
            capped, inside = args.work / f"papers-{workers}", args.work / f"slice-{workers}"
            set_up(args, f"papers-shaped:nodes={args.slice_nodes},seed=0", workers, inside, env)
            estimate = check_room(args.work, inside, args)
            run = set_up(args, f"papers-shaped:nodes={args.nodes},seed=0", workers, capped, env)
            setup_seconds, setup_peak = setup_seconds + run.seconds, max(setup_peak, run.peak_bytes)
            set_bytes = max(set_bytes, folder_bytes(capped))
            print(
                f"set-up of {workers} part(s): {run.seconds / 60:.1f} min, cgroup peak {run.peak_bytes / GB:.2f} GB, "
                f"set {folder_bytes(capped) / GB:.2f} GB on disk (estimated {estimate / GB:.2f} GB)",
                flush=True,
            )
            run, record = train(args, capped, workers, args.budget, env, f"capped-{workers}")
            rows.append(row(f"capped-{workers}", run, record, workers))
            run, record = train(args, inside, workers, None, env, f"slice-{workers}")
            rows.append(row(f"slice-{workers}", run, record, workers))
            if not args.keep:
                shutil.rmtree(capped)
                shutil.rmtree(inside)
        print(
            f"set-up: {setup_seconds / 60:.1f} min (generate + partition, {', '.join(map(str, counts))} part(s)), "
            f"cgroup peak {setup_peak / GB:.2f} GB under {args.budget / GB:.2f} GB; "
            f"largest set {set_bytes / GB:.2f} GB on disk = {set_bytes / args.budget:.2f}x the budget"
        )
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
    keys = list(rows[0]) if rows else []
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values()))
    for workers in counts:
        capped = next(r for r in rows if r["run"] == f"capped-{workers}")
        memory = next(r for r in rows if r["run"] == f"slice-{workers}")
        ratio = capped["disk_gb"] / capped["missed_gb"] if capped["missed_gb"] else float("nan")
        speed = capped["seeds_per_s"] / memory["seeds_per_s"]
        print(
            f"{workers} worker(s): seeds/s under the cap / in memory {speed:.2f} "
            f"(target >= 0.5); disk bytes / missed bytes {ratio:.2f} (target <= 1.5); "
            f"OOM kills {capped['oom_kills']}, swap {capped['swap_gb']:.2f} GB"
        )


if __name__ == "__main__":
    main()
