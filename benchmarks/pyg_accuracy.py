"""The PyG bridge with dropout: test accuracy of ``examples/pyg/gcn_distributed.py`` across ranks
against ``examples/pyg/gcn.py`` in one process, over several seeds (issue 51's target: within 1
point, mean over 3 seeds).

With dropout each rank draws its own masks, so the runs differ digit by digit; what must agree is
what the model learns. Both scripts train PyG's GCN on Cora (PyG's ``Planetoid`` reading the raw
files this repository bundles under ``tests/data/planetoid``, copied into ``--work-dir``) for
``--epochs`` epochs with dropout 0.5; the last epoch's test accuracy is compared.

    python benchmarks/pyg_accuracy.py [--workers 4] [--seeds 0,1,2] [--epochs 200]
        [--work-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAST = re.compile(r"Test: ([0-9.]+)\s*$")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/commgraph-pyg-accuracy"))
    return parser.parse_args()


def test_accuracy(argv: list[str], pattern: re.Pattern = LAST) -> float:
    """The accuracy ``pattern`` finds on the last line ``argv`` prints (its first group)."""
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {' '.join(argv)}\n{result.stderr[-3000:]}")
    return float(pattern.search(result.stdout.strip().splitlines()[-1]).group(1))


def main() -> None:
    args = parse()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    raw = args.work_dir / "Planetoid" / "Cora" / "raw"
    raw.mkdir(parents=True)
    for file in (ROOT / "tests" / "data" / "planetoid").glob("ind.cora.*"):
        shutil.copy(file, raw)
    os.environ["COMMGRAPH_HOME"] = str(args.work_dir / "home")
    common = ["--root", str(args.work_dir / "Planetoid"), "--epochs", str(args.epochs)]
    one, many = [], []
    for seed in map(int, args.seeds.split(",")):
        one.append(test_accuracy([sys.executable, str(ROOT / "examples/pyg/gcn.py"), *common, "--seed", str(seed)]))
        many.append(
            test_accuracy(
                [
                    sys.executable,
                    "-m",
                    "commgraph",
                    "run",
                    "--workers",
                    str(args.workers),
                    str(ROOT / "examples/pyg/gcn_distributed.py"),
                    *common,
                    "--seed",
                    str(seed),
                ]
            )  # fmt: skip
        )
        print(f"seed {seed}: one process {one[-1]:.4f}, {args.workers} ranks {many[-1]:.4f}", flush=True)
    gap = (statistics.mean(many) - statistics.mean(one)) * 100
    print(
        f"test accuracy, mean over {len(one)} seeds: one process {statistics.mean(one):.4f}, "
        f"{args.workers} ranks {statistics.mean(many):.4f}: {gap:+.2f} points (target within 1)"
    )


if __name__ == "__main__":
    main()
