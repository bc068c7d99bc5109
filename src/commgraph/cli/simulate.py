"""``commgraph sim dag DAG.json --topology T``: run a task DAG in the flow-level simulator."""

from __future__ import annotations

import argparse
from pathlib import Path

from commgraph.cli import describe
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
from commgraph.render.simulation import dag_report
from commgraph.render.units import count, seconds
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
    add_format(parser)
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
    first = f"{count(len(tasks), 'task')} on {topology.name} ({topology.routing}): makespan {seconds(result.makespan)}"
    rows = [
        {"task": task.id, "start": start, "finish": finish}
        for task, start, finish in zip(tasks, result.start, result.finish)
    ]
    links = sorted(result.link_rows(), key=lambda row: -row["utilisation"])[:10]
    emit(args, dag_report(result.to_dict(), first, rows if len(tasks) <= TABLE_LIMIT else [], links))
    return 0
