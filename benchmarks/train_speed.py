"""Full-graph training speed on a graph where compute dominates (issue: runtime and G3 training).

Measured side by side in one run, GraphSAGE (2 layers, hidden 128), median training-step time over
the epochs after the first two (warm-up), for each of ``--rounds`` interleaved runs; the table
gives the median over the rounds and their spread (min-max):
  - PyG, single process, whole graph (the baseline; same threads and the same allocator setting as
    our one worker, ``runtime.keep_freed_memory``), both with an edge_index (PyG's default: a message
    row per edge) and with a sparse ``adj_t`` (what our layers use); and the sparse one once more
    with glibc's default allocator, to show what that setting is worth. PyG keeps torch's
    ``F.dropout``, as its users run it; ours draws the mask faster on CPU (``commgraph.nn.dropout``),
    which is part of any lead over PyG;
  - commgraph, 1 worker (target: at most 1.1x the faster PyG);
  - commgraph, 2 workers with --exchange pipelined (target: at least 1.6x faster than 1 worker),
    barrier and replicate (pipelined must beat both), with the share of the step each worker sat
    blocked on halo or gradient messages (``comm_wait_seconds``; target for pipelined: <= 10%);
  - commgraph, 2 workers, pipelined with ``--plan auto`` against ``--plan p2p`` (target: auto at
    most 1.02x p2p's step).
Each configuration runs in fresh processes. Also: Cora, GraphSAGE, 200 epochs, test accuracy with
1, 2 and 4 workers (target >= 0.78).

With ``--device cuda`` the same comparison runs on GPUs (each step synchronised before the clock
is read); the allocator and one-thread rows are CPU matters and are left out, and the 2-worker rows
need a GPU per worker.

With ``--pairs N`` (N >= 3) the script measures instead, by the baseline protocol of issue 58
(``benchmarks/protocol.py``), PyG's full-graph GraphSAGE with a sparse ``adj_t`` in one process (A,
glibc's allocator as its users run it unless ``--pyg-keep-freed-memory``) against ``commgraph train
PARTSET --workers 1`` (B): the same model (2 layers, ``--hidden``, dropout 0.5), Adam (lr 0.01,
weight decay 5e-4), ``--threads`` threads each (default 2), on the same ``.npz`` (B on its 1-part
chunk set), both written once into ``--work-dir``; by default the 100k-node graph,
``sbm:nodes=100000,classes=8,features=500,degree=100,train=0.5,seed=0``. Each run trains ``--epochs``
epochs, one full-graph step each; the first two are warm-up, left out of its rate (steps per second
over the rest). N alternating pairs A B, the load settled before each run, the median pair ratio
with its min and max; target: commgraph's step at most 1.0x PyG's (speed ratio >= 1.0); peak memory
is recorded, with no target. ``--json-out`` keeps every run.

    python benchmarks/train_speed.py [--graph sbm:nodes=200000,classes=8,features=128,seed=0] [--epochs 12]
                                     [--device cpu|cuda]
    python benchmarks/train_speed.py --pairs 3 --work-dir WORK [--threads 2] [--epochs 12] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from commgraph.graph import load_graph
from commgraph.partition import partition_graph, partition_metrics, write_partition_set

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dgl_baseline import has_lines, prepare  # noqa: E402
from protocol import Setup, Side, json_rate, report, run_pairs, threads_env  # noqa: E402
from pss import commgraph_argv, commgraph_env  # noqa: E402

SPEED_GRAPH = "sbm:nodes=200000,classes=8,features=128,seed=0"  # the side-by-side table's
PAIRS_GRAPH = "sbm:nodes=100000,classes=8,features=500,degree=100,train=0.5,seed=0"  # issue 58's 100k-node graph
WARMUP_EPOCHS = 2  # epochs left out of every figure: allocator, lazy shapes, first-touch pages

PYG = """
import sys, time, json, torch
from torch_geometric.nn import SAGEConv
from commgraph.graph import load_graph
from commgraph.graph.pyg import to_pyg
from commgraph.runtime import keep_freed_memory
torch.set_num_threads({threads})
if {keep}:
    keep_freed_memory()
device = torch.device({device!r})
data = to_pyg(load_graph({spec!r})).to(device)
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self, i, h, o):
        super().__init__()
        self.c1, self.c2 = SAGEConv(i, h), SAGEConv(h, o)
    def forward(self, x, e):
        return self.c2(torch.nn.functional.dropout(torch.relu(self.c1(x, e)), 0.5, self.training), e)
