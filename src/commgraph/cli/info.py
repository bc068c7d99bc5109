"""``commgraph graph info GRAPH``: what a graph holds, for people (a table) or programs (``--json``)."""

from __future__ import annotations

import argparse
import json

from commgraph.cli import describe
from commgraph.cli.args import add_json
from commgraph.cli.graph_args import add_graph_arguments, graph_from_args
from commgraph.render.units import nbytes


def register(subparsers) -> None:
    parser = subparsers.add_parser("info", help="summarise a graph", description=describe(__doc__))
    add_graph_arguments(parser)
    add_json(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    stats = graph_from_args(args, hetero=True).stats()
    if args.json:
        print(json.dumps(stats))
        return 0
    if "node_types" in stats:
        _print_rows(_hetero_rows(stats))
        return 0
    deg = stats["degree"]
    rows = [
        ("graph", stats["name"]),
        ("nodes", f"{stats['num_nodes']:,}"),
        ("edges (directed, stored)", f"{stats['num_edges']:,}"),
        ("in-degree min / mean / median / max", f"{deg['min']} / {deg['mean']:.2f} / {deg['median']:g} / {deg['max']}"),
        ("isolated nodes", f"{stats['isolated_nodes']:,}"),
        ("connected components", f"{stats['components']:,}"),
        ("self-loops", f"{stats['self_loops']:,}"),
        ("features", stats["num_features"] or "none"),
        ("classes", stats["num_classes"] or "none"),
    ]
    if stats["train_nodes"] is not None:
        rows.append(
            ("train / val / test nodes", f"{stats['train_nodes']:,} / {stats['val_nodes']:,} / {stats['test_nodes']:,}")
        )
    rows.append(("memory", nbytes(stats["memory_bytes"])))
    _print_rows(rows)
    return 0


def _hetero_rows(stats: dict) -> list[tuple[str, str]]:
    """A heterogeneous graph's rows: per node type its count, features and labels; per relation its edges."""
    rows = [("graph", stats["name"]), ("nodes", f"{stats['total_nodes']:,}"), ("edges", f"{stats['num_edges']:,}")]
    for name, node_type in stats["node_types"].items():
        what = [f"{node_type['num_nodes']:,} nodes", f"features {node_type['num_features'] or 'none'}"]
        if node_type["labels"]:
            what.append(
                f"{stats['num_classes']} classes, train / val / test {stats['train_nodes']:,} / "
                f"{stats['val_nodes']:,} / {stats['test_nodes']:,}"
            )
        rows.append((f"type {name}", ", ".join(what)))
    for name, relation in stats["relations"].items():
        extra = f", edge features {relation['edge_features']}" if relation["edge_features"] else ""
        rows.append((f"relation {name}", f"{relation['num_edges']:,} edges{extra}"))
    rows.append(("memory", nbytes(stats["memory_bytes"])))
    return rows


def _print_rows(rows: list[tuple[str, str]]) -> None:
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
