"""``commgraph graph info GRAPH``: what a graph holds, for people (a table) or programs (``--format json``)."""

from __future__ import annotations

import argparse

from commgraph.cli import describe
from commgraph.cli.args import add_format, emit
from commgraph.cli.graph_args import add_graph_arguments, graph_from_args
from commgraph.render.graphs import graph_report


def register(subparsers) -> None:
    parser = subparsers.add_parser("info", help="summarise a graph", description=describe(__doc__))
    add_graph_arguments(parser)
    add_format(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    emit(args, graph_report(graph_from_args(args, hetero=True).stats()))
    return 0
