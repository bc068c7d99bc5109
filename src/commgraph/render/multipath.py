"""The reports of ``commgraph sim multipath simulate``: each selector's completion times (mean,
median, p99), the time it takes to decide a request and its busiest link; with ``--sweep``, a row
per load and selector and each selector's sustainable throughput. Built from the command's JSON
object; times are stored in seconds (``decide_us`` in microseconds, as the JSON names it)."""

from __future__ import annotations

from commgraph.render.table import Column, Report, Table
from commgraph.render.units import seconds

SELECTOR = Column("selector", "selector", "text")
TIMES = (Column("mean_s", "mean", "s"), Column("median_s", "median", "s"), Column("p99_s", "p99", "s"))
DECIDE = Column("decide_s", "decide per request", "s")


def selectors_report(result: dict, first: str) -> Report:
    """``sim multipath simulate``'s report under the line ``first``."""
    columns = (SELECTOR, *TIMES, DECIDE, Column("busiest", "busiest link", "text"))
    rows = tuple(
        {
            "selector": name,
            **{c.key: row[c.key] for c in TIMES},
            "decide_s": row["decide_us"] * 1e-6,
            "busiest": f"{row['links'][0]['link']} {row['links'][0]['utilisation']:.0%}" if row["links"] else None,
        }
        for name, row in result["selectors"].items()
    )
    return Report(result, (Table(columns, rows),), before=(first,))


def sweep_report(result: dict, first: str) -> Report:
    """``sim multipath simulate --sweep``'s report: a row per load and selector, then each
    selector's sustainable throughput (the highest rate whose median stays under the bound)."""
    columns = (Column("load", "load"), Column("rate_per_s", "rate/s"), SELECTOR, *TIMES)
    rows = tuple(
        {
            "load": point["load"],
            "rate_per_s": round(point["rate_per_s"]),
            "selector": name,
            **{c.key: point[c.key] for c in TIMES},
        }
        for name, points in result["selectors"].items()
        for point in points
    )
    best = tuple(
        {
            "selector": name,
            "sustainable": round(result["sustainable_per_s"][name]),
            "decide_s": sum(p["decide_us"] for p in points) / len(points) * 1e-6,
        }
        for name, points in result["selectors"].items()
    )
    title = f"sustainable throughput (median under {seconds(result['bound_s'])}), requests/s:"
    throughput = Table((SELECTOR, Column("sustainable", "requests/s"), DECIDE), best, title=title)
    return Report(result, (Table(columns, rows), throughput), before=(first,))


PATH_COLUMNS = (
    Column("type", "type", "text"),
    Column("path", "path", "text"),
    Column("bottleneck_gbps", "bottleneck", "GB/s"),
    Column("traverse_s", "traverse", "s"),
    Column("toll_s", "toll", "s"),
)


def paths_report(result: dict) -> Report:
    """``sim multipath paths``'s report: each path's bottleneck speed and its traverse and toll times."""
    rows = tuple({**row, "path": " > ".join(row["devices"])} for row in result["paths"])
    return Report(result, (Table(PATH_COLUMNS, rows),))
