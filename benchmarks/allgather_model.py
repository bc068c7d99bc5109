"""DGCL's Fig. 10 here: the simulator's modelled graph all-gather time against the measured time of
the executed plan, for every all-gather planner on Gloo (Cai et al., "DGCL: An Efficient
Communication Library for Distributed GNN Training", EuroSys 2021, Fig. 10: cost model against
measured time).

For each worker count ``N`` (``--workers``, default 2 and 4) the machine's calibrated topology is
``calibrated-N.yaml`` under ``--work-dir``, made by ``commgraph topo calibrate --workers N`` when
absent (:func:`step_time.calibrated`). On it, for Cora and SBM graphs of 5,000, 20,000 and 80,000
nodes (g3 into ``N`` parts), rows of each of ``--widths`` float32 (default 16 and 512), and each planner that exchanges
rows every layer (``replicate`` keeps an L-hop halo and exchanges nothing, so it has no point):

- **modelled**: ``commgraph.plan.price`` of ``plan_allgather(planner, ...)`` on the calibrated
  topology (what ``commgraph plan allgather`` prints);
- **measured**: ``N`` worker processes run the plan's exchange (``gather_halo``), the median over
  ``--repeats`` of the slowest rank's time after a warm-up, every rank starting after a barrier
  (:func:`sim_fidelity.run_workers`).

The figure (``--png``) is a log-log scatter, one marker per planner, with the ``y = x`` line; the
fit is ``log10 measured = a + b log10 modelled`` by least squares: its slope ``b`` and R² are
printed, with R² about ``y = x`` itself (1 - the squared log errors over the log spread) beside
them, and the same over the points that move 1 MB or more (where latency and Python's per-message
work no longer dominate). Target: R² >= 0.9. Run it under the benchmark lock; each worker count takes 1-3 minutes::

    python benchmarks/allgather_model.py --work-dir WORK --png WORK/allgather_model.png --json WORK/rows.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from commgraph.plan import ALLGATHER_PLANNERS
from commgraph.topology import read_yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_fidelity import MIN_BYTES, run_workers  # noqa: E402
from step_time import calibrated  # noqa: E402

GRAPHS = {
    "cora": "cora",
    "sbm-5k": "sbm:nodes=5000,classes=8,features=16,seed=0",
    "sbm-20k": "sbm:nodes=20000,classes=8,features=16,seed=0",
    "sbm-80k": "sbm:nodes=80000,classes=8,features=16,seed=0",
}
PLANNERS = tuple(p for p in ALLGATHER_PLANNERS if p != "replicate")  # replicate exchanges nothing per layer
TARGET_R2 = 0.9
MARKERS = {"p2p": "o", "swap": "s", "spst": "^", "hybrid": "x"}


def fit(modelled: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """The least-squares line of ``log10 measured`` on ``log10 modelled`` (slope, intercept, R²),
    and R² about ``y = x``."""
    x, y = np.log10(modelled), np.log10(measured)
    slope, intercept = np.polyfit(x, y, 1)
    spread = float(np.sum((y - y.mean()) ** 2))
    r2 = 1 - float(np.sum((y - (intercept + slope * x)) ** 2)) / spread
    r2_identity = 1 - float(np.sum((y - x) ** 2)) / spread
    return {"slope": float(slope), "intercept": float(intercept), "r2": r2, "r2_identity": r2_identity}


def plot(rows: list[dict], line: dict[str, float], path: Path) -> None:
    """The log-log scatter of modelled against measured seconds, per planner, with ``y = x``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    for planner in PLANNERS:
        for workers, colour in ((2, "tab:blue"), (4, "tab:orange")):
            mine = [r for r in rows if r["planner"] == planner and r["workers"] == workers]
            if mine:
                ax.scatter(
                    [r["calibrated"] * 1e3 for r in mine],
                    [r["measured"] * 1e3 for r in mine],
                    marker=MARKERS.get(planner, "o"),
                    color=colour,
                    label=f"{planner}, {workers} workers",
                    alpha=0.8,
                )
    values = [r[k] * 1e3 for r in rows for k in ("calibrated", "measured")]
    span = np.array([min(values) / 1.5, max(values) * 1.5])
    ax.plot(span, span, "k--", linewidth=1, label="y = x")
    ax.plot(span, 10 ** (line["intercept"] + line["slope"] * np.log10(span / 1e3)) * 1e3, "k:", linewidth=1)
    ax.set(xscale="log", yscale="log", xlabel="modelled all-gather (ms)", ylabel="measured all-gather (ms)")
    ax.set_title(f"graph all-gather on Gloo: slope {line['slope']:.2f}, R² {line['r2']:.3f}", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", type=Path, default=Path("allgather-model-work"), help="topologies, partitions")
    parser.add_argument("--workers", default="2,4", help="worker counts (default 2,4)")
    parser.add_argument("--widths", default="16,512", help="floats per row (default 16,512)")
    parser.add_argument("--repeats", type=int, default=9, help="timed repeats per case (default 9)")
    parser.add_argument("--png", type=Path, help="write the scatter here")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs commgraph topo calibrate")
    args = parser.parse_args()
    args.widths = [int(w) for w in args.widths.split(",")]
    args.allreduce_bytes = []
    args.work_dir.mkdir(parents=True, exist_ok=True)
    started, rows = time.perf_counter(), []
    for workers in (int(w) for w in args.workers.split(",")):
        topology = read_yaml(calibrated(args.work_dir, workers, args.python))
        folder = args.work_dir / f"run-{workers}"
        folder.mkdir(exist_ok=True)
        print(f"{workers} workers: measuring", file=sys.stderr, flush=True)
        rows += run_workers(workers, args, folder, topology, GRAPHS, PLANNERS)
    print("| graph | planner | workers | row B | MB | modelled ms | measured ms (spread) | measured/modelled |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['case']} | {r['planner']} | {r['workers']} | {4 * r['width']} | {r['bytes'] / 1e6:.3f} | "
            f"{r['calibrated'] * 1e3:.3f} | {r['measured'] * 1e3:.3f} ({r['low'] * 1e3:.3f}-{r['high'] * 1e3:.3f}) | "
            f"{r['measured'] / r['calibrated']:.2f} |"
        )
    line = fit(np.array([r["calibrated"] for r in rows]), np.array([r["measured"] for r in rows]))
    ratios = np.array([r["measured"] / r["calibrated"] for r in rows])
    print(
        f"\n{len(rows)} points (planners {', '.join(PLANNERS)}; replicate exchanges nothing per layer): "
        f"log-log slope {line['slope']:.3f}, R² {line['r2']:.3f} (target >= {TARGET_R2}: "
        f"{'met' if line['r2'] >= TARGET_R2 else 'missed'}), R² about y = x {line['r2_identity']:.3f}; "
        f"measured/modelled median {np.median(ratios):.2f}, range {ratios.min():.2f}-{ratios.max():.2f} "
        f"({time.perf_counter() - started:.0f} s)"
    )
    big = [r for r in rows if r["bytes"] >= MIN_BYTES]
    if len(big) > 1:
        over = fit(np.array([r["calibrated"] for r in big]), np.array([r["measured"] for r in big]))
        within = sum(abs(r["measured"] / r["calibrated"] - 1) <= 0.25 for r in big)
        print(
            f"{len(big)} points moving {MIN_BYTES / 1e6:g} MB or more: slope {over['slope']:.3f}, R² {over['r2']:.3f}, "
            f"R² about y = x {over['r2_identity']:.3f}; {within} within +-25%"
        )
    if args.png:
        plot(rows, line, args.png)
    if args.json:
        args.json.write_text(json.dumps({"fit": line, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
