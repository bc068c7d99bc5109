"""The PyG bridge's overhead: the same GraphSAGE through ``cg.full_graph`` against ``commgraph
train``'s built-in GraphSAGE (issue 51's target: <= 1.15x the step time, equal bytes); with
``--sampled``, through ``cg.NeighborLoader`` against ``commgraph train --sampler neighbor``
(issue 51's target: within 10% of its seeds per second).

Both train on one partition set made once (``--method metis``), with ``--workers`` ranks, the
``p2p`` all-gather plan, layer-wise exchanges, the input features' halo rows read from the set
(the built-in's ``--first-layer features``; the bridge's part holds them), ``--layers`` SAGEConv
layers of ``--hidden`` (mean aggregation, ReLU between them), dropout 0 and Adam:

- ``builtin``: ``commgraph train SET --model sage --exchange barrier --plan p2p ...``; its
  ``--metrics-out`` line gives rank 0's training step of each epoch and the bytes of the epoch;
- ``bridge``: ``commgraph run --workers N benchmarks/pyg_sage.py SET OUT.json ...``, PyG's own
  ``SAGEConv`` in a user's model class; rank 0's step (forward, loss, backward, gradient average,
  optimiser step) and every rank's bytes.

With ``--sampled`` both draw ``--fanout`` in-neighbours per hop for batches of ``--batch-size``
training nodes, each rank from its own, shuffled every epoch, every training node a seed once an
epoch; rows of the same machine's parts read from their mapped files:

- ``builtin``: ``commgraph train SET --model sage --sampler neighbor --fanout F --batch-size B ...``
  (evaluated once, after the last epoch); an epoch's seconds are its training steps';
- ``bridge``: ``commgraph run --workers N benchmarks/pyg_sage_sampled.py SET OUT.json ...``, PyG's
  ``GraphSAGE`` in ``DistributedDataParallel`` (the slowest rank's epoch).

Each side's figure is its seeds per second, the set's training nodes over the median epoch.

The two run alternately, ``--pairs`` times (A B A B ...), each pair's ratio the medians of its
epochs after ``--warmup``; the machine's 1-minute load is recorded before and after every run and a
run that started above 1.0 is flagged. Printed: each run's median step, the pair ratios and their
median, min and max, and the bytes per epoch of both.

    python benchmarks/pyg_bridge.py [--graph sbm:nodes=20000,classes=8,features=128,seed=0]
        [--workers 4] [--hidden 128] [--layers 2] [--epochs 12] [--warmup 2] [--pairs 3]
        [--work-dir DIR] [--sampled [--fanout 15,10] [--batch-size 1024]]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMGRAPH = [sys.executable, "-m", "commgraph"]


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", default="sbm:nodes=20000,classes=8,features=128,seed=0")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/commgraph-pyg-bridge"))
    parser.add_argument("--sampled", action="store_true", help="cg.NeighborLoader against train --sampler neighbor")
    parser.add_argument("--fanout", default="15,10")
    parser.add_argument("--batch-size", type=int, default=1024)
    return parser.parse_args()


def run(argv: list[str]) -> float:
    """Run a command (its output shown on failure); the 1-minute load before it."""
    load = os.getloadavg()[0]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {' '.join(argv)}\n{result.stderr[-3000:]}")
    return load


def builtin(args, pset: Path, out: Path) -> dict:
    out.unlink(missing_ok=True)
    load = run(
        [*COMMGRAPH, "train", str(pset), "--workers", str(args.workers), "--model", "sage", "--layers",
         str(args.layers), "--hidden", str(args.hidden), "--dropout", "0", "--epochs", str(args.epochs),
         "--exchange", "barrier", "--plan", "p2p", "--first-layer", "features", "--quiet", "--force",
         "--metrics-out", str(out)]
    )  # fmt: skip
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    seconds = [line["epoch_seconds"] for line in lines]
    halo = lines[-1]["halo_forward_bytes"][-1] + lines[-1]["halo_backward_bytes"]
    return {"seconds": seconds, "halo_bytes": halo, "allreduce_bytes": lines[-1]["allreduce_bytes"], "load": load}


def bridge(args, pset: Path, out: Path) -> dict:
    out.unlink(missing_ok=True)
    load = run(
        [*COMMGRAPH, "run", "--workers", str(args.workers), str(HERE / "pyg_sage.py"), str(pset), str(out),
         "--epochs", str(args.epochs), "--hidden", str(args.hidden), "--layers", str(args.layers)]
    )  # fmt: skip
    result = json.loads(out.read_text())
    ranks = result["bytes"]
    halo = sum(sum(v for k, v in rank.items() if k.startswith("halo_")) for rank in ranks) / args.epochs
    allreduce = sum(rank.get("allreduce", 0) for rank in ranks) / args.epochs
    return {"seconds": [e["seconds"] for e in result["epochs"]], "halo_bytes": halo, "allreduce_bytes": allreduce,
            "load": load}  # fmt: skip


def builtin_sampled(args, pset: Path, out: Path) -> dict:
    out.unlink(missing_ok=True)
    load = run(
        [*COMMGRAPH, "train", str(pset), "--workers", str(args.workers), "--model", "sage", "--layers",
         str(args.layers), "--hidden", str(args.hidden), "--dropout", "0", "--epochs", str(args.epochs),
         "--sampler", "neighbor", "--fanout", args.fanout, "--batch-size", str(args.batch_size),
         "--eval-every", str(args.epochs), "--quiet", "--force", "--metrics-out", str(out)]
    )  # fmt: skip
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return {"seconds": [line["epoch_seconds"] for line in lines], "load": load}


def bridge_sampled(args, pset: Path, out: Path) -> dict:
    out.unlink(missing_ok=True)
    load = run(
        [*COMMGRAPH, "run", "--workers", str(args.workers), str(HERE / "pyg_sage_sampled.py"), str(pset), str(out),
         "--epochs", str(args.epochs), "--hidden", str(args.hidden), "--layers", str(args.layers), "--fanout",
         args.fanout, "--batch-size", str(args.batch_size)]
    )  # fmt: skip
    result = json.loads(out.read_text())
    return {"seconds": [e["seconds"] for e in result["epochs"]], "seeds": result["seeds"], "load": load}


def sampled(args, pset: Path) -> None:
    """``--sampled``: seeds per second of each pair's runs, and their ratio (bridge / builtin)."""
    ratios = []
    for pair in range(args.pairs):
        a = builtin_sampled(args, pset, args.work_dir / "builtin.jsonl")
        b = bridge_sampled(args, pset, args.work_dir / "bridge.json")
        rate_a = b["seeds"] / statistics.median(a["seconds"][args.warmup :])
        rate_b = b["seeds"] / statistics.median(b["seconds"][args.warmup :])
        ratios.append(rate_b / rate_a)
        flags = " (load above 1.0)" if max(a["load"], b["load"]) > 1.0 else ""
        print(
            f"pair {pair + 1}: builtin {rate_a:,.0f} seeds/s (load {a['load']:.2f}), bridge {rate_b:,.0f} seeds/s "
            f"(load {b['load']:.2f}): {rate_b / rate_a:.3f}x{flags}",
            flush=True,
        )
    print(
        f"bridge / builtin seeds per second: median {statistics.median(ratios):.3f}x, min {min(ratios):.3f}x, "
        f"max {max(ratios):.3f}x over {args.pairs} pairs (target >= 0.9x); {b['seeds']:,} seeds an epoch"
    )
    print(f"1-minute load after the last run: {os.getloadavg()[0]:.2f}")