if {sparse}:  # PyG's sparse path: a transposed CSR adjacency, aggregated by one sparse-dense product
    from torch_geometric.utils import to_torch_csr_tensor
    data.edge_index = to_torch_csr_tensor(data.edge_index.flip(0), size=(data.num_nodes, data.num_nodes))
model = Net(data.num_features, {hidden}, int(data.y.max()) + 1).to(device)
opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
times = []
for epoch in range({epochs}):
    start = time.perf_counter()
    model.train(); opt.zero_grad()
    out = model(data.x, data.edge_index)
    loss = torch.nn.functional.cross_entropy(out[data.train_mask], data.y[data.train_mask])
    loss.backward(); opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    times.append(time.perf_counter() - start)
print(json.dumps({{"epoch_seconds": times}}))
"""


def median_tail(times: list[float]) -> float:
    """The median epoch after the :data:`WARMUP_EPOCHS` (every epoch when there are too few)."""
    return float(np.median(times[WARMUP_EPOCHS:] if len(times) > WARMUP_EPOCHS + 1 else times))


def measured_rate(seconds: list[float] | None) -> float | None:
    """Full-graph steps per second over the epochs after the :data:`WARMUP_EPOCHS` (one step an
    epoch; None: no epoch was measured)."""
    measured = (seconds or [])[WARMUP_EPOCHS:]
    return len(measured) / sum(measured) if measured else None


def train_args(partdir: Path, workers: int, epochs: int, hidden: int, metrics: Path, extra=()) -> list[str]:
    """``commgraph train``'s arguments for full-graph GraphSAGE (2 layers, ``hidden`` wide) on
    ``partdir`` with ``workers`` workers, one ``--metrics-out`` line an epoch."""
    return [
        "train",
        str(partdir),
        "--workers",
        str(workers),
        "--model",
        "sage",
        "--hidden",
        str(hidden),
        "--epochs",
        str(epochs),
        "--metrics-out",
        str(metrics),
        "--quiet",
        *extra,
    ]


def _commgraph(*args: str) -> None:
    """``commgraph ARGS`` in fresh processes; its output only if it fails."""
    job = subprocess.run([sys.executable, "-m", "commgraph", *args], capture_output=True, text=True)
    if job.returncode:
        raise SystemExit(f"commgraph {' '.join(args)} failed:\n{job.stderr}")


def commgraph_run(partdir: Path, workers: int, exchange: str, epochs: int, hidden: int, extra=()) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "m.jsonl"
        _commgraph(*train_args(partdir, workers, epochs, hidden, metrics, ("--exchange", exchange, *extra)))
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return {
        "seconds": median_tail([r["epoch_seconds"] for r in records]),
        "comm_bytes": records[-1]["comm_bytes"],
        "wait": median_tail([r["comm_wait_seconds"] for r in records]),
        "test_acc": records[-1]["test_acc"],
        "plan": records[-1]["plan"],
    }


def two_at_once(partdir: Path, epochs: int, hidden: int, extra=()) -> dict:
    """Two independent 1-worker, 1-thread jobs on the whole graph at the same time: what the
    machine gives two busy processes with no communication between them (their mean step)."""
    with tempfile.TemporaryDirectory() as tmp:
        jobs, files = [], [Path(tmp) / f"m{k}.jsonl" for k in range(2)]
        for metrics in files:
            jobs.append(
                subprocess.Popen(
                    commgraph_argv(
                        sys.executable, train_args(partdir, 1, epochs, hidden, metrics, ("--threads", "1", *extra))
                    ),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        for job in jobs:
            if job.wait():
                raise SystemExit(f"a 1-worker job failed:\n{job.stderr.read()}")
        steps = [median_tail([json.loads(line)["epoch_seconds"] for line in f.read_text().splitlines()]) for f in files]
    return {"seconds": float(np.mean(steps))}


def speed(spec: str, epochs: int, hidden: int, rounds: int, root: Path, device: str) -> None:
    graph = load_graph(spec)
    print(
        f"{graph.name}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges, {graph.features.shape[1]} features; "
        f"GraphSAGE 2 layers, hidden {hidden}; {os.cpu_count()} cores"
        + (f", {torch.cuda.get_device_name()}" if device == "cuda" else "")
    )
    gpu = device == "cuda"
    two = not gpu or torch.cuda.device_count() >= 2
    if not two:
        print("1 GPU: the 2-worker rows need a GPU per worker and are left out")
    sets = {}
    for parts, method in ((1, "chunk"), (2, "g3")):
        assignment, _ = partition_graph(graph, parts, method, 0)
        metrics = partition_metrics(graph, assignment, parts)
        sets[parts] = write_partition_set(
            graph, assignment, parts, root / f"k{parts}", method=method, seed=0, seconds=0.0, metrics=metrics
        ).path
        if parts > 1:
            print(f"2 parts (g3): total remote {metrics['total_remote']:,} nodes")
    del graph
    threads = os.cpu_count() or 1

    def pyg_run(sparse: bool, keep: bool = True) -> dict:
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                PYG.format(
                    threads=threads, spec=spec, hidden=hidden, epochs=epochs, sparse=sparse, keep=keep, device=device
                ),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return {"seconds": median_tail(json.loads(out.strip().splitlines()[-1])["epoch_seconds"])}

    on = ("--device", device)
    configurations = {
        "PyG, 1 process, edge_index": lambda: pyg_run(False),
        "PyG, 1 process, sparse adj_t": lambda: pyg_run(True),
        "commgraph, 1 worker": lambda: commgraph_run(sets[1], 1, "pipelined", epochs, hidden, on),
    }
    if not gpu:
        configurations["PyG, sparse, default allocator"] = lambda: pyg_run(True, keep=False)
        configurations["commgraph, 1 worker, 1 thread"] = lambda: commgraph_run(
            sets[1], 1, "pipelined", epochs, hidden, (*on, "--threads", "1")
        )
        configurations["two such jobs at once"] = lambda: two_at_once(sets[1], epochs, hidden, on)
    if two:
        configurations.update(
            {
                f"commgraph, 2 workers, {how}": (lambda how=how: commgraph_run(sets[2], 2, how, epochs, hidden, on))
                for how in ("pipelined", "barrier", "replicate")
            }
        )
        configurations["commgraph, 2 workers, --plan p2p"] = lambda: commgraph_run(
            sets[2], 2, "pipelined", epochs, hidden, (*on, "--plan", "p2p")
        )
    # every configuration once per round, rounds interleaved: a burst of load from the machine's
    # neighbours then spoils one round of one configuration, and the spread shows it
    rounds_of: dict[str, list[dict]] = {name: [] for name in configurations}
    for _ in range(rounds):
        for name, run in configurations.items():
            rounds_of[name].append(run())
    measured = {
        name: {
            **min(runs, key=lambda r: r["seconds"]),
            "seconds": float(np.median([r["seconds"] for r in runs])),
            "spread": (min(r["seconds"] for r in runs), max(r["seconds"] for r in runs)),
            "wait": float(np.median([r.get("wait", 0.0) for r in runs])),
        }
        for name, runs in rounds_of.items()
    }
    pyg = {
        False: measured["PyG, 1 process, edge_index"]["seconds"],
        True: measured["PyG, 1 process, sparse adj_t"]["seconds"],
    }
    one = measured["commgraph, 1 worker"]["seconds"]
    print(f"{'configuration':<34} {'epoch s':>8} {'(min-max)':>17} {'ratio':>22}")
    print(f"{'PyG, 1 process, edge_index':<34} {pyg[False]:8.4f} {_spread(measured['PyG, 1 process, edge_index'])}")
    print(f"{'PyG, 1 process, sparse adj_t':<34} {pyg[True]:8.4f} {_spread(measured['PyG, 1 process, sparse adj_t'])}")
    if not gpu:
        default = measured["PyG, sparse, default allocator"]["seconds"]
        print(
            f"{'PyG, sparse, default allocator':<34} {default:8.4f} "
            f"{_spread(measured['PyG, sparse, default allocator'])} {default / pyg[True]:8.3f}x slower than with "
            "keep_freed_memory"
        )
    print(
        f"{'commgraph, 1 worker':<34} {one:8.4f} {_spread(measured['commgraph, 1 worker'])} "
        f"{one / min(pyg.values()):8.3f}x the faster PyG (<= 1.1)"
    )
    if not gpu:
        alone = measured["commgraph, 1 worker, 1 thread"]["seconds"]
        print(
            f"{'commgraph, 1 worker, 1 thread':<34} {alone:8.4f} {_spread(measured['commgraph, 1 worker, 1 thread'])} "
            f"{one / alone:8.3f}x of 1 worker: what the 2nd core "
            "gives it"
        )
    if not two:
        return
    results = {how: measured[f"commgraph, 2 workers, {how}"] for how in ("pipelined", "barrier", "replicate")}
    for how, r in results.items():
        note = (
            "(>= 1.6)"
            if how == "pipelined"
            else f"pipelined {r['seconds'] / results['pipelined']['seconds']:.3f}x faster"
        )
        print(
            f"{'commgraph, 2 workers, ' + how:<34} {r['seconds']:8.4f} {_spread(r)} {one / r['seconds']:8.3f}x "
            f"speed-up {note}   {r['comm_bytes'] / 1e6:.1f} MB/epoch, waiting {r['wait'] / r['seconds']:.1%} of "
            "the step"
        )
    p2p, auto = measured["commgraph, 2 workers, --plan p2p"], results["pipelined"]
    print(
        f"{'commgraph, 2 workers, --plan p2p':<34} {p2p['seconds']:8.4f} {_spread(p2p)} --plan auto "
        f"({auto['plan']}) takes {auto['seconds'] / p2p['seconds']:.3f}x its step (<= 1.02)"
    )
    if not gpu:
        pair = measured["two such jobs at once"]["seconds"]
        split = results["pipelined"]
        print(
            f"scaling of the split itself: 2 workers (1 thread each) vs 1 worker with 1 thread: "
            f"{alone / split['seconds']:.3f}x"
        )
        print(
            f"the machine's own ceiling: two independent 1-thread jobs at once each step in {pair:.4f} s, "
            f"{pair / alone:.3f}x their time alone, so two busy processes do at most {2 * alone / pair:.3f}x the "
            f"work of one; the split waits {split['wait']:.4f} s a step on messages "
            f"({split['wait'] / split['seconds']:.1%}); half the work at the pair's speed would take "
            f"{pair / 2:.4f} s, the rest of the step ({split['seconds'] - split['wait'] - pair / 2:.4f} s) is work "
            "the split adds (halo rows, copies, sends) and imbalance"
        )


def _spread(result: dict) -> str:
    low, high = result["spread"]
    return f"({low:.4f}-{high:.4f})"


def accuracy() -> None:
    print("\nCora, GraphSAGE, 200 epochs (standard split): test accuracy at the last epoch")
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2, 4):
            metrics = Path(tmp) / f"cora{workers}.jsonl"
            _commgraph(
                "train",
                "cora",
                "--workers",
                str(workers),
                "--epochs",
                "200",
                "--metrics-out",
                str(metrics),
                "--quiet",
                "--partition-dir",
                str(Path(tmp) / f"parts{workers}"),
            )
            last = json.loads(metrics.read_text().splitlines()[-1])
            print(f"  {workers} worker(s): test {last['test_acc']:.3f}  (val {last['val_acc']:.3f})")


@dataclass
class PairedSides:
    """The baseline protocol's two sides of full-graph training and what they share."""

    pyg: Side
    commgraph: Side
    setup: Setup


