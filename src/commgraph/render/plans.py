"""The reports of ``commgraph plan``: one row per planner under typed columns, built from the
command's JSON object (so every format shows the same figures).

- all-gather (a partition set's halo exchange): modeled time per layer, bytes, stages, busiest
  link; ``replicate`` moves nothing per layer, so its time reads ``none`` and its note says what it
  holds instead; the row ``--plan auto`` takes is marked.
- all-reduce, all-gather and reduce-scatter across the workers: modeled time, normalized time,
  algorithm and bus bandwidth and their share of the throughput bound; the row ``--allreduce
  auto`` takes is marked.
- broadcast and host-to-GPU copies.
"""

from __future__ import annotations

from commgraph.render.table import Column, Report, Shown, Table
from commgraph.render.units import nbytes, seconds

PLANNER = Column("planner", "planner", "text")
NOTE = Column("note", "note", "text")
ALLGATHER_COLUMNS = (
    PLANNER,
    Column("modeled_seconds", "modeled per layer", "s"),
    Column("bytes", "bytes", "B"),
    Column("stages", "stages"),
    Column("busiest", "busiest link", "text"),
    NOTE,
)
COLLECTIVE_COLUMNS = (
    PLANNER,
    Column("modeled_seconds", "modeled", "s"),
    Column("normalized_time", "normalized time"),
    Column("algbw", "algbw", "GB/s"),
    Column("busbw", "busbw", "GB/s"),
    Column("of_bound", "of bound", "%"),
    NOTE,
)


def _chosen_index(names: list[str], chosen: str | None) -> int | None:
    return names.index(chosen) if chosen in names else None


def allgather_report(result: dict, chosen: str | None) -> Report:
    """``plan allgather``'s report from its JSON object; ``chosen``: the planner ``--plan auto`` takes."""
    rows = tuple(_allgather_row(name, row) for name, row in result["planners"].items())
    table = Table(ALLGATHER_COLUMNS, rows, _chosen_index(list(result["planners"]), chosen), "--plan auto")
    return Report(result, (table,), after=_typed_lines(result.get("typed")))


def _allgather_row(name: str, row: dict) -> dict:
    busiest = row["busiest_link"]
    cells = {
        "planner": name,
        "modeled_seconds": row["modeled_seconds"],
        "bytes": row["bytes"],
        "stages": row["stages"],
        "busiest": f"{busiest['link']} ({busiest['kind']})" if busiest else None,
        "note": "trees priced slower" if "fallback" in row else None,
    }
    if "total_duplicated_nodes" in row:
        cells["modeled_seconds"] = Shown(row["modeled_seconds"], "none")
        cells["note"] = (
            f"no exchange: holds its L-hop halo, {row['total_duplicated_nodes']:,} duplicated nodes, "
            f"{nbytes(row['extra_memory_bytes'])} more memory"
        )
    return cells


def _typed_lines(typed: dict | None) -> tuple[str, ...]:
    """A typed set's halo bytes per layer by node type and by relation, a line each."""
    if typed is None:
        return ()
    return tuple(
        f"halo rows per layer by {what}: " + ", ".join(f"{name} {nbytes(v)}" for name, v in typed[key].items())
        for key, what in (("by_type", "node type"), ("by_relation", "relation (a row two relations read in each)"))
    )


def collective_report(result: dict, chosen: str | None = None, after: tuple[str, ...] = ()) -> Report:
    """``plan allreduce``'s report (any ``--collective``) from its JSON object; ``chosen``: the row
    ``--allreduce auto`` takes; ``after``: lines below the table (the bounds)."""
    rows = tuple(_collective_row(name, row) for name, row in result["planners"].items())
    table = Table(COLLECTIVE_COLUMNS, rows, _chosen_index(list(result["planners"]), chosen), "--allreduce auto")
    return Report(result, (table,), after=after)


