"""Memory of real ``commgraph`` jobs: peak PSS of the whole process tree, against issue 38's targets.

Each scenario is a ``commgraph`` CLI command run as a user runs it (``python -m commgraph ...`` as
a subprocess, with ``--python``, default this interpreter, and ``PYTHONPATH`` set to this checkout's
``src``). Every 0.5 s (``--every``) the benchmark sums the proportional set size (PSS, from
``/proc/PID/smaps_rollup``: a page shared by k processes counts 1/k in each, so the sum is what the
tree really costs the machine) of the command and all its descendants; a sample of many large
processes can take longer than the period (the kernel walks their page tables), so the table gives
the samples taken and their mean spacing. Per scenario it reports:

- the machine peak (the largest such sum) and each process's own peak (the command's first, then
  the others from largest; processes under 0.05 GB left out);
- the growth of ``/dev/shm`` during the run (segments nobody maps would be missed by PSS);
- wall seconds and, for training, steps per second from the run's ``--metrics-out`` records
  (training steps only; evaluation excluded);
- for ``train``, the estimate of ``train ... --dry-run --json`` (``machine_peak_bytes``,
  ``worker_peak_bytes``) beside the measured peak, their ratio and the dry run's seconds; a
  commgraph without ``--dry-run`` gives "n/a" with its error line;
- the issue's target for the scenario and whether the peak meets it.

With ``--cap-gb G`` a tree whose sum passes G GB is killed (SIGKILL to every process in it) and the
row says "capped" (its peak is then "> G"); ``--time-limit S`` kills a tree still running after S
seconds ("timeout"). A job that refuses to start (exit 2, e.g. an estimate over the available
memory) is "refused" with its one-line reason; a scenario made to not fit meets its target only so,
within 10 s. With ``--repeats N`` every figure is the median of N
runs, spread (min-max) beside it.

Partition sets and the products-sized ``.npz`` are made once under ``--work-dir`` by their own
scenarios (``graph-products``, ``partition-*``), measured like the rest, and reused by path by the
training scenarios that need them (made on first need; ``--remake`` makes them again). Scenarios:

    cora-4                   train cora --workers 4 (the demo: 200 epochs, g3)          <= 1.6 GB
    sampled-100k             100k-node DGS-regime graph, METIS set, 8 workers, neighbor <= 5 GB
    full-100k                the same set, full-graph, 1 epoch                          <= 4 GB
    dgs-500k                 the thesis's DGS run: 500k nodes, 8 workers, 3 x 20 steps  <= 12 GB
    dgs-500k-noisy           the same on the graph with noise=50 (neighbor: not 1.000)   <= 12 GB
    neighbor-500k-noisy      its baseline: neighbor, same options                       <= 12 GB
    products                 products-sized graph, METIS set, 8 workers, 20 steps       <= 10 GB
    products-1               the same graph and model, 1 worker (benchmarks/dgl_baseline.py's row)
    partition-products-metis partition make of the products-sized graph, METIS, 8 parts <= 8 GB
    partition-products-g3    the same with g3                                           <= 8 GB
    refuse-products-1        a run that cannot fit (full-graph, hidden 4096, 1 worker)  refused in <= 10 s

Run it alone on the machine (it takes most of it), e.g.::

    .venv/bin/python benchmarks/memory.py \\
        --scenarios cora-4,sampled-100k,full-100k --cap-gb 20
    python benchmarks/memory.py --list     # every scenario's commands
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from memory_scenarios import DEFAULT_SCENARIOS, SCENARIOS, Scenario
from pss import CHECKOUT, GB, Measurement, commgraph_argv, commgraph_env, measure, spread

# ---------------------------------------------------------------------------------------------
# One scenario's row


@dataclass
class Estimate:
    """``train ... --dry-run --json``: the estimate, or why there is none."""

    machine_peak_bytes: int | None
    worker_peak_bytes: int | None
    seconds: float
    error: str = ""
    report: dict = field(default_factory=dict)  # the whole JSON object


@dataclass
class Row:
    """A scenario's figures over its repeats."""

    scenario: str
    command: str
    runs: list[Measurement]
    target_gb: float | None
    refuse_within: float | None
    note: str
    estimate: Estimate | None = None
    steps_per_second: list[float] = field(default_factory=list)  # one per repeat that wrote metrics

    @property
    def status(self) -> str:
        bad = [run.status for run in self.runs if run.status != "ok"]
        return bad[0] if bad else "ok"

    @property
    def target(self) -> str:
        if self.refuse_within is not None:
            return f"refused in <= {self.refuse_within:g} s"
        return "-" if self.target_gb is None else f"<= {self.target_gb:g}"

    @property
    def met(self) -> str:
        """Whether every repeat met the target ("-": no target)."""
        if self.refuse_within is not None:
            ok = all(run.status == "refused" and run.seconds <= self.refuse_within for run in self.runs)
        elif self.target_gb is not None:
            ok = self.status == "ok" and max(self.peaks()) <= self.target_gb
        else:
            return "-"
        return "yes" if ok else "no"

    def peaks(self) -> list[float]:
        return [run.peak_bytes / GB for run in self.runs]