def paired_sides(npz: Path, partdir: Path, opts) -> PairedSides:
    """A: PyG's full-graph GraphSAGE with a sparse ``adj_t`` (:data:`PYG`, written to
    ``runs-full-graph/pyg_full_graph.py`` in ``--work-dir``), one process on ``npz``;
    B: ``commgraph train PARTDIR --workers 1`` on its 1-part set, the same model, optimiser and
    dropout. Each runs ``--epochs`` epochs, a full-graph step each, with ``--threads`` threads on
    ``--device``; both rates leave out the first :data:`WARMUP_EPOCHS`. commgraph runs one epoch
    more, evaluated after it (``--eval-every`` at that epoch; the last epoch is always evaluated),
    so that the measured epochs' lines are written before any evaluation and its peak is training's
    (PyG's run evaluates nothing: its whole run's peak)."""
    runs = opts.work_dir / "runs-full-graph"
    runs.mkdir(parents=True, exist_ok=True)
    metrics, script = runs / "commgraph-1.jsonl", runs / "pyg_full_graph.py"
    script.write_text(
        PYG.format(
            threads=opts.threads,
            spec=str(npz),
            hidden=opts.hidden,
            epochs=opts.epochs,
            sparse=True,
            keep=opts.pyg_keep_freed_memory,
            device=opts.device,
        )
    )
    pyg = Side(
        "pyg",
        [opts.python, str(script)],
        lambda stdout: measured_rate(json_rate("epoch_seconds")(stdout)),
        env=threads_env(opts.threads, commgraph_env()),
    )
    last = opts.epochs + 1
    args = train_args(
        partdir,
        1,
        last,
        opts.hidden,
        metrics,
        ("--threads", str(opts.threads), "--device", opts.device, "--eval-every", str(last)),
    )

    def commgraph_rate(_stdout: Path) -> float | None:
        lines = metrics.read_text().splitlines() if metrics.is_file() else []
        return measured_rate([json.loads(line)["epoch_seconds"] for line in lines[: opts.epochs]])

    ours = Side(
        "commgraph-1",
        commgraph_argv(opts.python, args),
        commgraph_rate,
        env=threads_env(opts.threads, commgraph_env()),
        until=has_lines(metrics, opts.epochs),
        before=lambda: metrics.unlink(missing_ok=True),
    )
    allocator = (
        "commgraph's keep_freed_memory" if opts.pyg_keep_freed_memory else "glibc's default, as its users run it"
    )
    setup = Setup(
        graph=f"{opts.graph} ({npz.name}; commgraph: its 1-part chunk set)",
        threads=opts.threads,
        seeds="every training node, every step (full-graph)",
        fanouts={"pyg": "every neighbour (sparse adj_t, torch.sparse_csr)", "commgraph-1": "every neighbour"},
        batch="the whole graph",
        model=f"GraphSAGE mean, 2 layers, hidden {opts.hidden}, dropout 0.5; PyG's allocator: {allocator}",
        optimiser="Adam lr 0.01, weight decay 5e-4",
        warmup=WARMUP_EPOCHS,
        steps=opts.epochs - WARMUP_EPOCHS,
        unit="steps",
    )
    return PairedSides(pyg, ours, setup)


