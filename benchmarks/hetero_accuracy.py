"""Heterogeneous graphs with dropout: test accuracy across ranks against one process, over several
seeds (issue 52's target: within 1 point, mean over 3 seeds), by one of three routes:

- ``bridge``: ``examples/pyg/mag_distributed.py``, a ``to_hetero`` GraphSAGE on the ``mag-shaped``
  graph through the PyG bridge, full-graph;
- ``rgcn``: the built-in ``commgraph train --model rgcn``, full-graph;
- ``rgcn-sampled``: the same with ``--sampler neighbor --fanout 25,20 --batch-size 1024``.

With dropout each rank draws its own masks (and, sampled, its own batches), so the runs differ digit
by digit; what must agree is what the model learns. The last epoch's test accuracy is compared.

    python benchmarks/hetero_accuracy.py [--route bridge|rgcn|rgcn-sampled] [--workers 4]
        [--seeds 0,1,2] [--epochs 30] [--graph mag-shaped:scale=0.005,seed=0] [--work-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
from pathlib import Path

from pyg_accuracy import LAST, test_accuracy  # the last epoch's test accuracy a script prints

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "pyg" / "mag_distributed.py"
ROUTES = ("bridge", "rgcn", "rgcn-sampled")
RGCN = ["--model", "rgcn", "--hidden", "64", "--lr", "0.01", "--eval-every", "1000"]  # the last epoch is evaluated
SAMPLED = ["--sampler", "neighbor", "--fanout", "25,20", "--batch-size", "1024"]
DONE = re.compile(r"test accuracy ([0-9.]+)")  # on commgraph train's last line


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--route", choices=ROUTES, default="bridge")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--graph", default="mag-shaped:scale=0.005,seed=0")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/commgraph-hetero-accuracy"))
    return parser.parse_args()


def runs(args: argparse.Namespace, seed: int) -> tuple[list[str], list[str]]:
    """The commands of one seed: one process, then ``--workers`` ranks."""
    if args.route == "bridge":
        options = ["--graph", args.graph, "--epochs", str(args.epochs), "--seed", str(seed)]
        alone = [sys.executable, str(SCRIPT), *options]
        return alone, [sys.executable, "-m", "commgraph", "run", "--workers", str(args.workers), str(SCRIPT), *options]
    train = [sys.executable, "-m", "commgraph", "train", args.graph, *RGCN, "--epochs", str(args.epochs)]
    train += ["--seed", str(seed), *(SAMPLED if args.route == "rgcn-sampled" else [])]
    return [*train, "--workers", "1"], [*train, "--workers", str(args.workers)]


def main() -> None:
    args = parse()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.environ["COMMGRAPH_HOME"] = str(args.work_dir / "home")
    one, many = [], []
    for seed in map(int, args.seeds.split(",")):
        alone, ranks = runs(args, seed)
        pattern = LAST if args.route == "bridge" else DONE
        one.append(test_accuracy(alone, pattern))
        many.append(test_accuracy(ranks, pattern))
        print(f"seed {seed}: one process {one[-1]:.4f}, {args.workers} ranks {many[-1]:.4f}", flush=True)
    gap = (statistics.mean(many) - statistics.mean(one)) * 100
    print(
        f"{args.route}: test accuracy, mean over {len(one)} seeds: one process {statistics.mean(one):.4f}, "
        f"{args.workers} ranks {statistics.mean(many):.4f}: {gap:+.2f} points (target within 1)"
    )


if __name__ == "__main__":
    main()