def dry_run(python: str, args: list[str]) -> Estimate:
    """The command's ``--dry-run --json`` estimate (its ``machine_peak_bytes`` and
    ``worker_peak_bytes``); a commgraph without the option gives the error line instead."""
    started = time.perf_counter()
    proc = subprocess.run(
        commgraph_argv(python, [*args, "--dry-run", "--json"]), env=commgraph_env(), capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    report = _last_json_object(proc.stdout)
    if proc.returncode != 0 or report is None:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return Estimate(None, None, seconds, f"rc {proc.returncode}: {lines[-1] if lines else 'no output'}")
    return Estimate(report.get("machine_peak_bytes"), report.get("worker_peak_bytes"), seconds, report=report)


def _last_json_object(text: str) -> dict | None:
    try:
        whole = json.loads(text)
        return whole if isinstance(whole, dict) else None
    except ValueError:
        pass
    for line in reversed(text.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return None


def steps_per_second(metrics: Path) -> float | None:
    """Training steps per second of a ``--metrics-out`` file: its epochs' steps over their training
    seconds (rank 0's, evaluation excluded); None when the run wrote no epoch."""
    if not metrics.is_file():
        return None
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    seconds = sum(r["epoch_seconds"] for r in records)
    return sum(r.get("steps", 1) for r in records) / seconds if records and seconds > 0 else None


def run_scenario(scenario: Scenario, opts) -> Row:
    """``--repeats`` runs of one scenario under the sampler (training ones with ``--metrics-out``
    and ``--quiet``), after its ``--dry-run --json`` estimate."""
    args = scenario.argv(opts.work_dir)
    if scenario.makes and (opts.work_dir / scenario.makes).exists():
        args.append("--force")  # asked for again, or --remake: measure making it anew
    estimate = dry_run(opts.python, args) if scenario.trains and not opts.no_estimate else None
    runs, rates = [], []
    for repeat in range(opts.repeats if not scenario.makes else 1):
        extra = []
        metrics = opts.work_dir / "runs" / f"{scenario.name}-{repeat}.jsonl"
        if scenario.trains:
            metrics.parent.mkdir(parents=True, exist_ok=True)
            metrics.unlink(missing_ok=True)
            extra = ["--quiet", "--metrics-out", str(metrics)]
        print(f"# {scenario.name} [{repeat + 1}]: {shlex.join(['commgraph', *args])}", file=sys.stderr, flush=True)
        run = measure(
            commgraph_argv(opts.python, [*args, *extra]),
            env=commgraph_env(),
            cap_bytes=opts.cap_gb * GB if opts.cap_gb else None,
            time_limit=opts.time_limit,
            every=opts.every,
        )
        print(
            f"#   {run.status} peak {run.peak_bytes / GB:.2f} GB in {run.seconds:.1f} s"
            + (f"\n#   {run.stderr_tail}" if run.status != "ok" else ""),
            file=sys.stderr,
            flush=True,
        )
        runs.append(run)
        rate = steps_per_second(metrics) if scenario.trains else None
        if rate is not None:
            rates.append(rate)
    return Row(
        scenario.name,
        shlex.join(["commgraph", *args]),
        runs,
        scenario.target_gb,
        scenario.refuse_within,
        scenario.note,
        estimate,
        rates,
    )


def plan_scenarios(names: list[str], work: Path, remake: bool) -> list[Scenario]:
    """The scenarios to run in order: each preceded by the scenarios that make what it reads, when
    that is not under ``work`` yet (or ``remake``); each at most once."""
    order: list[Scenario] = []

    def visit(name: str, asked: bool) -> None:
        scenario = SCENARIOS[name]
        for need in scenario.needs:
            visit(need, False)
        made = scenario.makes is not None and (work / scenario.makes).exists()
        if scenario not in order and (asked or remake or not made):
            order.append(scenario)

    for name in names:
        visit(name, True)
    return order


# ---------------------------------------------------------------------------------------------
# The table


def process_peaks(run: Measurement) -> str:
    """The command's own peak, then the other processes' (largest first, those >= 0.05 GB)."""
    others = [f"{b / GB:.2f}" for b in run.other_peak_bytes if b >= 0.05 * GB][:10]
    return f"{run.root_peak_bytes / GB:.2f}" + (" / " + " ".join(others) if others else "")


def table(rows: list[Row]) -> str:
    head = (
        "| scenario | status | machine peak GB | per-process peaks GB (command / others) | /dev/shm +GB | target "
        "| met? | estimate GB (worker) | estimate/measured | dry run s | seconds | samples (mean s apart) "
        "| train steps/s | command |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for row in rows:
        peaks = row.peaks()
        peak = spread(peaks) if row.status != "capped" else f"> {max(peaks):.2f} (capped)"
        estimate, ratio, dry_seconds = "-", "-", "-"
        if row.estimate is not None:
            dry_seconds = f"{row.estimate.seconds:.1f}"
            if row.estimate.machine_peak_bytes is None:
                estimate = f"n/a ({row.estimate.error[:80]})"
            else:
                estimate = f"{row.estimate.machine_peak_bytes / GB:.2f}"
                if row.estimate.worker_peak_bytes is not None:
                    estimate += f" ({row.estimate.worker_peak_bytes / GB:.2f})"
                if row.status == "ok":
                    ratio = row.estimate.machine_peak_bytes / GB / statistics.median(peaks)
                    ratio = f"{ratio:.2f} ({'within' if abs(ratio - 1) <= 0.25 else 'outside'} +-25%)"
        last = row.runs[-1]
        lines.append(
            " | ".join(
                [
                    f"| {row.scenario}",
                    row.status,
                    peak,
                    process_peaks(last),
                    f"{last.shm_peak_bytes / GB:.2f}",
                    row.target,
                    row.met,
                    estimate,
                    ratio,
                    dry_seconds,
                    spread([run.seconds for run in row.runs], "{:.1f}"),
                    f"{last.samples} ({last.seconds / max(last.samples, 1):.1f})",
                    spread(row.steps_per_second),
                    f"`{row.command}` |",
                ]
            )
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--scenarios", default=",".join(DEFAULT_SCENARIOS), help="comma-separated scenario names (default: %(default)s)"
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs per scenario (scenarios that make files: 1)")
    parser.add_argument("--cap-gb", type=float, help="kill a process tree whose PSS sum passes this many GB")
    parser.add_argument("--time-limit", type=float, help="kill a command still running after this many seconds")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples (default 0.5)")
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=Path("/tmp/commgraph-membench"),
        help="partition sets, the .npz and metrics files (default %(default)s)",
    )
    parser.add_argument("--remake", action="store_true", help="make the .npz and partition sets again")
    parser.add_argument("--no-estimate", action="store_true", help="skip the --dry-run --json estimates")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs commgraph")
    parser.add_argument("--json-out", type=Path, help="every measurement as JSON")
    parser.add_argument("--list", action="store_true", help="print the scenarios' commands and stop")
    opts = parser.parse_args()
    names = [n for n in opts.scenarios.split(",") if n]
    unknown = sorted(set(names) - SCENARIOS.keys())
    if unknown:
        parser.error(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    if opts.list:
        for scenario in SCENARIOS.values():
            target = f"  [target <= {scenario.target_gb:g} GB]" if scenario.target_gb else ""
            print(f"{scenario.name:26s} commgraph {shlex.join(scenario.argv(opts.work_dir))}{target}")
        return
    opts.work_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for scenario in plan_scenarios(names, opts.work_dir, opts.remake):
        rows.append(run_scenario(scenario, opts))
        if scenario.makes and rows[-1].status != "ok":
            print(f"# {scenario.name} did not make {scenario.makes}: stopping", file=sys.stderr)
            break
    print(
        f"src at commit {_commit()}, {os.cpu_count()} cores, {_memory_gb():.0f} GB, PSS every {opts.every} s"
        + (f", cap {opts.cap_gb:g} GB" if opts.cap_gb else "")
        + f", {opts.repeats} repeat(s)\n"
    )
    print(table(rows))
    for row in rows:
        if row.note:
            print(f"\n{row.scenario}: {row.note}")
        if row.status != "ok":
            print(f"{row.scenario}: {row.status} (rc {row.runs[-1].returncode}): {row.runs[-1].stderr_tail}")
        if row.estimate is not None and row.estimate.report:
            print(f"{row.scenario}: --dry-run --json: {json.dumps(row.estimate.report, sort_keys=True)}")
    if opts.json_out:
        opts.json_out.write_text(json.dumps([asdict(row) for row in rows], indent=1))


def _commit() -> str:
    """The last commit that changed this checkout's ``src`` (the code measured), and whether ``src``
    has changes not committed yet."""
    git = ["git", "-C", str(CHECKOUT)]
    commit = subprocess.run([*git, "log", "-1", "--format=%h", "--", "src"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "src"], capture_output=True, text=True)
    return commit.stdout.strip() + (" plus uncommitted changes" if dirty.stdout.strip() else "")


def _memory_gb() -> float:
    with open("/proc/meminfo") as handle:
        return int(handle.readline().split()[1]) * 1024 / GB


if __name__ == "__main__":
    main()
