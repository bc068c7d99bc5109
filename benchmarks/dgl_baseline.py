"""DGL against commgraph on one machine: seeds per second and peak memory, side by side (issue 38), one
process a side, or (``--workers W``) W DDP trainers against W commgraph workers (issue 58).

What users run instead of commgraph on a graph that fits one machine is DGL's ``NeighborSampler`` and
``DataLoader``. DGL 2.1.0 is its newest wheel for Python 3.11 and loads with torch 2.0-2.2.1 only, so
it never becomes a dependency of the package: this benchmark makes its own environment,
``.bench-envs/dgl`` (git-ignored; elsewhere with ``--dgl-env DIR`` or ``$COMMGRAPH_DGL_ENV``), with
``python -m venv`` and pip::

    torch==2.2.1 dgl==2.1.0 torchdata==0.7.1 "numpy<2" "pandas<2.3" pydantic pyyaml

Then, on one graph written once as a commgraph ``.npz`` (``commgraph graph convert SPEC --out
FILE.npz`` with this checkout's environment), it measures under the same whole-tree PSS sampler as
``benchmarks/memory.py`` (every 0.5 s, :func:`pss.measure`):

- ``dgl-train``: ``benchmarks/dgl_train.py`` in the DGL environment: the graph as a DGLGraph (the
  in-edge CSR as DGL's CSC), GraphSAGE (``SAGEConv`` mean, ``--layers`` layers, ``--hidden``),
  ``NeighborSampler(fanout)`` and ``DataLoader`` over the training nodes, ``--batch-size``, Adam,
  ``--steps`` steps in one process;
- ``dgl-infer``: the same script's layer-wise inference (every node, one layer at a time over all
  neighbours, ``MultiLayerFullNeighborSampler(1)`` blocks of ``--infer-batch-size`` nodes, 4096 as in
  DGL's own example), measured apart from training;
- ``commgraph-1``: ``commgraph train PARTDIR --workers 1 --sampler neighbor`` with the same model,
  fanouts, batch and steps (one epoch of ``--steps`` steps, then the evaluation ``train`` always runs
  after its last epoch, inside the measured peak), from a 1-part set of the same ``.npz`` made once
  (``partition make FILE.npz --parts 1 --method chunk``). It runs two epochs of ``--steps`` steps
  and evaluates after the second only (``--epochs 2 --eval-every 2``): the first epoch is the
  measured one, its seeds per second the seeds of its steps (:func:`epoch_seeds`: the training
  nodes split into batches of at most ``--batch-size``, as commgraph splits them) over its training
  seconds in its ``--metrics-out`` line and its peak the tree's peak until that line is written (the training
  peak, against ``dgl-train``'s); the whole run's peak, the second epoch and the evaluation
  included, is reported beside it;
- ``commgraph-predict``: ``commgraph predict PARTDIR --checkpoint-dir DIR`` with the model
  ``commgraph-1`` saved: commgraph's full-graph evaluation pass on its own, against ``dgl-infer``.

``--fanout`` is given in DGL's order, the first GNN layer's (the input rows') first: DGL's
``NeighborSampler([15, 10, 5])`` draws 5 neighbours for each seed and 15 at the outermost hop.
commgraph's ``--fanout`` lists hops from the seeds, so ``commgraph-1`` gets the list reversed
(``5,10,15``): both sample the same number of neighbours at every layer.

With ``--pairs N`` (N >= 3), ``dgl-train`` and ``commgraph-1`` are measured instead by the baseline
protocol of issue 58 (``benchmarks/protocol.py``): alternately, A (DGL) then B (commgraph), N times,
``--threads`` threads each, ``--steps`` warm-up steps excluded on both sides (DGL's ``--warmup``,
commgraph's first epoch) and the next ``--steps`` measured (commgraph's second epoch; it runs a
third, evaluated after it, so that both peaks are training's); the load settled before each run and
the other work beside it, a pair flagged when either is above its limit; the median pair ratio with
its min and max (``--json-out`` keeps every run). The other rows run after, as below.

With ``--pairs N --workers W`` (W > 1) the protocol compares W processes on each side, and no
other row runs: A is ``dgl_train.py train --trainers W``, W trainers as DGL's multi-device GraphSAGE
example starts them (``torch.multiprocessing.spawn``, a Gloo process group, the model in
``DistributedDataParallel``, ``DataLoader(..., use_ddp=True)`` giving each trainer its share of the
training nodes, the graph made before the spawn and shared); B is ``commgraph train SET --workers W``
on a W-part set of the same ``.npz`` made once by ``partition make FILE.npz --parts W --method
METHOD`` (``--partition``, default g3: the set ``commgraph train FILE.npz --workers W`` makes). Each
side gets ``--threads`` threads in all, ``--threads`` / W per process (DGL: ``OMP_NUM_THREADS``
before the spawn; commgraph: ``--threads``). ``--batch-size`` is per process on both sides, as each
side's users pass it: each DGL trainer draws exactly that many seeds a step; commgraph's worker with
the most training nodes splits them into batches of at most that many and the other worker its own
into as many batches, so its step trains a few seeds fewer (the setup line says how many). Each
side's rate is every process's seeds over rank 0's measured seconds (DGL: the trainers' seeds summed
after the clock; commgraph: :func:`epoch_seeds` over its second epoch's seconds).

Each row prints the peak PSS of the process tree, the command's seconds (loading included), seeds
per second and milliseconds per step; the closing lines give commgraph/DGL for seeds per second
(target >= 0.8) and peak memory (target <= 1.0), and the two inference passes side by side.

    python benchmarks/dgl_baseline.py [--graph sbm:nodes=2450000,classes=47,features=100,degree=50,seed=0]
                                      [--steps 20] [--repeats 1] [--infer-batch-size 4096]
                                      [--pairs 3 --threads 2 --json-out FILE] [--dgl-env DIR]
                                      [--workers 1 --partition g3]
                                      [--rows dgl-train,dgl-infer,commgraph-1,commgraph-predict]
                                      [--cap-gb 20] [--setup-only] [--work-dir DIR]

Run it alone on the machine: the install downloads about 3 GB and each row may
take minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import venv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_scenarios import PRODUCTS  # noqa: E402
from protocol import Setup, Side, json_rate, report, run_pairs, threads_env  # noqa: E402
from pss import CHECKOUT, GB, Measurement, commgraph_argv, commgraph_env, measure, spread  # noqa: E402

DEFAULT_ENV_DIR = CHECKOUT / ".bench-envs" / "dgl"
ENV_VARIABLE = "COMMGRAPH_DGL_ENV"  # another place for the environment (``--dgl-env`` sets it)
REQUIREMENTS = ("torch==2.2.1", "dgl==2.1.0", "torchdata==0.7.1", "numpy<2", "pandas<2.3", "pydantic", "pyyaml")
TRAIN_SCRIPT = Path(__file__).resolve().parent / "dgl_train.py"
ROWS = ("dgl-train", "dgl-infer", "commgraph-1", "commgraph-predict")


def env_dir() -> Path:
    """The DGL environment: ``$COMMGRAPH_DGL_ENV``, else ``.bench-envs/dgl`` in this checkout."""
    return Path(os.environ.get(ENV_VARIABLE, DEFAULT_ENV_DIR))


def env_python() -> Path:
    """The DGL environment's interpreter."""
    return env_dir() / "bin" / "python"


