"""The GRAPH argument every subcommand that reads a graph shares."""

from __future__ import annotations

import argparse

from commgraph.graph import FORMATS, Graph, load_graph


def add_graph_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "graph",
        metavar="GRAPH",
        help="a bundled name (cora), a dataset name (citeseer, ogbn-arxiv, reddit, web-Google, ...: "
        "commgraph datasets list; downloaded once into $COMMGRAPH_HOME), a synthetic spec (rmat:nodes=N,edges=M,seed=S or "
        "sbm:nodes=N,classes=C,features=F,seed=S) or a path (SNAP edge list, OGB directory, "
        "Planetoid folder, .npz)",
    )
    parser.add_argument("--format", choices=FORMATS, help="file format (default: detect)")
    parser.add_argument("--name", help="graph name; picks the dataset in a Planetoid folder")
    parser.add_argument("--split", help="split scheme of an OGB directory that has several")


def graph_from_args(args: argparse.Namespace, **options) -> Graph:
    """The graph GRAPH names (``options``: further :func:`~commgraph.graph.load_graph` options)."""
    return load_graph(args.graph, format=args.format, name=args.name, split=args.split, **options)
