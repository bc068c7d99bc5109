"""``commgraph graph convert GRAPH --out FILE.npz``: save any graph commgraph can read in its own fast
format (seconds to load instead of minutes of CSV parsing)."""

from __future__ import annotations

import argparse
from pathlib import Path

from commgraph.cli import describe
from commgraph.cli.args import add_force, check_outputs, wrote
from commgraph.cli.graph_args import add_graph_arguments, graph_from_args
from commgraph.errors import GraphSpecError
from commgraph.graph import save_npz


def register(subparsers) -> None:
    parser = subparsers.add_parser("convert", help="save a graph as commgraph .npz", description=describe(__doc__))
    add_graph_arguments(parser)
    parser.add_argument("--out", required=True, type=Path, metavar="FILE.npz", help="the .npz file to write")
    add_force(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.out.suffix != ".npz":
        raise GraphSpecError(f"--out must end in .npz, got {str(args.out)!r}")
    check_outputs(args, "--out")
    graph = graph_from_args(args)
    save_npz(graph, args.out)
    wrote(args.out, f"{graph.num_nodes:,} nodes, {graph.num_edges:,} edges")
    return 0
