"""The report of ``commgraph partition make`` and ``partition info``: one row per part (nodes,
edges, remote nodes), a typed set's nodes and bytes per node type and relation (a column per part),
and the partitioning's figures, built from the command's JSON object."""

from __future__ import annotations

from commgraph.render.table import Column, Report, Table
from commgraph.render.units import nbytes

PART_COLUMNS = (
    Column("part", "part"),
    Column("num_nodes", "nodes"),
    Column("num_edges", "edges"),
    Column("num_remote", "remote"),
)
TYPED_COLUMN = Column("by_type", "by node type (nodes, remote)", "text")


def partition_report(result: dict, first: str) -> Report:
    """The report of a partition set's JSON object under the line ``first``."""
    typed = "type_nodes" in result["parts"][0]
    rows = tuple(
        {
            "part": k,
            **{c.key: part[c.key] for c in PART_COLUMNS[1:]},
            "by_type": f"{part['type_nodes']}, {part['type_remote']}" if typed else None,
        }
        for k, part in enumerate(result["parts"])
    )
    tables = [Table(PART_COLUMNS + ((TYPED_COLUMN,) if typed else ()), rows)]
    if "typed" in result:
        tables += _typed_tables(result["typed"])
    if "typed_bytes" in result:
        tables += _bytes_tables(result["typed"], result["typed_bytes"])
    return Report(result, tuple(tables), before=(first,), after=_figures(result))


def _per_part(name: str, title: str, names, cells) -> Table:
    """A table of a row per ``names`` and a text column per part: ``cells[k][i]`` for part k, row i."""
    columns = (
        Column("name", name, "text"),
        *(Column(f"part{k}", f"part {k} {title}", "text") for k in range(len(cells))),
    )
    rows = tuple({"name": n, **{f"part{k}": part[i] for k, part in enumerate(cells)}} for i, n in enumerate(names))
    return Table(columns, rows)


def _typed_tables(typed: dict) -> list[Table]:
    """A typed set's nodes per type (owned/halo) and edges per relation, a column per part."""
    parts = range(len(typed["owned"]))
    owned = [[f"{o:,}/{h:,}" for o, h in zip(typed["owned"][k], typed["halo"][k])] for k in parts]
    edges = [[f"{e:,}" for e in typed["relation_edges"][k]] for k in parts]
    relations = ["__".join(r) for r in typed["relations"]]
    return [
        _per_part("node type", "owned/halo", typed["node_types"], owned),
        _per_part("relation", "edges", relations, edges),
    ]


def _bytes_tables(typed: dict, measured: dict) -> list[Table]:
    """A typed set's bytes per part: each node type's feature rows at its own width (owned/halo),
    each relation's stored in-edges and the halo rows its edges read."""
    parts = measured["parts"]
    widths = ", ".join(f"{t} {typed['num_features'][t]}" for t in typed["node_types"])
    rows = [[f"{nbytes(o)}/{nbytes(h)}" for o, h in zip(p["owned"], p["halo"])] for p in parts]
    edges = [[f"{nbytes(e)}/{nbytes(h)}" for e, h in zip(p["edges"], p["relation_halo"])] for p in parts]
    by_type = _per_part("node type", "owned/halo bytes", typed["node_types"], rows)
    by_type = Table(
        by_type.columns, by_type.rows, title=f"bytes by node type (feature rows at each type's width: {widths})"
    )
    return [by_type, _per_part("relation", "edges/halo bytes", measured["relations"], edges)]


def _figures(result: dict) -> tuple[str, ...]:
    """The partitioning's figures: volume, cut, imbalance and (g3) what each stage did."""
    lines = [
        f"total remote (communication volume) {result['total_remote']:,}; edge cut {result['edge_cut']:,}",
        f"imbalance max/mean: nodes {result['node_imbalance']:.3f}, edges {result['edge_imbalance']:.3f}, "
        f"remote {result['remote_imbalance']:.3f}; remote min/max {result['remote_min_max']:.3f}",
    ]
    if "stage1_total_remote" in result:
        moves = result.get("refine_moves", 0)  # absent from sets written before the refinement
        refined = f" after {moves:,} volume-lowering moves" if moves else ""
        lines.append(
            f"g3 stage 1 ({result['stage1_seconds']:.1f} s): total remote {result['stage1_total_remote']:,}{refined}, "
            f"remote min/max {result['stage1_remote_min_max']:.3f}; stage 2 ({result['stage2_seconds']:.1f} s): "
            f"{result['kept_swaps']:,} swaps kept of {result['swaps']:,} tried"
        )
    return tuple(lines)