def ensure_env() -> Path:
    """Make the DGL environment (:func:`env_dir`) with pip's :data:`REQUIREMENTS` unless it already
    imports dgl.

    Returns:
        Path: the environment's python.
    """
    python = env_python()
    if python.exists() and _imports_dgl(python):
        return python
    print(f"# making {env_dir()} ({' '.join(REQUIREMENTS)})", file=sys.stderr)
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir())
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *REQUIREMENTS], check=True)
    if not _imports_dgl(python):
        sys.exit(f"{env_dir()}: dgl does not import after the install (see the lines above)")
    return python


def _imports_dgl(python: Path) -> bool:
    probe = subprocess.run(
        [str(python), "-c", "import dgl, torch; print(dgl.__version__, torch.__version__)"],
        capture_output=True,
        text=True,
        env={**os.environ, "DGLBACKEND": "pytorch"},
    )
    if probe.returncode == 0:
        print(f"# {env_dir()}: dgl {probe.stdout.strip()}", file=sys.stderr)
    return probe.returncode == 0


@dataclass
class BaselineRow:
    """One measured command over its repeats, and the rates it reported."""

    name: str
    command: list[str]
    runs: list[Measurement] = field(default_factory=list)
    seeds_per_second: list[float] = field(default_factory=list)  # one per repeat that reported
    step_ms: list[float] = field(default_factory=list)
    reports: list[dict] = field(default_factory=list)  # dgl_train.py's JSON line, commgraph predict's --json

    @property
    def ok(self) -> bool:
        return bool(self.runs) and all(run.status == "ok" for run in self.runs)

    def peak(self) -> float:
        return statistics.median(run.peak_bytes for run in self.runs)

    def training_peak(self) -> float:
        """The peak of the measured training steps: up to the first epoch's metrics line where the
        run measured it apart (``commgraph-1``), else the whole run's."""
        return statistics.median(run.peak_bytes if run.before_bytes is None else run.before_bytes for run in self.runs)


