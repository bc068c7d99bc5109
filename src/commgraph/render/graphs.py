"""The reports of ``commgraph graph info`` (a row per figure of a graph, built from its ``stats()``
object) and ``commgraph graph datasets list`` (a row per named dataset; its JSON is JSON Lines, one
dataset a line)."""

from __future__ import annotations

from commgraph.render.table import Column, Report, Table
from commgraph.render.units import nbytes

INFO_COLUMNS = (Column("what", "figure", "text"), Column("value", "value", "text"))
DATASET_COLUMNS = (
    Column("name", "name", "text"),
    Column("size", "size", "text"),
    Column("nodes", "nodes"),
    Column("edges", "edges"),
    Column("features", "features"),
    Column("classes", "classes"),
    Column("cached", "cached", "text"),
    Column("licence", "licence", "text"),
)


def graph_report(stats: dict) -> Report:
    """``graph info``'s report from a graph's ``stats()`` (a heterogeneous graph's has ``node_types``)."""
    pairs = _hetero_rows(stats) if "node_types" in stats else _rows(stats)
    rows = tuple({"what": what, "value": value} for what, value in pairs)
    return Report(stats, (Table(INFO_COLUMNS, rows),))


def _rows(stats: dict) -> list[tuple[str, str]]:
    """A graph of one node type: its counts, degrees, components, features, classes and splits."""
    deg = stats["degree"]
    rows = [
        ("graph", stats["name"]),
        ("nodes", f"{stats['num_nodes']:,}"),
        ("edges (directed, stored)", f"{stats['num_edges']:,}"),
        ("in-degree min / mean / median / max", f"{deg['min']} / {deg['mean']:.2f} / {deg['median']:g} / {deg['max']}"),
        ("isolated nodes", f"{stats['isolated_nodes']:,}"),
        ("connected components", f"{stats['components']:,}"),
        ("self-loops", f"{stats['self_loops']:,}"),
        ("features", str(stats["num_features"] or "none")),
        ("classes", str(stats["num_classes"] or "none")),
    ]
    if stats["train_nodes"] is not None:
        splits = f"{stats['train_nodes']:,} / {stats['val_nodes']:,} / {stats['test_nodes']:,}"
        rows.append(("train / val / test nodes", splits))
    return [*rows, ("memory", nbytes(stats["memory_bytes"]))]


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
    return [*rows, ("memory", nbytes(stats["memory_bytes"]))]


def datasets_report(records: list[dict]) -> Report:
    """``graph datasets list``'s report: a row per dataset record
    (:func:`~commgraph.graph.datasets.dataset_record`); its JSON is one record a line."""
    rows = tuple({column.key: record[column.key] for column in DATASET_COLUMNS} for record in records)
    return Report(records, (Table(DATASET_COLUMNS, rows),))
