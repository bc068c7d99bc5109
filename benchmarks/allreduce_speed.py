"""All-reduce throughput of the executed schedules against torch's own all_reduce (issue: executed
all-reduce schedules; target: lp at least 0.8x native).

Local Gloo workers (one thread each, reusing freed memory as the trainer's do) all-reduce one
float32 tensor of ``--mb`` MB, planned on ``localhost-cpu:N``: native (``dist.all_reduce``), then
ring, tree and lp run by ``runtime.allreduce.ScheduledAllReduce`` at each ``--chunk-kb``, all
interleaved within every repeat so that they see the same machine. A time is the slowest rank's,
from a barrier to its tensor holding the sum. Printed per method: median and range over the
repeats, throughput (data size / median time) and its ratio to native's, measured in the same run.
Every result is checked against native's sum (1e-6 relative).

    .venv/bin/python benchmarks/allreduce_speed.py \\
        [--workers 4] [--mb 100] [--repeats 5] [--chunk-kb 256,1024,4096] [--planners ring,tree,lp]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from commgraph.plan import make_allreduce
from commgraph.runtime import (
    Communicator,
    NativeAllReduce,
    ScheduledAllReduce,
    in_torchrun,
    join,
    keep_freed_memory,
    launch_local,
)
from commgraph.runtime.allreduce import CHUNK_BYTES
from commgraph.topology import load_preset


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--mb", type=float, default=100.0, help="tensor size in MB (1e6 bytes)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--chunk-kb",
        default=str(CHUNK_BYTES["gloo"] // 1024),
        help="comma-separated chunk sizes to try, in KiB (default: the executor's on Gloo)",
    )
    parser.add_argument("--planners", default="ring,tree,lp")
    parser.add_argument("--out", help=argparse.SUPPRESS)  # where rank 0 writes the times (workers only)
    return parser.parse_args()


@dataclass(frozen=True)
class Method:
    label: str
    planner: str  # or "native"
    chunk_bytes: int


def methods(args: argparse.Namespace) -> list[Method]:
    chunks = [int(float(kb) * 1024) for kb in args.chunk_kb.split(",")]
    result = [Method("native", "native", 0)]
    for planner in args.planners.split(","):
        sizes = chunks if planner != "ring" else chunks[:1]  # the ring sends whole segments: no chunks
        result += [
            Method(planner if len(sizes) == 1 else f"{planner}@{size // 1024}K", planner, size) for size in sizes
        ]
    return result


def worker(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    keep_freed_memory()  # as the trainer's workers do
    world = join(600, "cpu")
    comm = Communicator(world)
    topology = load_preset(f"localhost-cpu:{world.size}")
    devices = [d.id for d in topology.workers]
    numel = int(args.mb * 1e6) // 4
    runners = {}
    for method in methods(args):
        schedule = make_allreduce(method.planner, topology, numel * 4)
        runners[method.label] = (
            NativeAllReduce(comm)
            if schedule is None
            else ScheduledAllReduce(schedule, devices, comm, chunk_bytes=method.chunk_bytes)
        )
    data = torch.rand(numel, generator=torch.Generator().manual_seed(world.rank))
    want = data.clone()
    dist.all_reduce(want, group=world.grad_group)
    times: dict[str, list[float]] = {label: [] for label in runners}
    for _ in range(args.repeats + 1):  # the first round warms up (connections, allocations)
        for label, runner in runners.items():
            tensor = data.clone()
            comm.barrier()
            started = time.perf_counter()
            runner.start(tensor).wait()
            elapsed = torch.tensor([time.perf_counter() - started], dtype=torch.float64)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=world.grad_group)
            if not torch.allclose(tensor, want, rtol=1e-6, atol=0):
                raise SystemExit(f"allreduce_speed: {label} does not sum like native")
            times[label].append(float(elapsed))
    if world.is_leader:
        Path(args.out).write_text(json.dumps({label: t[1:] for label, t in times.items()}))
    world.close()


def launch(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "times.json"
        os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
        argv = [*sys.argv[1:], "--out", str(out)]
        if launch_local(argv, args.workers, grace=30, threads_per_worker=1, module="allreduce_speed") != 0:
            sys.exit("allreduce_speed: a worker failed")
        times = json.loads(out.read_text())
    gigabytes = args.mb / 1e3
    native = gigabytes / statistics.median(times["native"])
    print(
        f"{args.workers} Gloo workers, {args.mb:g} MB float32, {args.repeats} repeats "
        f"(time: median [min-max] of the slowest rank)"
    )
    print(f"{'method':>12} {'median s':>9} {'range s':>17} {'GB/s':>7} {'vs native':>9}")
    for label, samples in times.items():
        median = statistics.median(samples)
        print(
            f"{label:>12} {median:9.3f} {min(samples):8.3f}-{max(samples):<8.3f} {gigabytes / median:7.3f} "
            f"{gigabytes / median / native:8.2f}x"
        )


if __name__ == "__main__":
    arguments = parse()
    if in_torchrun():
        worker(arguments)
    else:
        launch(arguments)
