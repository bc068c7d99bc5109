"""``commgraph partition make GRAPH --parts K --method M --out DIR`` and ``commgraph partition info DIR``."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from commgraph.atomic import check_output
from commgraph.cli import describe
from commgraph.cli.args import add_force, add_format, add_png, emit, wrote
from commgraph.cli.graph_args import add_graph_arguments, graph_from_args
from commgraph.errors import PartitionError
from commgraph.graph import HeteroGraph
from commgraph.graph.chunked import ChunkedGraph
from commgraph.graph.resolve import chunked_graph
from commgraph.partition import METHODS, check_parts, load_partition_set, make_partition_set
from commgraph.partition.plot import plot_metrics
from commgraph.partition.store import FEATURE_DTYPES
from commgraph.partition.streamed import write_streamed_set
from commgraph.partition.typed import make_typed_partition_set, typed_bytes
from commgraph.render.partitions import partition_report


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "make", help="split a graph into parts, one per worker", description=describe(__doc__)
    )
    add_graph_arguments(parser)
    parser.add_argument("--parts", type=int, required=True, metavar="K", help="number of parts (workers)")
    parser.add_argument(
        "--method",
        choices=METHODS,
        help="g3: balanced compute and communication; metis: minimum edge cut; chunk: consecutive ids; random "
        "(g3 for a graph of one node type, metis with each node type balanced for a heterogeneous one, unless given)",
    )
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="partition set directory")
    parser.add_argument("--seed", type=int, default=0, help="seed of the partitioner's random choices")
    parser.add_argument(
        "--feature-dtype",
        choices=FEATURE_DTYPES,
        help="store the features as this dtype (default: the graph's); float16 halves the set's largest "
        "files, and readers widen the rows to float32",
    )
    add_force(parser)
    add_format(parser)
    add_png(parser, "bar chart of per-part nodes, edges, remote nodes")
    parser.add_argument("--plot", type=Path, dest="png", help=argparse.SUPPRESS)
    parser.set_defaults(run=run)

    info = subparsers.add_parser(
        "info",
        help="describe a partition set (checksums verified)",
        description="What a partition set holds, as its partitioning measured it: parts, "
        "their nodes, edges and remote nodes, and the method's figures (a typed set: by node type "
        "and relation, in nodes, edges and bytes); every file's checksum is verified.",
    )
    info.add_argument("dir", type=Path, metavar="DIR", help="the partition set (commgraph partition make --out DIR)")
    add_format(info)
    info.set_defaults(run=run_info)


def run(args: argparse.Namespace) -> int:
    check_output(args.out, "--out", force=args.force, folder=True)  # before minutes of partitioning
    check_output(args.png, "--png", force=args.force)
    check_parts(args.parts)
    chunked = chunked_graph(args.graph) if args.method == "chunk" and args.graph_format is None else None
    if chunked is not None:
        return _run_streamed(args, replace(chunked, name=args.name or chunked.name))
    graph = graph_from_args(args, hetero=True)
    if isinstance(graph, HeteroGraph):
        return _run_typed(args, graph)
    args.method = args.method or "g3"
    check_parts(args.parts, graph.num_nodes)
    _say(
        f"partitioning {graph.name} ({graph.num_nodes:,} nodes, {graph.num_edges:,} edges) "
        f"into {args.parts} parts with {args.method}",
    )
    structure = _structure(args, graph)
    made = make_partition_set(
        graph,
        args.parts,
        args.out,
        method=args.method,
        seed=args.seed,
        force=args.force,
        progress=True,
        notes=structure,
        log=_say,
        feature_dtype=args.feature_dtype,
    )
    seconds, metrics = made.seconds, made.metrics
    wrote(args.out, f"{args.parts} parts")
    _report(args, graph.name, metrics, seconds)
    return 0


def _run_streamed(args: argparse.Namespace, graph: ChunkedGraph) -> int:
    """``partition make`` of a generator drawn a chunk at a time, ``--method chunk``: the set written
    straight from its chunks, no graph file first (:mod:`commgraph.partition.streamed`)."""
    _say(f"writing {graph.name} ({graph.num_nodes:,} nodes) straight into {args.parts} parts with chunk")
    made = write_streamed_set(
        graph,
        args.parts,
        args.out,
        seed=args.seed,
        force=args.force,
        feature_dtype=args.feature_dtype,
        log=_say,
    )
    wrote(args.out, f"{args.parts} parts")
    _report(args, graph.name, made.metrics, made.seconds)
    return 0


def _structure(args: argparse.Namespace, graph) -> dict:
    """The graph's isolated nodes and connected components (kept in the set's manifest), with a
    note on stderr where either shapes what partitioning can do."""
    stats = graph.stats()
    structure = {key: stats[key] for key in ("isolated_nodes", "components")}
    notes = []
    if structure["isolated_nodes"]:
        notes.append(
            f"{structure['isolated_nodes']:,} isolated nodes (they exchange nothing and only fill parts "
            "up to the node balance)"
        )
    if structure["components"] > 1:
        notes.append(f"{structure['components']:,} connected components (no communication between them)")
    if notes:
        _say("note: " + " and ".join(notes))
    return structure


def _run_typed(args: argparse.Namespace, graph: HeteroGraph) -> int:
    """``partition make`` of a heterogeneous graph: a typed set (:mod:`commgraph.partition.typed`)."""
    if args.feature_dtype is not None:
        raise PartitionError(
            "--feature-dtype stores the features of a graph of one node type; a typed set keeps each type's own"
        )
    args.method = args.method or "metis"
    check_parts(args.parts, graph.total_nodes)
    _say(
        f"partitioning {graph.name} ({graph.total_nodes:,} nodes of {len(graph.node_types)} types, "
        f"{graph.num_edges:,} edges) into {args.parts} parts with {args.method}, each node type balanced",
    )
    made = make_typed_partition_set(
        graph,
        args.parts,
        args.out,
        method=args.method,
        seed=args.seed,
        force=args.force,
        progress=True,
        log=_say,
    )
    wrote(args.out, f"{args.parts} parts, typed")
    _report(args, graph.name, {**made.metrics, "typed": made.pset.manifest["typed"]}, made.seconds)
    return 0


def _report(args: argparse.Namespace, name: str, metrics: dict, seconds: float) -> None:
    """``partition make``'s plot, JSON line or table."""
    if args.png:
        plot_metrics(metrics, f"{name} / {args.method} / {args.parts} parts", args.png)
        wrote(args.png)
    result = {"method": args.method, "graph": name, "seconds": seconds, "out": str(args.out), **metrics}
    first = f"{name}: {args.method} into {len(result['parts'])} parts in {seconds:.2f} s -> {result['out']}"
    emit(args, partition_report(result, first))


def run_info(args: argparse.Namespace) -> int:
    pset = load_partition_set(args.dir, verify=True)
    pset.validate()
    pset.verify_all()
    m = pset.manifest
    result = {
        "method": m["method"],
        "graph": m["graph"]["name"],
        "seconds": m["seconds"],
        "out": str(args.dir),
        "seed": m["seed"],
        "graph_checksum": m["graph"]["checksum"],
        **m["metrics"],
        **({"typed": m["typed"], "typed_bytes": typed_bytes(pset).to_dict()} if "typed" in m else {}),
    }
    first = (
        f"{args.dir}: {result['graph']} in {len(result['parts'])} parts by {result['method']} (seed "
        f"{result['seed']}; partitioning took {result['seconds']:.2f} s); checksums verified"
    )
    emit(args, partition_report(result, first))
    return 0


def _say(text: str) -> None:
    """A line of progress on stderr (``--json`` keeps stdout to its one object)."""
    print(text, file=sys.stderr)
