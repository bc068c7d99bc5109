"""``commgraph sim multipath simulate``: choose a communication path for each request of a stream
(direct, greedy-e2e, greedy-intra, toll, lp) and price the choices on the flow simulator.

The workload is ``poisson:load=L,size=S,types=SRC:DST+...`` (load as a fraction of the direct
paths' capacity, or rate=R per second; n, seed, dep, compute are optional) or a CSV trace with
columns time,type[,bytes][,after]. Types are SRC:DST (SRC:DST1|DST2 to serve at either), or names
of a path set given with --paths."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tqdm import tqdm

from commgraph.cli import describe, pick_names
from commgraph.cli.topo import add_topology_argument, topology_from_args
from commgraph.errors import PlanError
from commgraph.plan.multipath import SELECTORS, compare_selectors, load_workload
from commgraph.plan.plot import plot_completions


def register(actions) -> None:
    run_parser = actions.add_parser("simulate", help="compare path selectors on a request stream",
                                    description=describe(__doc__))
    add_topology_argument(run_parser, positional=False)
    run_parser.add_argument("--workload", required=True, metavar="poisson:...|trace.csv",
                            help="e.g. poisson:load=0.7,size=1M,types=cpu0:gpu0 (see above)")
    run_parser.add_argument("--paths", type=Path, metavar="PATHS.yaml", help="request types and their paths")
    run_parser.add_argument("--selector", default="all", metavar="NAME[,NAME]",
                            help=f"all, or some of {', '.join(SELECTORS)} (default: all)")
    run_parser.add_argument("--k", type=int, default=8, help="the LP's horizon in requests (default 8)")
    run_parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    run_parser.add_argument("--png", type=Path, help="completion-time CDF of every selector")
    run_parser.set_defaults(run=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    names = pick_names(args.selector, SELECTORS, "selector", PlanError)
    if args.k < 1:
        raise PlanError(f"--k must be >= 1, got {args.k}")
    topology = topology_from_args(args)
    workload = load_workload(topology, args.workload, str(args.paths) if args.paths else None)
    with tqdm(total=len(names), desc="selectors", disable=args.json, leave=False) as bar:
        reports = compare_selectors(workload, names, args.k, progress=lambda name: bar.update())
    table, stream = workload.table, workload.stream
    rows = {name: report.to_dict(table, stream) for name, report in reports.items()}
    if args.png:
        plot_completions({name: r.priced.jct for name, r in reports.items()},
                         f"{topology.name}: {len(stream)} requests, {args.workload}", args.png)
    if args.json:
        print(json.dumps({"topology": topology.name, "requests": len(stream), "rate_per_s": workload.rate,
                          "selectors": rows}))
        return 0
    rate = f", {workload.rate:,.0f} requests/s" if workload.rate else ""
    print(f"{len(stream)} requests on {topology.name}{rate}; completion times on the flow simulator:")
    for name, row in rows.items():
        busiest = row["links"][0] if row["links"] else None
        link = f"  busiest {busiest['link']} {busiest['utilisation']:.0%}" if busiest else ""
        print(f"  {name:<13} mean {row['mean_s'] * 1e6:10.2f} us  median {row['median_s'] * 1e6:10.2f} us  "
              f"p99 {row['p99_s'] * 1e6:10.2f} us  decide {row['decide_us']:9.2f} us/request{link}")
    if args.png:
        print(f"CDF written to {args.png}")
    return 0
