"""``commgraph sim multipath simulate``: choose a communication path for each request of a stream
(direct, greedy-intra, greedy-e2e, toll, toll-jct, toll-inflight, toll-bytes, greedy-queue, lp) and price
the choices on the flow simulator.

The workload is ``poisson:load=L,size=S,types=SRC:DST+...`` (load as a fraction of the direct
paths' capacity, or rate=R per second; n, seed, dep, compute are optional), ``kvs:ycsb=c|b,load=L``
(the thesis's key-value store: GETs on the accelerator or the CPU, PUTs on the CPU only, two round
trips each; options get, put, rate, n, seed, key, value, cores, acc_us, cpu_us, put_us, keys,
zipf, nic, acc, cpu) or a CSV trace with columns time,type[,bytes][,after]. Types are SRC:DST
(SRC:DST1|DST2 to serve at either), or names of a path set given with --paths.

--sweep runs the workload at several loads (multiples of the direct paths' capacity) and reports
each selector's median, mean and p99 completion time there, and its sustainable throughput: the
highest rate whose median stays under --bound-us. Everything is simulated (a request-level model
decides, the flow simulator prices); relays through peer GPUs (chained copies) are simulated only."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
from tqdm import tqdm

from commgraph.cli import describe, pick_names
from commgraph.cli.args import (
    add_force,
    add_format,
    add_png,
    add_topology_argument,
    check_outputs,
    emit,
    topology_from_args,
    wrote,
)
from commgraph.errors import PlanError
from commgraph.plan.multipath import JITTER, SELECTORS, load_workload
from commgraph.render.multipath import selectors_report, sweep_report
from commgraph.sim import progress
from commgraph.study import compare_selectors, sweep_selectors
from commgraph.study.plot import plot_completions, plot_sweep

MAX_SWEEP_POINTS = 1000  # loads of one --sweep (each a full simulation of every selector)


def register(actions) -> None:
    run_parser = actions.add_parser(
        "simulate", help="compare path selectors on a request stream", description=describe(__doc__)
    )
    add_topology_argument(run_parser)
    run_parser.add_argument(
        "--workload",
        required=True,
        metavar="poisson:...|kvs:...|trace.csv",
        help="e.g. poisson:load=0.7,size=1M,types=cpu0:gpu0 or kvs:ycsb=b,load=1.1 (see above)",
    )
    run_parser.add_argument("--paths", type=Path, metavar="PATHS.yaml", help="request types and their paths")
    run_parser.add_argument(
        "--selector", default="all", metavar="NAME[,NAME]", help=f"all, or some of {', '.join(SELECTORS)}"
    )
    run_parser.add_argument("--k", type=int, default=8, help="the LP's horizon in requests (default 8)")
    run_parser.add_argument(
        "--jitter-us",
        default="3,9",
        metavar="LO,HI",
        help="greedy-e2e's requester-NIC delay, uniform in LO..HI microseconds (default 3,9)",
    )
    run_parser.add_argument(
        "--sweep",
        metavar="L1,L2,...|LO:HI:STEP",
        help="loads (x the direct paths' capacity) to run the workload at, e.g. 0.3:1.5:0.1",
    )
    run_parser.add_argument(
        "--seeds", type=int, help="streams per sweep point (seeds from the workload's; with --sweep; default 1)"
    )
    run_parser.add_argument(
        "--bound-us",
        type=float,
        help="median bound of the sustainable throughput (with --sweep; default: twice direct's "
        "median at the sweep's lowest load)",
    )
    add_format(run_parser)
    add_png(run_parser, "completion-time CDF of every selector; with --sweep, median against offered rate")
    add_force(run_parser)
    run_parser.set_defaults(run=run_simulate)


def _jitter(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) * 1e-6 for v in text.split(","))
    except ValueError:
        raise PlanError(f"--jitter-us must be LO,HI in microseconds such as 3,9, got {text!r}") from None
    if not 0 <= lo <= hi < math.inf:
        raise PlanError(f"--jitter-us must have 0 <= LO <= HI, both finite, got {text!r}")
    return lo, hi


def _loads(text: str) -> list[float]:
    """The loads ``--sweep`` names, at most :data:`MAX_SWEEP_POINTS` of them, each finite and > 0."""
    try:
        if ":" in text:
            lo, hi, step = (float(v) for v in text.split(":"))
            if not (0 < lo <= hi < math.inf and step > 0):
                raise ValueError
            points = math.floor((hi - lo) / step + 0.5) + 1
        else:
            loads = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise PlanError(
            f"--sweep must be loads such as 0.5,1,1.2 or LO:HI:STEP with 0 < LO <= HI, got {text!r}"
        ) from None
    if ":" in text:
        _check_points(points, text)
        return [round(float(v), 6) for v in np.arange(lo, hi + step / 2, step)]
    if not loads or any(not 0 < v < math.inf for v in loads):
        raise PlanError(f"--sweep loads must be finite and > 0, got {text!r}")
    _check_points(len(loads), text)
    return loads


def _check_points(points: int, text: str) -> None:
    if points > MAX_SWEEP_POINTS:
        raise PlanError(f"--sweep {text} makes {points:,} points; at most {MAX_SWEEP_POINTS} (a larger STEP)")


@progress.reported("sim multipath")
def run_simulate(args: argparse.Namespace) -> int:
    names = pick_names(args.selector, SELECTORS, "selector", PlanError)
    check_outputs(args, "--png")
    if args.k < 1:
        raise PlanError(f"--k must be >= 1, got {args.k}")
    if not args.sweep and (args.seeds is not None or args.bound_us is not None):
        raise PlanError("--seeds and --bound-us apply to a sweep: add --sweep LOADS, or leave them out")
    jitter = _jitter(args.jitter_us) if args.jitter_us else JITTER
    topology = topology_from_args(args)
    if args.sweep:
        return _run_sweep(args, topology, names, jitter)
    return _run_compare(args, topology, names, jitter)


def _run_compare(args: argparse.Namespace, topology, names: list[str], jitter: tuple[float, float]) -> int:
    workload = load_workload(topology, args.workload, str(args.paths) if args.paths else None)
    with tqdm(total=len(names), desc="selectors", disable=None, leave=False) as bar:
        comparison = compare_selectors(workload, names, args.k, progress=lambda name: bar.update(), jitter=jitter)
    if args.png:
        plot_completions(
            {name: r.priced.jct for name, r in comparison.reports.items()},
            f"{topology.name}: {len(workload.stream)} requests, {args.workload}",
            args.png,
        )
        wrote(args.png)
    stream = workload.stream
    rate = f", {workload.rate:,.0f} requests/s" if workload.rate else ""
    first = f"{len(stream):,} requests on {topology.name}{rate}; completion times on the flow simulator:"
    emit(args, selectors_report(comparison.to_dict(), first))
    return 0


def _run_sweep(args: argparse.Namespace, topology, names: list[str], jitter: tuple[float, float]) -> int:
    loads = _sweep_loads(args)
    bound = None if args.bound_us is None else args.bound_us * 1e-6
    with tqdm(total=len(loads) * args.seeds, desc="sweep", disable=None, leave=False) as bar:
        report = sweep_selectors(
            topology, args.workload, loads, names, args.k, args.seeds, jitter, bound, progress=lambda _: bar.update()
        )
    if args.png:
        rows = report.rows()
        curves = {name: ([r["rate_per_s"] for r in rows[name]], [r["median_s"] for r in rows[name]]) for name in names}
        title = f"{topology.name}: {report.label}, {args.seeds} seed(s)"
        plot_sweep(curves, report.direct_rate, report.combined_rate, report.bound_s, title, args.png)
        wrote(args.png)
    points = report.points
    first = (
        f"{report.label} on {topology.name}: direct paths' capacity {report.direct_rate:,.0f} requests/s, every path "
        f"together {report.combined_rate:,.0f}; {len(points[0].jct[names[0]][0]):,} requests x {args.seeds} seed(s) "
        "per point, simulated"
    )
    emit(args, sweep_report(report.to_dict(), first))
    return 0


def _sweep_loads(args: argparse.Namespace) -> list[float]:
    """``--sweep``'s loads, once its workload, ``--seeds`` and ``--bound-us`` are checked."""
    if args.paths or not args.workload.startswith(("poisson", "kvs")):
        raise PlanError("--sweep takes a poisson: or kvs: workload (it sets load=), without --paths")
    args.seeds = 1 if args.seeds is None else args.seeds
    if not 1 <= args.seeds <= MAX_SWEEP_POINTS:
        raise PlanError(f"--seeds must be 1..{MAX_SWEEP_POINTS}, got {args.seeds}")
    if args.bound_us is not None and not 0 < args.bound_us < math.inf:
        raise PlanError(f"--bound-us must be finite and > 0, got {args.bound_us}")
    return _loads(args.sweep)
