"""Step time predicted before a run against the run's measured step time (issue 53's target:
predicted over measured median step time within 10% at the median, 25% at worst).

For each configuration the benchmark runs, as a user runs them (``python -m commgraph ...``, this
checkout's ``src`` first on ``PYTHONPATH``):

1. ``commgraph train GRAPH --workers N ... --epochs E --metrics-out FILE`` on the CPU, which makes
   the partition set under ``--work-dir`` on first use; the measured step is the median over
   epochs 2..E of each epoch's ``measured_step_seconds`` (the first epoch warms up), with the
   spread (min-max) beside it;
2. ``commgraph train SET ... --dry-run --json`` on that set: the predicted ``step_seconds`` and its
   parts (compute, sampling, feature fetch, halo exchange, all-reduce).

Both run with ``--topology`` a calibrated topology of the job's worker count
(``calibrated-N.yaml`` under ``--work-dir``, made by ``commgraph topo calibrate --workers N
--force`` when absent; a 1-worker job uses the 2-worker file) and ``--cost-model`` the 2-worker
file (one compute probe for every job), so that the prediction prices the compute with this
machine's probe and the exchanges with its measured link and collective latencies, and with
``--threads 1``: every worker computes on one thread, as the probe does. Each
configuration's result is appended to ``--results`` as one JSON line; ``--table`` prints the table
of every result there with the median and worst absolute error (also against each run's fastest
epoch, the one least disturbed by the machine's other work), each part of the prediction, and
under a sampled configuration the phases its run measured (rank 0's seconds a step: sampling, the
request round, the rows' reads, forward, backward, the optimiser with the gradients' sum).

Run it in chunks (each a few minutes), one benchmark at a time, e.g.::

    python benchmarks/step_time.py --work-dir scratch --configs cora-full-gcn-1,cora-full-gcn-2
    python benchmarks/step_time.py --work-dir scratch --table
    python benchmarks/step_time.py --list
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
SBM_100K = "sbm:nodes=100000,classes=8,features=100,degree=10,train=0.5,seed=0"
TARGET_MEDIAN, TARGET_WORST = 0.10, 0.25


@dataclass(frozen=True)
class Config:
    """One configuration: ``commgraph train GRAPH --workers N --model M`` with ``args``."""

    name: str
    graph: str
    workers: int
    model: str
    args: tuple[str, ...] = ()
    epochs: int = 8

    @property
    def sampled(self) -> bool:
        return "--sampler" in self.args


def _configs() -> list[Config]:
    full = [Config(f"cora-full-{m}-{n}", "cora", n, m) for m in ("gcn", "sage", "gat") for n in (1, 2, 4)]
    sampled = ("--fanout", "10,5", "--batch-size", "32", "--steps-per-epoch", "8")  # cora: 140 seeds, 5 steps
    dgs = ("--sampler", "dgs", "--explain-in", "worker", "--explain-cpu", "0", *sampled)
    big = ("--fanout", "10,5", "--batch-size", "512", "--steps-per-epoch", "8")
    return full + [
        Config("cora-neighbor-gcn-1", "cora", 1, "gcn", ("--sampler", "neighbor", *sampled), 4),
        Config("cora-neighbor-sage-2", "cora", 2, "sage", ("--sampler", "neighbor", *sampled), 4),
        Config("cora-neighbor-gat-4", "cora", 4, "gat", ("--sampler", "neighbor", *sampled), 4),
        Config("cora-dgs-sage-2", "cora", 2, "sage", dgs, 4),
        Config("cora-owner-gcn-2", "cora", 2, "gcn", ("--first-layer", "owner")),
        Config("cora-owner-sage-4", "cora", 4, "sage", ("--first-layer", "owner")),
        Config("sbm100k-full-gcn-1", SBM_100K, 1, "gcn", (), 4),
        Config("sbm100k-full-sage-2", SBM_100K, 2, "sage", (), 4),
        Config("sbm100k-full-gat-4", SBM_100K, 4, "gat", (), 3),
        Config("sbm100k-owner-gcn-2", SBM_100K, 2, "gcn", ("--first-layer", "owner"), 4),
        Config("sbm100k-neighbor-sage-1", SBM_100K, 1, "sage", ("--sampler", "neighbor", *big), 3),
        Config("sbm100k-neighbor-gcn-4", SBM_100K, 4, "gcn", ("--sampler", "neighbor", *big), 3),
        Config(
            "sbm100k-dgs-sage-2",
            SBM_100K,
            2,
            "sage",
            ("--sampler", "dgs", "--explain-in", "worker", "--explain-cpu", "0", *big),
            3,
        ),
    ]


CONFIGS = {c.name: c for c in _configs()}
PARTS = ("compute", "sampling", "feature_fetch", "halo_exchange", "allreduce")


PHASES = ("sample", "fetch", "gather", "forward", "backward", "optimizer")


@dataclass
class Result:
    """A configuration's predicted and measured step (seconds), the prediction's parts, the load,
    and a sampled run's measured phases (rank 0's seconds a step, the median over the epochs
    after the first: ``sample`` and the metrics' ``StepPhases``), to hold beside the parts."""

    name: str
    predicted: float
    measured: float
    low: float
    high: float
    parts: dict
    load_before: float
    load_after: float
    phases: dict = field(default_factory=dict)

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1

    @property
    def error_fastest(self) -> float:
        """Against the fastest epoch's step: the run's least disturbed by the machine's other work."""
        return self.predicted / self.low - 1


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(CHECKOUT / "src") + (os.pathsep + path if path else "")}


