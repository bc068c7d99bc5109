"""The reports of ``commgraph topo list`` (a row per preset name) and ``commgraph topo show``: the
lines that describe a topology (hosts, devices, speeds, link kinds, calibration) and a row per link
(its ends, kind, count, bandwidth, latency and per-message overhead), built from the topology's JSON
object."""

from __future__ import annotations

from commgraph.render.table import Column, Report, Table

LINK_COLUMNS = (
    Column("ends", "link", "text"),
    Column("kind", "kind", "text"),
    Column("count", "count"),
    Column("bandwidth_gbps", "bandwidth", "GB/s"),
    Column("latency_s", "latency", "s"),
    Column("overhead_s", "overhead per message", "s"),
)


def topology_report(data: dict, lines: tuple[str, ...], links: list[dict] | None) -> Report:
    """``topo show``'s report: ``lines`` above the table of ``links`` (the topology's JSON
    ``links``: a, b, kind, count, bandwidth_gbps, latency_us, overhead_us), or no table (None)."""
    if links is None:
        return Report(data, before=lines)
    rows = tuple(
        {
            "ends": f"{link['a']} - {link['b']}",
            "kind": link["kind"],
            "count": link.get("count", 1),
            "bandwidth_gbps": link["bandwidth_gbps"],
            "latency_s": link.get("latency_us", 0.0) * 1e-6,
            "overhead_s": link.get("overhead_us", 0.0) * 1e-6 or None,
        }
        for link in links
    )
    return Report(data, (Table(LINK_COLUMNS, rows),), before=lines)


def presets_report(names: list[str]) -> Report:
    """``topo list``'s report: a row per preset name; its JSON is ``{"presets": names}``."""
    table = Table((Column("preset", "preset", "text"),), tuple({"preset": name} for name in names))
    return Report({"presets": names}, (table,))
