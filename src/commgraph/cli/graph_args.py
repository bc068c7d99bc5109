"""The GRAPH argument every subcommand that reads a graph shares."""

from __future__ import annotations

import argparse

from commgraph.errors import GraphFormatError, GraphSpecError
from commgraph.graph import FORMATS, Graph, HeteroGraph, load_graph
from commgraph.partition import is_partition_set


def add_graph_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "graph",
        metavar="GRAPH",
        help="a bundled name (cora), a dataset name (citeseer, ogbn-arxiv, reddit, web-Google, ...: "
        "commgraph graph datasets list; downloaded once into $COMMGRAPH_HOME), a synthetic spec "
        "(rmat:nodes=N,edges=M,seed=S or "
        "sbm:nodes=N,classes=C,features=F,seed=S; heterogeneous: mag-shaped:scale=F,seed=S or "
        "movielens-shaped:scale=F,seed=S) or a path (SNAP edge list, OGB directory, "
        "Planetoid folder, .npz)",
    )
    parser.add_argument("--graph-format", choices=FORMATS, help="the graph file's format (default: detect)")
    parser.add_argument("--name", help="graph name; picks the dataset in a Planetoid folder")
    parser.add_argument("--split", help="split scheme of an OGB directory that has several")


def graph_from_args(args: argparse.Namespace, *, hetero: bool = False, **options) -> Graph | HeteroGraph:
    """The graph GRAPH names (``options``: further :func:`~commgraph.graph.load_graph` options); a
    partition set given where a graph is expected is refused with what reads one, and a
    heterogeneous graph where the command takes a homogeneous one (unless ``hetero``)."""
    if is_partition_set(args.graph):
        raise GraphFormatError(
            args.graph,
            "is a partition set, not a graph: describe it with commgraph partition info; "
            "commgraph train, predict and analyze take it as their GRAPH",
        )
    graph = load_graph(args.graph, format=args.graph_format, name=args.name, split=args.split, **options)
    if isinstance(graph, HeteroGraph) and not hetero:
        raise GraphSpecError(
            f"{args.graph} is a heterogeneous graph ({', '.join(graph.node_types)}): this command takes "
            "one node type; train it through the PyG bridge (docs/heterogeneous.md)"
        )
    return graph
