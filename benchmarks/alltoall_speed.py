"""The matching all-to-all (``runtime.alltoall.MatchingAllToAll``, bvn and alg3) against torch's
all_to_all_single on local Gloo workers (issue: Hermod's matching-based all-to-all).

Every rank sends a skewed number of ``--row-kb`` rows to every other (Zipf(1.6)-distributed counts,
scaled so that a rank sends about ``--mb`` MB in all; the same matrix on every rank). Per repeat all
methods run in turn after a barrier; a time is the slowest rank's. Printed per method: median and
range over the repeats and the ratio of native's median to it, measured in the same run. Every
result is checked equal to native's.

    .venv/bin/python benchmarks/alltoall_speed.py [--workers 4] [--mb 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from commgraph.runtime import Communicator, in_torchrun, join, keep_freed_memory, launch_local
from commgraph.runtime.alltoall import MatchingAllToAll


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--mb", type=float, default=32.0, help="about how many MB a rank sends")
    parser.add_argument("--row-kb", type=float, default=16.0, help="size of one row (a token's hidden state)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    return parser.parse_args()


def counts(args: argparse.Namespace, n: int) -> np.ndarray:
    rng = np.random.default_rng(args.seed)
    skew = rng.zipf(1.6, size=(n, n)).clip(max=1000).astype(np.float64)
    rows_per_rank = args.mb * 1e3 / args.row_kb
    return np.rint(skew / skew.sum(axis=1, keepdims=True) * rows_per_rank).astype(np.int64)


def worker(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    keep_freed_memory()
    world = join(600, "cpu")
    comm = Communicator(world)
    n, rank = world.size, world.rank
    matrix = counts(args, n)
    width = int(args.row_kb * 1e3 / 4)
    data = torch.rand(int(matrix[rank].sum()), width, generator=torch.Generator().manual_seed(rank))
    received = int(matrix[:, rank].sum())

    def matching(method: str):
        exchange = MatchingAllToAll(comm, method)
        return lambda out: exchange(out, data, matrix)

    runners = {
        "native": lambda out: dist.all_to_all_single(
            out, data, matrix[:, rank].tolist(), matrix[rank].tolist(), group=world.grad_group
        ),
        **{method: matching(method) for method in ("bvn", "alg3")},
    }
    want = torch.empty(received, width)
    runners["native"](want)
    times: dict[str, list[float]] = {label: [] for label in runners}
    for _ in range(args.repeats + 1):  # the first round warms up
        for label, run in runners.items():
            out = torch.empty(received, width)
            comm.barrier()
            started = time.perf_counter()
            run(out)
            elapsed = torch.tensor([time.perf_counter() - started], dtype=torch.float64)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=world.grad_group)
            if not torch.equal(out, want):
                raise SystemExit(f"alltoall_speed: {label} differs from all_to_all_single")
            times[label].append(float(elapsed))
    if world.is_leader:
        phases = {m: len(MatchingAllToAll(comm, m).plan(matrix).weights) for m in ("bvn", "alg3")}
        Path(args.out).write_text(
            json.dumps(
                {
                    "times": {k: v[1:] for k, v in times.items()},
                    "phases": phases,
                    "bytes": float(matrix.sum() - np.trace(matrix)) * width * 4,
                }
            )
        )
    world.close()


def launch(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "times.json"
        os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
        if (
            launch_local(
                [*sys.argv[1:], "--out", str(out)],
                args.workers,
                grace=30,
                threads_per_worker=1,
                module="alltoall_speed",
            )
            != 0
        ):
            sys.exit("alltoall_speed: a worker failed")
        result = json.loads(out.read_text())
    times = result["times"]
    native = statistics.median(times["native"])
    print(
        f"{args.workers} Gloo workers, {result['bytes'] / 1e6:.1f} MB across ranks, skewed counts, "
        f"{args.repeats} repeats (time: median [min-max] of the slowest rank); phases {result['phases']}"
    )
    print(f"{'method':>8} {'median s':>9} {'range s':>17} {'speed vs native':>16}")
    for label, samples in times.items():
        median = statistics.median(samples)
        print(f"{label:>8} {median:9.3f} {min(samples):8.3f}-{max(samples):<8.3f} {native / median:15.2f}x")


def main() -> None:
    args = parse()
    (worker if in_torchrun() else launch)(args)


if __name__ == "__main__":
    main()