def graph_files(graph: str, work: Path, parts: int = 1, method: str = "chunk") -> tuple[Path, Path]:
    """Where the graph's ``.npz`` and its ``parts``-part partition set by ``method`` live: for the
    products-sized graph in one part the very files ``benchmarks/memory.py``'s ``graph-products``
    and ``partition-products-1`` make (one part is the same set by every method)."""
    slug = "products" if graph == PRODUCTS else "".join(c if c.isalnum() else "-" for c in graph).strip("-")
    return work / f"{slug}.npz", work / (f"{slug}-1" if parts == 1 else f"{slug}-{method}-{parts}")


def prepare(graph: str, work: Path, python: str, parts: int = 1, method: str = "chunk") -> tuple[Path, Path]:
    """Make the graph's ``.npz`` and its ``parts``-part set by ``method`` once (unmeasured here;
    memory.py measures them)."""
    npz, partdir = graph_files(graph, work, parts, method)
    make = ["partition", "make", str(npz), "--parts", str(parts), "--method", method, "--out", str(partdir)]
    for made, args in ((npz, ["graph", "convert", graph, "--out", str(npz)]), (partdir, make)):
        if not made.exists():
            print(f"# commgraph {' '.join(args)}", file=sys.stderr, flush=True)
            subprocess.run(commgraph_argv(python, args), env=commgraph_env(), check=True)
    return npz, partdir


def dgl_row(name: str, npz: Path, opts) -> BaselineRow:
    """``dgl-train`` (``--repeats`` runs) or ``dgl-infer`` (one) in the DGL environment."""
    mode = "train" if name == "dgl-train" else "infer"
    row = BaselineRow(
        name,
        [
            str(env_python()),
            str(TRAIN_SCRIPT),
            str(npz),
            mode,
            "--steps",
            str(opts.steps),
            "--fanout",
            opts.fanout,
            "--hidden",
            str(opts.hidden),
            "--batch-size",
            str(opts.batch_size),
            "--infer-batch-size",
            str(opts.infer_batch_size),
        ],
    )
    for repeat in range(opts.repeats if mode == "train" else 1):
        out = opts.work_dir / "runs" / f"{name}-{repeat}.json"
        run = _measured(name, row.command, opts, stdout_path=out, env={**os.environ, "DGLBACKEND": "pytorch"})
        row.runs.append(run)
        if run.status == "ok":
            row.reports.append(json.loads(out.read_text()))
            if mode == "train":
                row.seeds_per_second.append(row.reports[-1]["seeds_per_second"])
                row.step_ms.append(row.reports[-1]["step_ms"])
    return row


def commgraph_fanout(dgl_fanout: str) -> str:
    """commgraph's ``--fanout`` for DGL's: the same per-layer counts, listed from the seeds' hop
    (DGL lists them from the first GNN layer's)."""
    return ",".join(reversed(dgl_fanout.split(",")))