def _commgraph(python: str, *args: str) -> str:
    """Run ``python -m commgraph ARGS``; its stdout (a failure exits with its stderr)."""
    done = subprocess.run([python, "-m", "commgraph", *args], capture_output=True, text=True, env=_env())
    if done.returncode != 0:
        sys.exit(f"commgraph {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def calibrated(work: Path, workers: int, python: str) -> Path:
    """The calibrated topology of ``max(workers, 2)`` workers on this machine, made when absent."""
    n = max(workers, 2)
    path = work / f"calibrated-{n}.yaml"
    if not path.exists():
        print(f"calibrating {n} workers -> {path}", file=sys.stderr)
        _commgraph(
            python,
            "topo",
            "calibrate",
            "--workers",
            str(n),
            "--sizes",
            "4K,64K,1M,8M",
            "--repeats",
            "3",
            "--force",
            "--out",
            str(path),
        )
    return path


def measure(config: Config, work: Path, python: str) -> Result:
    """Run ``config`` and its dry run (see the module's description)."""
    topology, cost = calibrated(work, config.workers, python), calibrated(work, 2, python)
    parts_dir = work / f"{config.graph.split(':')[0]}-{config.workers}"
    common = ("--model", config.model, *config.args, "--topology", str(topology), "--cost-model", str(cost))
    common += ("--threads", "1")  # the probe's one thread: a loaded machine's threads would measure its load
    metrics = work / f"{config.name}.jsonl"
    metrics.unlink(missing_ok=True)
    load_before = os.getloadavg()[0]
    _commgraph(
        python,
        "train",
        config.graph,
        "--workers",
        str(config.workers),
        "--partition-dir",
        str(parts_dir),
        *common,
        "--epochs",
        str(config.epochs),
        "--eval-every",
        str(config.epochs),
        "--device",
        "cpu",
        "--quiet",
        "--metrics-out",
        str(metrics),
    )
    load_after = os.getloadavg()[0]
    records = [json.loads(line) for line in metrics.read_text().splitlines()][1:]
    steps = [r["measured_step_seconds"] for r in records]
    dry = json.loads(_commgraph(python, "train", str(parts_dir), *common, "--dry-run", "--json"))["step_time"]
    return Result(
        config.name,
        dry["step_seconds"],
        statistics.median(steps),
        min(steps),
        max(steps),
        {p: dry[f"{p}_seconds"] for p in PARTS},
        load_before,
        load_after,
        _phases(records),
    )


def _phases(records: list[dict]) -> dict:
    """A sampled run's measured phases, seconds a step (empty for full-graph training)."""
    if records[0].get("forward_seconds") is None:
        return {}
    return {p: statistics.median(r[f"{p}_seconds"] / r["steps"] for r in records) for p in PHASES}


def table(results: list[Result]) -> str:
    """The results as a table, then the median and worst absolute error against the targets."""
    lines = [
        f"{'configuration':<26} {'predicted ms':>12} {'measured ms':>12} {'spread ms':>17} {'error':>7} "
        f"{'fastest':>8}  {'compute':>8} {'sample':>7} {'fetch':>7} {'halo':>7} {'allred':>7}  load",
    ]
    for r in results:
        parts = " ".join(f"{r.parts[p] * 1e3:>{w}.2f}" for p, w in zip(PARTS, (8, 7, 7, 7, 7)))
        lines.append(
            f"{r.name:<26} {r.predicted * 1e3:>12.2f} {r.measured * 1e3:>12.2f} "
            f"{r.low * 1e3:>8.2f}-{r.high * 1e3:<8.2f} {r.error:>+7.1%} {r.error_fastest:>+8.1%}  {parts}  "
            f"{r.load_before:.1f}-{r.load_after:.1f}"
        )
        if r.phases:
            measured = ", ".join(f"{p} {r.phases[p] * 1e3:.2f}" for p in PHASES)
            lines.append(f"{'':<26} measured ms a step: {measured}")
    if results:
        errors = [abs(r.error) for r in results]
        worst = max(results, key=lambda r: abs(r.error))
        median = statistics.median(errors)
        fastest = [abs(r.error_fastest) for r in results]
        lines.append(
            f"against each run's fastest epoch: median |error| {statistics.median(fastest):.1%}, "
            f"worst {max(fastest):.1%}"
        )
        lines.append(
            f"{len(results)} configurations: median |error| {median:.1%} (target <= {TARGET_MEDIAN:.0%}: "
            f"{'met' if median <= TARGET_MEDIAN else 'missed'}), worst {abs(worst.error):.1%} ({worst.name}; "
            f"target <= {TARGET_WORST:.0%}: {'met' if abs(worst.error) <= TARGET_WORST else 'missed'})"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--work-dir", type=Path, default=Path("step-time-work"), help="partition sets, calibrations, metrics"
    )
    parser.add_argument("--configs", help="comma-separated configuration names (default: all)")
    parser.add_argument("--results", type=Path, help="JSON lines of results (default: WORK_DIR/results.jsonl)")
    parser.add_argument("--table", action="store_true", help="print the table of the results file and exit")
    parser.add_argument("--list", action="store_true", help="print each configuration's command and exit")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs commgraph")
    opts = parser.parse_args()
    results_file = opts.results or opts.work_dir / "results.jsonl"
    if opts.list:
        for c in CONFIGS.values():
            command = f"train {c.graph} --workers {c.workers} --model {c.model} {' '.join(c.args)}"
            print(f"{c.name:<26} {command} --epochs {c.epochs}")
        return 0
    if opts.table:
        found = {}
        for line in results_file.read_text().splitlines():
            result = Result(**json.loads(line))
            found[result.name] = result  # the latest run of each configuration
        print(table([found[n] for n in CONFIGS if n in found]))
        return 0
    names = opts.configs.split(",") if opts.configs else list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; --list names them")
    opts.work_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for name in names:
        started = time.perf_counter()
        result = measure(CONFIGS[name], opts.work_dir, opts.python)
        results.append(result)
        with results_file.open("a") as out:
            out.write(json.dumps(asdict(result)) + "\n")
        print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