def main() -> None:
    args = parse()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    args.work_dir.mkdir(parents=True)
    os.environ["COMMGRAPH_HOME"] = str(args.work_dir / "home")
    pset = args.work_dir / "set"
    run([*COMMGRAPH, "partition", "make", args.graph, "--parts", str(args.workers), "--method", "metis",
         "--out", str(pset)])  # fmt: skip
    if args.sampled:
        sampled(args, pset)
        return
    ratios = []
    for pair in range(args.pairs):
        a = builtin(args, pset, args.work_dir / "builtin.jsonl")
        b = bridge(args, pset, args.work_dir / "bridge.json")
        step_a = statistics.median(a["seconds"][args.warmup :])
        step_b = statistics.median(b["seconds"][args.warmup :])
        ratios.append(step_b / step_a)
        flags = " (load above 1.0)" if max(a["load"], b["load"]) > 1.0 else ""
        print(
            f"pair {pair + 1}: builtin {step_a * 1e3:.1f} ms (load {a['load']:.2f}), bridge {step_b * 1e3:.1f} ms "
            f"(load {b['load']:.2f}): {step_b / step_a:.3f}x{flags}",
            flush=True,
        )
    print(
        f"bridge / builtin step time: median {statistics.median(ratios):.3f}x, min {min(ratios):.3f}x, "
        f"max {max(ratios):.3f}x over {args.pairs} pairs (target <= 1.15x)"
    )
    print(
        f"halo bytes per epoch, every rank: builtin {a['halo_bytes']:,.0f}, bridge {b['halo_bytes']:,.0f}; "
        f"gradient all-reduce: builtin {a['allreduce_bytes']:,.0f}, bridge {b['allreduce_bytes']:,.0f}"
    )
    print(f"1-minute load after the last run: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