def commgraph_train_args(partdir: Path, opts, metrics: Path, checkpoints: Path, epochs: int = 2) -> list[str]:
    """``commgraph-W``'s arguments (W: ``--workers``, one per part of ``partdir``, each with
    ``--threads`` / W compute threads): ``epochs`` epochs of ``--steps`` steps, evaluated after the
    last only (its metrics line is written after that evaluation, the earlier epochs' before it)."""
    return [
        "train",
        str(partdir),
        "--workers",
        str(opts.workers),
        "--threads",
        str(max(1, opts.threads // opts.workers)),
        "--sampler",
        "neighbor",
        "--model",
        "sage",
        "--layers",
        str(len(opts.fanout.split(","))),
        "--fanout",
        commgraph_fanout(opts.fanout),
        "--hidden",
        str(opts.hidden),
        "--batch-size",
        str(opts.batch_size),
        "--epochs",
        str(epochs),
        "--eval-every",
        str(epochs),
        "--steps-per-epoch",
        str(opts.steps),
        "--quiet",
        "--metrics-out",
        str(metrics),
        "--checkpoint-dir",
        str(checkpoints),
    ]


def epoch_seeds(partdir: Path, batch_size: int, steps: int) -> int:
    """The seeds every worker of ``commgraph train PARTDIR --batch-size B`` trains in an epoch's
    first ``steps`` steps: each part's training nodes split into as many batches as the part with
    the most needs at ``batch_size`` (commgraph's own :func:`~commgraph.train.minibatch.epoch_steps`
    and :func:`~commgraph.train.minibatch.seed_batches`), the first ``steps`` of each."""
    from commgraph.train.minibatch import epoch_steps, seed_batches

    counts = [int(np.count_nonzero(np.load(part / "train_mask.npy"))) for part in sorted(partdir.glob("part-*"))]
    batches = epoch_steps(counts, batch_size)
    rng = np.random.default_rng(0)  # the split's sizes do not depend on the shuffle
    return sum(
        int(seeds.size)
        for count in counts
        for seeds in seed_batches(np.arange(count), batches, rng)[:steps]
        if seeds is not None
    )


def epoch_rate(record: dict, partdir: Path, batch_size: int) -> float:
    """Seeds per second of a commgraph ``--metrics-out`` epoch record: every worker's seeds
    (:func:`epoch_seeds`) over rank 0's training seconds."""
    return epoch_seeds(partdir, batch_size, record["steps"]) / record["epoch_seconds"]


def commgraph_rows(names: list[str], partdir: Path, opts) -> list[BaselineRow]:
    """``commgraph-1`` (``--repeats`` runs, the last one's checkpoint kept) and ``commgraph-predict``."""
    checkpoints = opts.work_dir / "runs" / "commgraph-1-checkpoint"
    rows = []
    if "commgraph-1" in names:
        metrics = opts.work_dir / "runs" / "commgraph-1.jsonl"
        args = commgraph_train_args(partdir, opts, metrics, checkpoints)
        row = BaselineRow("commgraph-1", ["commgraph", *args])
        for _ in range(opts.repeats):
            shutil.rmtree(checkpoints, ignore_errors=True)  # commgraph-predict reads the last run's model only
            metrics.unlink(missing_ok=True)
            run = _measured(
                "commgraph-1", commgraph_argv(opts.python, args), opts, env=commgraph_env(), until=has_lines(metrics)
            )
            row.runs.append(run)
            first = _first_record(metrics) if run.status == "ok" else None
            if first is not None:
                row.seeds_per_second.append(epoch_rate(first, partdir, opts.batch_size))
                row.step_ms.append(first["epoch_seconds"] / first["steps"] * 1e3)
                row.reports.append(first)
        rows.append(row)
    if "commgraph-predict" in names and not (checkpoints / "checkpoint.pt").is_file():
        print(f"# commgraph-predict: skipped, no model in {checkpoints} (commgraph-1 did not finish)", file=sys.stderr)
    elif "commgraph-predict" in names:
        args = ["predict", str(partdir), "--checkpoint-dir", str(checkpoints), "--json", "--quiet"]
        out = opts.work_dir / "runs" / "commgraph-predict.json"
        row = BaselineRow("commgraph-predict", ["commgraph", *args])
        row.runs.append(
            _measured(row.name, commgraph_argv(opts.python, args), opts, stdout_path=out, env=commgraph_env())
        )
        rows.append(row)
    return rows


def has_lines(path: Path, count: int = 1):
    """Whether ``path`` holds ``count`` complete lines yet (the first ``count`` epochs' metrics)."""
    return lambda: path.is_file() and path.read_bytes().count(b"\n") >= count


def dgl_side(npz: Path, opts) -> Side:
    """Side A of the protocol: ``dgl_train.py train --trainers W`` (W: ``--workers``; W > 1: W DDP
    trainers, each with ``--threads`` / W threads and ``--batch-size`` seeds a step), ``--steps``
    warm-up steps then ``--steps`` measured."""
    return Side(
        "dgl-train" if opts.workers == 1 else f"dgl-train-{opts.workers}",
        [str(env_python()), str(TRAIN_SCRIPT), str(npz), "train", "--trainers", str(opts.workers), "--warmup",
         str(opts.steps), "--steps", str(opts.steps), "--fanout", opts.fanout, "--hidden", str(opts.hidden),
         "--batch-size", str(opts.batch_size)],
        json_rate("seeds_per_second"),
        env=threads_env(opts.threads, {**os.environ, "DGLBACKEND": "pytorch"}),
    )  # fmt: skip


def commgraph_side(partdir: Path, opts) -> Side:
    """Side B of the protocol: ``commgraph train PARTDIR --workers W``, three epochs of ``--steps``
    steps: the first the warm-up, the second measured (its metrics line: every worker's seeds over
    rank 0's seconds, :func:`epoch_rate`, and the peak up to that line), the third evaluated after
    it, so that the second epoch's line is written before the evaluation pass."""
    runs = opts.work_dir / "runs"
    name = f"commgraph-{opts.workers}"
    metrics, checkpoints = runs / f"{name}.jsonl", runs / f"{name}-checkpoint"

    def second_epoch_rate(_stdout: Path) -> float | None:
        lines = metrics.read_text().splitlines() if metrics.is_file() else []
        return epoch_rate(json.loads(lines[1]), partdir, opts.batch_size) if len(lines) > 1 else None

    return Side(
        name,
        commgraph_argv(opts.python, commgraph_train_args(partdir, opts, metrics, checkpoints, epochs=3)),
        second_epoch_rate,
        env=threads_env(opts.threads, commgraph_env()),
        until=has_lines(metrics, 2),
        before=lambda: (metrics.unlink(missing_ok=True), shutil.rmtree(checkpoints, ignore_errors=True)),
    )


def protocol_pairs(npz: Path, partdir: Path, opts) -> dict:
    """``dgl-train`` (A, :func:`dgl_side`) against ``commgraph-W`` (B, :func:`commgraph_side`) by
    the baseline protocol (:mod:`protocol`), ``--pairs`` alternating pairs with ``--threads``
    threads each side in all. Warm-up on both sides: ``--steps`` steps, excluded; measured: the
    next ``--steps``; the peak compared is training's on both sides."""
    dgl, ours = dgl_side(npz, opts), commgraph_side(partdir, opts)
    workers = opts.workers
    first_step = epoch_seeds(partdir, opts.batch_size, 1)
    per_process = max(1, opts.threads // workers)
    split = (
        f"at most {opts.batch_size} on the worker with the most training nodes, every other worker's split into as "
        f"many batches, {first_step:,} in all in its first step"
        if workers > 1
        else f"the training nodes in batches of at most {opts.batch_size}, {first_step:,} in its first step"
    )
    batch = (
        f"{opts.batch_size} seeds per process"
        + (f", {workers * opts.batch_size} a step in all (DGL: each trainer's share, use_ddp)" if workers > 1 else "")
        + f"; commgraph: {split}; each side's rate counts the seeds it trained"
    )
    setup = Setup(
        graph=f"{opts.graph} ({npz.name}; commgraph: its "
        + ("1-part chunk set" if workers == 1 else f"{workers}-part {opts.partition} set, {partdir.name}")
        + ")",
        threads=opts.threads,
        seeds="the training nodes, shuffled by each side's own generator",
        fanouts={dgl.name: opts.fanout, ours.name: commgraph_fanout(opts.fanout)},
        batch=batch,
        model=f"GraphSAGE mean, {len(opts.fanout.split(','))} layers, hidden {opts.hidden}, dropout 0.5"
        + (f"; {workers} processes of {per_process} thread{'s' if per_process > 1 else ''} each, gradients "
           f"summed across them (DGL: DistributedDataParallel over Gloo; commgraph: its all-reduce)"
           if workers > 1 else ""),
        optimiser="Adam lr 0.01, weight decay 5e-4",
        warmup=opts.steps,
        steps=opts.steps,
        unit="seeds",
    )  # fmt: skip
    runs = opts.work_dir / "runs"
    pairs = run_pairs(dgl, ours, opts.pairs, runs, opts.cap_gb * GB if opts.cap_gb else None, opts.time_limit)
    return report(setup, pairs, targets=(1.2, 0.8))  # issue 58: 1.2x the seeds per second at 0.8x the memory


def _first_record(metrics: Path) -> dict | None:
    """The first epoch's ``--metrics-out`` record (None: the run wrote none)."""
    lines = metrics.read_text().splitlines() if metrics.is_file() else []
    return json.loads(lines[0]) if lines else None


def _measured(name: str, command: list[str], opts, **kwargs) -> Measurement:
    (opts.work_dir / "runs").mkdir(parents=True, exist_ok=True)
    print(f"# {name}: {' '.join(command)}", file=sys.stderr, flush=True)
    run = measure(command, cap_bytes=opts.cap_gb * GB if opts.cap_gb else None, time_limit=opts.time_limit, **kwargs)
    print(
        f"#   {run.status} peak {run.peak_bytes / GB:.2f} GB in {run.seconds:.1f} s"
        + (f"\n#   {run.stderr_tail}" if run.status != "ok" else ""),
        file=sys.stderr,
        flush=True,
    )
    return run


def table(rows: list[BaselineRow]) -> str:
    lines = [
        "| row | status | peak GB of the measured steps | peak GB (whole command) | seconds (whole command) "
        "| seeds/s | ms/step | command |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        status = next((run.status for run in row.runs if run.status != "ok"), "ok")
        peaks = [run.peak_bytes / GB for run in row.runs]
        peak = spread(peaks) if status != "capped" else f"> {max(peaks):.2f} (capped)"
        measured = [run.before_bytes / GB for run in row.runs if run.before_bytes is not None]
        lines.append(
            f"| {row.name} | {status} | {spread(measured) if measured else '-'} | {peak} | "
            f"{spread([run.seconds for run in row.runs], '{:.1f}')} | "
            f"{spread(row.seeds_per_second, '{:,.0f}')} | {spread(row.step_ms, '{:.0f}')} | "
            f"`{' '.join(_short(row.command))}` |"
        )
    return "\n".join(lines)


def _short(command: list[str]) -> list[str]:
    """The command with this checkout's paths made relative (a table row stays readable)."""
    return [arg.replace(str(CHECKOUT) + "/", "") for arg in command]


def comparison(rows: list[BaselineRow]) -> list[str]:
    """commgraph against DGL, medians: training (seeds/s >= 0.8x, peak <= 1.0x) and inference."""
    by = {row.name: row for row in rows if row.ok}
    lines = []
    if "commgraph-1" in by and "dgl-train" in by:
        ours, theirs = by["commgraph-1"], by["dgl-train"]
        speed = statistics.median(ours.seeds_per_second) / statistics.median(theirs.seeds_per_second)
        memory = ours.training_peak() / theirs.training_peak()
        lines.append(
            f"training: commgraph/DGL seeds per second {speed:.2f}x (target >= 0.8: "
            f"{'met' if speed >= 0.8 else 'missed'}), peak memory over the measured steps {memory:.2f}x "
            f"(target <= 1.0: {'met' if memory <= 1.0 else 'missed'}; commgraph's whole run, its evaluation "
            f"included: {ours.peak() / theirs.peak():.2f}x)"
        )
    if "commgraph-predict" in by and "dgl-infer" in by:
        ours, theirs = by["commgraph-predict"], by["dgl-infer"]
        report = theirs.reports[0]
        lines.append(
            f"inference: commgraph predict {ours.runs[0].seconds:.1f} s, {ours.peak() / GB:.2f} GB; "
            f"DGL layer-wise {report['seconds']:.1f} s (+{report['load_seconds']:.1f} s load), "
            f"{theirs.peak() / GB:.2f} GB"
        )
    return lines


PHASES = {
    "sample": "sampling (DGL's loader gathers the features as it samples)",
    "fetch": "input rows asked for and received",
    "gather": "input rows read from the feature table",
    "forward": "forward and loss",
    "backward": "backward",
    "optimizer": "optimiser step",
}


def phase_ms(report: dict) -> dict[str, float]:
    """A side's measured step by phase, milliseconds per step: ``dgl_train.py``'s ``phase_ms``, or
    a commgraph epoch record's ``<phase>_seconds`` over its steps."""
    if "phase_ms" in report:
        return report["phase_ms"]
    return {name: report[f"{name}_seconds"] / report["steps"] * 1e3 for name in PHASES}


def profile(rows: list[BaselineRow]) -> list[str]:
    """Where a measured step's time goes on each side (the first run of ``dgl-train`` and
    ``commgraph-1``), as a Markdown table: milliseconds per step by phase, and the whole step."""
    by = {row.name: row for row in rows if row.ok and row.reports}
    if not {"dgl-train", "commgraph-1"} <= set(by):
        return []
    sides = [phase_ms(by[name].reports[0]) for name in ("dgl-train", "commgraph-1")]
    steps = [by[name].step_ms[0] for name in ("dgl-train", "commgraph-1")]
    lines = ["| phase, ms per step | DGL | commgraph |", "|---|---|---|"]
    lines += [f"| {label} | {sides[0][name]:.1f} | {sides[1][name]:.1f} |" for name, label in PHASES.items()]
    return [*lines, f"| the whole step | {steps[0]:.1f} | {steps[1]:.1f} |"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graph", default=PRODUCTS, help="a graph commgraph reads (default: %(default)s)")
    parser.add_argument("--rows", default=",".join(ROWS), help="rows to measure (default %(default)s)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--fanout",
        default="15,10,5",
        help="one entry per layer, DGL's order: the first layer's first (default %(default)s)",
    )
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--infer-batch-size", type=int, default=4096, help="dgl-infer's nodes per block")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each training row (inference: 1)")
    parser.add_argument("--cap-gb", type=float, help="kill a process tree whose PSS sum passes this many GB")
    parser.add_argument("--time-limit", type=float, help="kill a command still running after this many seconds")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/commgraph-membench"))
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs commgraph")
    parser.add_argument("--setup-only", action="store_true", help="make the DGL environment and stop")
    parser.add_argument(
        "--dgl-env", type=Path, help=f"the DGL environment (default: ${ENV_VARIABLE}, else {DEFAULT_ENV_DIR})"
    )
    parser.add_argument(
        "--pairs",
        type=int,
        help="measure dgl-train against commgraph-1 by the baseline protocol (benchmarks/protocol.py): "
        "this many alternating pairs (at least 3), in place of those two rows",
    )
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count(), help="each side's threads in all (--workers split them)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="--pairs: DGL's DDP trainers and commgraph's workers, one process each (default %(default)s)",
    )
    parser.add_argument(
        "--partition",
        choices=("g3", "metis", "chunk", "random"),
        default="g3",
        help="--workers > 1: the method of commgraph's set, one part per worker (default %(default)s, "
        "as commgraph train FILE.npz --workers W partitions it)",
    )
    parser.add_argument("--json-out", type=Path, help="--pairs: write the protocol's JSON here")
    opts = parser.parse_args()
    if opts.workers > 1 and opts.pairs is None:
        parser.error("--workers above 1 needs --pairs (the protocol)")
    if opts.dgl_env is not None:
        os.environ[ENV_VARIABLE] = str(opts.dgl_env.resolve())
    names = [n for n in opts.rows.split(",") if n]
    unknown = sorted(set(names) - set(ROWS))
    if unknown:
        parser.error(f"unknown rows {unknown}; known: {', '.join(ROWS)}")
    if any(n.startswith("dgl") for n in names) or opts.setup_only:
        ensure_env()
    if opts.setup_only:
        return
    opts.work_dir.mkdir(parents=True, exist_ok=True)
    parts, method = (1, "chunk") if opts.workers == 1 else (opts.workers, opts.partition)
    npz, partdir = prepare(opts.graph, opts.work_dir, opts.python, parts, method)
    if opts.pairs is not None:
        result = protocol_pairs(npz, partdir, opts)
        if opts.json_out is not None:
            opts.json_out.write_text(json.dumps(result, indent=1))
        # the other rows are one process's: they run after the one-process protocol only
        names = [n for n in names if n not in ("dgl-train", "commgraph-1")] if opts.workers == 1 else []
    rows = [dgl_row(name, npz, opts) for name in names if name.startswith("dgl")]
    rows += commgraph_rows(names, partdir, opts)
    if not rows:
        return
    print(
        f"graph {opts.graph} ({npz}); {opts.steps} steps, fanout {opts.fanout}, hidden {opts.hidden}, "
        f"batch {opts.batch_size}, GraphSAGE mean; {os.cpu_count()} cores; PSS every 0.5 s\n"
    )
    print(table(rows))
    for line in comparison(rows):
        print(f"\n{line}")
    if lines := profile(rows):
        print("\nwhere a step's time goes (the first measured run of each side):\n" + "\n".join(lines))
    for row in rows:
        for run in row.runs:
            if run.status != "ok":
                print(f"\n{row.name}: {run.status} (rc {run.returncode}): {run.stderr_tail}")


if __name__ == "__main__":
    main()
