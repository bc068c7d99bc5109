"""``commgraph partition make GRAPH --parts K --method M --out DIR`` and ``commgraph partition info DIR``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from commgraph.atomic import check_output
from commgraph.cli import describe
from commgraph.cli.args import add_force, add_json, add_png, wrote
from commgraph.cli.graph_args import add_graph_arguments, graph_from_args
from commgraph.cli.info import human_bytes
from commgraph.errors import PartitionError
from commgraph.graph import HeteroGraph
from commgraph.partition import METHODS, check_parts, load_partition_set, make_partition_set
from commgraph.partition.plot import plot_metrics
from commgraph.partition.store import FEATURE_DTYPES
from commgraph.partition.typed import make_typed_partition_set, typed_bytes


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
    add_json(parser)
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
    add_json(info)
    info.set_defaults(run=run_info)


def run(args: argparse.Namespace) -> int:
    check_output(args.out, "--out", force=args.force, folder=True)  # before minutes of partitioning
    check_output(args.png, "--png", force=args.force)
    check_parts(args.parts)
    graph = graph_from_args(args, hetero=True)
    if isinstance(graph, HeteroGraph):
        return _run_typed(args, graph)
    args.method = args.method or "g3"
    check_parts(args.parts, graph.num_nodes)
    _say(
        args,
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
        progress=not args.json,
        notes=structure,
        log=lambda line: _say(args, line),
        feature_dtype=args.feature_dtype,
    )
    seconds, metrics = made.seconds, made.metrics
    wrote(args.out, f"{args.parts} parts")
    _report(args, graph.name, metrics, seconds)
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
        _say(args, "note: " + " and ".join(notes))
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
        args,
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
        progress=not args.json,
        log=lambda line: _say(args, line),
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
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['graph']}: {result['method']} into {len(result['parts'])} parts in {seconds:.2f} s "
            f"-> {result['out']}"
        )
        _table(result)


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
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{args.dir}: {result['graph']} in {len(result['parts'])} parts by {result['method']} (seed "
            f"{result['seed']}; partitioning took {result['seconds']:.2f} s); checksums verified"
        )
        _table(result)
    return 0


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.json:
        print(text, file=sys.stderr)


def _table(result: dict) -> None:
    """The parts and the partitioning's figures (below the command's own first line)."""
    print(f"{'part':>5} {'nodes':>12} {'edges':>14} {'remote':>12}")
    for k, part in enumerate(result["parts"]):
        print(f"{k:>5} {part['num_nodes']:>12,} {part['num_edges']:>14,} {part['num_remote']:>12,}")
        if "type_nodes" in part:  # a heterogeneous graph's view: each node type's nodes and halo
            print(f"{'':>5} by node type: nodes {part['type_nodes']}, remote {part['type_remote']}")
    if "typed" in result:
        _typed_table(result["typed"])
    if "typed_bytes" in result:
        _bytes_table(result["typed"], result["typed_bytes"])
    print(f"total remote (communication volume) {result['total_remote']:,}; edge cut {result['edge_cut']:,}")
    print(
        f"imbalance max/mean: nodes {result['node_imbalance']:.3f}, edges {result['edge_imbalance']:.3f}, "
        f"remote {result['remote_imbalance']:.3f}; remote min/max {result['remote_min_max']:.3f}"
    )
    if "stage1_total_remote" in result:  # g3: what each stage did
        moves = result.get("refine_moves", 0)  # absent from sets written before the refinement
        refined = f" after {moves:,} volume-lowering moves" if moves else ""
        print(
            f"g3 stage 1 ({result['stage1_seconds']:.1f} s): total remote {result['stage1_total_remote']:,}{refined}, "
            f"remote min/max {result['stage1_remote_min_max']:.3f}; stage 2 ({result['stage2_seconds']:.1f} s): "
            f"{result['kept_swaps']:,} swaps kept of {result['swaps']:,} tried"
        )


def _typed_table(typed: dict) -> None:
    """A typed set's nodes per type (owned/halo) and edges per relation, one column per part."""
    parts = len(typed["owned"])
    print(f"{'node type':<24}" + "".join(f"{f'part {k} owned/halo':>24}" for k in range(parts)))
    for t, name in enumerate(typed["node_types"]):
        cells = (f"{typed['owned'][k][t]:,}/{typed['halo'][k][t]:,}" for k in range(parts))
        print(f"{name:<24}" + "".join(f"{cell:>24}" for cell in cells))
    print(f"{'relation':<40}" + "".join(f"{f'part {k} edges':>14}" for k in range(parts)))
    for r, relation in enumerate(typed["relations"]):
        print(f"{'__'.join(relation):<40}" + "".join(f"{typed['relation_edges'][k][r]:>14,}" for k in range(parts)))


def _bytes_table(typed: dict, measured: dict) -> None:
    """A typed set's bytes per part: each node type's feature rows at its own width (owned/halo),
    each relation's stored in-edges and the halo rows its edges read
    (:func:`~commgraph.partition.typed.typed_bytes`)."""
    parts = measured["parts"]
    widths = ", ".join(f"{t} {typed['num_features'][t]}" for t in typed["node_types"])
    print(f"bytes by node type (feature rows at each type's width: {widths})")
    print(f"{'node type':<24}" + "".join(f"{f'part {k} owned/halo':>24}" for k in range(len(parts))))
    for t, name in enumerate(typed["node_types"]):
        cells = (f"{human_bytes(p['owned'][t])}/{human_bytes(p['halo'][t])}" for p in parts)
        print(f"{name:<24}" + "".join(f"{cell:>24}" for cell in cells))
    print(f"{'relation':<40}" + "".join(f"{f'part {k} edges/halo':>24}" for k in range(len(parts))))
    for r, name in enumerate(measured["relations"]):
        cells = (f"{human_bytes(p['edges'][r])}/{human_bytes(p['relation_halo'][r])}" for p in parts)
        print(f"{name:<40}" + "".join(f"{cell:>24}" for cell in cells))