def _collective_row(name: str, row: dict) -> dict:
    band = row.get("bandwidth", {})
    notes = []
    if "trees" in row:
        notes.append(f"normalized time {row['optimum_fraction']}, {len(row['trees'])} trees")
    if "arborescences" in row:
        notes.append(f"normalized time {row['optimum_fraction']}, {row['arborescences']} arborescences")
    if "certificate" in row:
        family = "tree" if "trees" in row else "arborescence"
        notes.append(f"no {family} schedule beats {row['certificate']['algbw_gbps_at_most']:.2f} GB/s")
    return {
        "planner": name,
        "modeled_seconds": row["modeled_seconds"],
        "normalized_time": row.get("normalized_time"),
        "algbw": band.get("algbw_gbps"),
        "busbw": band.get("busbw_gbps"),
        "of_bound": band.get("of_bound"),
        "note": "; ".join(notes) or None,
    }


def bound_lines(result: dict, collective: str) -> tuple[str, ...]:
    """Each distinct throughput bound of the rows and the all-reduce's Lemma 2.1 lower bound, a line each."""
    bounds = sorted(
        {
            (b["algbw_gbps"], b["partition"], b.get("links"))
            for b in (r["bandwidth"]["bound"] for r in result["planners"].values())
        }
    )
    if collective == "allreduce":
        lines = [
            f"throughput bound ({partition} partition, {links} links): {gbps:.2f} GB/s of algorithm bandwidth"
            for gbps, partition, links in bounds
        ]
        if result.get("lower_bound") is not None:
            lines.append(f"lower bound (Lemma 2.1): {result['lower_bound']:.4f}")
        return tuple(lines)
    return tuple(
        f"throughput bound (all-gather cut, {partition}): {gbps:.2f} GB/s of algorithm bandwidth"
        for gbps, partition, _ in bounds
    )


def native_line(native_seconds: float) -> str:
    """The line that says ``--allreduce auto`` takes torch's own all-reduce, which no row shows."""
    return (
        f"--allreduce auto takes native (torch's own all-reduce): {seconds(native_seconds)} modeled, "
        "faster than every row"
    )


def broadcast_report(result: dict) -> Report:
    """``plan broadcast``'s report: the arborescence packing's one row and its rate."""
    row = result["planners"]["arborescence"]
    cells = {
        "planner": "arborescence",
        "modeled_seconds": row["modeled_seconds"],
        "normalized_time": row["normalized_time"],
        "note": f"normalized time {row['optimum_fraction']}",
    }
    rate = f"rate {row['arborescences_rate']:.3f} links: as fast as that many edge-disjoint arborescences"
    return Report(result, (Table(COLLECTIVE_COLUMNS, (cells,)),), after=(rate,))


H2D_COLUMNS = (
    PLANNER,
    Column("seconds", "simulated", "s"),
    Column("bound_seconds", "bound", "s"),
    Column("vs_direct", "vs direct", "x"),
)
PATH_COLUMNS = (PLANNER, Column("gpu", "gpu", "text"), Column("bytes", "bytes", "B"), Column("path", "path", "text"))


def h2d_report(result: dict) -> Report:
    """``sim multipath h2d``'s report: each planner's simulated time, its bound and its speed-up
    over ``direct``; then every path's bytes."""
    base = result["planners"].get("direct", {}).get("seconds")
    rows = tuple(
        {
            "planner": name,
            "seconds": row["seconds"],
            "bound_seconds": row["bound_seconds"],
            "vs_direct": base / row["seconds"] if base else None,
        }
        for name, row in result["planners"].items()
    )
    paths = tuple(
        {"planner": name, "gpu": part["gpu"], "bytes": part["bytes"], "path": " > ".join(part["devices"])}
        for name, row in result["planners"].items()
        for part in row["paths"]
    )
    note = "simulated only: commgraph has no executor for a split copy yet (one GPU or none has no second path)"
    return Report(result, (Table(H2D_COLUMNS, rows), Table(PATH_COLUMNS, paths)), after=(note,))