def protocol_pairs(opts) -> dict:
    """PyG (A) against commgraph's one worker (B), full-graph, by the baseline protocol
    (``benchmarks/protocol.py``): ``--pairs`` alternating pairs on the graph's ``.npz`` and 1-part
    set in ``--work-dir`` (made once). Target (issue 58): commgraph's step at most 1.0x PyG's, that
    is a speed ratio of at least 1.0; memory recorded, no target."""
    npz, partdir = prepare(opts.graph, opts.work_dir, opts.python)
    sides = paired_sides(npz, partdir, opts)
    pairs = run_pairs(sides.pyg, sides.commgraph, opts.pairs, opts.work_dir / "runs-full-graph")
    result = report(sides.setup, pairs, targets=(1.0, None))
    speed = result["summary"]["speed"]["median"]
    if speed is not None:
        print(
            f"  step time: commgraph's is {1 / speed:.3f}x PyG's (median pair); target <= 1.0x, "
            f"i.e. speed ratio >= 1.0: {'met' if result['speed_met'] else 'missed'}"
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", help=f"default: {SPEED_GRAPH}; with --pairs, {PAIRS_GRAPH}")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each configuration (median and spread)")
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where every configuration trains (cuda: a GPU per worker)",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        help="instead of the table: PyG's full-graph GraphSAGE (sparse adj_t) against commgraph's 1 worker by "
        "the baseline protocol (benchmarks/protocol.py), this many alternating pairs (at least 3)",
    )
    parser.add_argument("--threads", type=int, default=2, help="--pairs: each side's threads (default %(default)s)")
    parser.add_argument("--work-dir", type=Path, help="--pairs: where the graph's .npz, its 1-part set and the runs go")
    parser.add_argument("--json-out", type=Path, help="--pairs: write the protocol's JSON here")
    parser.add_argument("--python", default=sys.executable, help="--pairs: the interpreter both sides run in")
    parser.add_argument(
        "--pyg-keep-freed-memory",
        action="store_true",
        help="--pairs: PyG with commgraph's allocator setting (default: glibc's, as PyG's users run it)",
    )
    args = parser.parse_args()
    start = time.perf_counter()
    if args.pairs is not None:
        if args.work_dir is None:
            parser.error("--pairs needs --work-dir")
        if args.epochs <= WARMUP_EPOCHS:
            parser.error(f"--pairs measures the epochs after the first {WARMUP_EPOCHS}: pass --epochs above that")
        args.graph = args.graph or PAIRS_GRAPH
        args.work_dir.mkdir(parents=True, exist_ok=True)
        result = protocol_pairs(args)
        if args.json_out is not None:
            args.json_out.write_text(json.dumps(result, indent=1))
        print(f"\n({time.perf_counter() - start:.0f} s)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        speed(args.graph or SPEED_GRAPH, args.epochs, args.hidden, args.rounds, Path(tmp), args.device)
    if not args.skip_accuracy:
        accuracy()
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
