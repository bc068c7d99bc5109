"""Heterogeneous graphs through the bridge with dropout: test accuracy of
``examples/pyg/mag_distributed.py`` (a ``to_hetero`` GraphSAGE on the ``mag-shaped`` graph,
full-graph) across ranks against the same script in one process, over several seeds (issue 52's
target: within 1 point, mean over 3 seeds).

With dropout each rank draws its own masks, so the runs differ digit by digit; what must agree is
what the model learns. The last epoch's test accuracy is compared.

    python benchmarks/hetero_accuracy.py [--workers 4] [--seeds 0,1,2] [--epochs 30]
        [--graph mag-shaped:scale=0.005,seed=0] [--work-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

from pyg_accuracy import test_accuracy  # the last epoch's test accuracy a script prints

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "pyg" / "mag_distributed.py"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--graph", default="mag-shaped:scale=0.005,seed=0")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/commgraph-hetero-accuracy"))
    return parser.parse_args()


def main() -> None:
    args = parse()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.environ["COMMGRAPH_HOME"] = str(args.work_dir / "home")
    common = ["--graph", args.graph, "--epochs", str(args.epochs)]
    one, many = [], []
    for seed in map(int, args.seeds.split(",")):
        options = [*common, "--seed", str(seed)]
        one.append(test_accuracy([sys.executable, str(SCRIPT), *options]))
        run = [sys.executable, "-m", "commgraph", "run", "--workers", str(args.workers), str(SCRIPT), *options]
        many.append(test_accuracy(run))
        print(f"seed {seed}: one process {one[-1]:.4f}, {args.workers} ranks {many[-1]:.4f}", flush=True)
    gap = (statistics.mean(many) - statistics.mean(one)) * 100
    print(
        f"test accuracy, mean over {len(one)} seeds: one process {statistics.mean(one):.4f}, "
        f"{args.workers} ranks {statistics.mean(many):.4f}: {gap:+.2f} points (target within 1)"
    )


if __name__ == "__main__":
    main()
