"""``commgraph sim dag DAG.json --topology T``: run a task DAG in the flow-level simulator."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from commgraph.cli import describe
from commgraph.cli.args import (
    add_force,
    add_json,
    add_png,
    add_topology_argument,
    check_outputs,
    topology_from_args,
    wrote,
)
from commgraph.sim import progress, read_dag, simulate
from commgraph.sim.plot import plot_timeline
from commgraph.topology.model import ROUTINGS

TABLE_LIMIT = 40


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "dag", help="a task DAG on a topology, in the flow-level simulator", description=describe(__doc__)
    )
    parser.add_argument(
        "dag",
        type=Path,
        metavar="DAG.json",
        help='{"tasks": [{"id", "type": "transfer"|"compute", ...}]} (see docs/simulation.md)',
    )
    add_topology_argument(parser)
    parser.add_argument(
        "--routing",
        choices=ROUTINGS,
        help="how the fabric uses equal-cost paths: ecmp (per-flow hash) or spray (every flow split "
        "evenly over them); default: the topology's",
    )
    add_json(parser, "print the full result as JSON")
    add_png(parser, "draw the timeline")
    add_force(parser)
    parser.set_defaults(run=run)


@progress.reported("sim dag")
def run(args: argparse.Namespace) -> int:
    check_outputs(args, "--png")
    topology = topology_from_args(args)
    if args.routing:
        topology = topology.with_routing(args.routing)
    tasks = read_dag(args.dag)
    progress.stage(f"simulating {len(tasks):,} tasks")
    result = simulate(topology, tasks, timeline=args.png is not None)
    if args.png:
        plot_timeline(result, args.png)
        wrote(args.png)
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    print(f"{len(tasks)} tasks on {topology.name} ({topology.routing}): makespan {result.makespan * 1e3:.4f} ms")
    if len(tasks) <= TABLE_LIMIT:
        for task, start, finish in zip(tasks, result.start, result.finish):
            print(f"  {task.id:<20} {start * 1e3:10.4f} -> {finish * 1e3:10.4f} ms")
    rows = sorted(result.link_rows(), key=lambda row: -row["utilisation"])[:10]
    if rows:
        print("busiest links:")
        for row in rows:
            print(
                f"  {row['link']:<28} {row['kind']:<10} {row['bytes'] / 1e6:12.3f} MB  "
                f"busy {row['busy_seconds'] * 1e3:9.4f} ms  utilisation {row['utilisation']:.1%}"
            )
    return 0
