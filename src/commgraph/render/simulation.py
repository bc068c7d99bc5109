"""The report of ``commgraph sim dag``: the makespan, each task's start and finish (small DAGs),
and the busiest links (bytes, busy time, utilisation), built from plain rows."""

from __future__ import annotations

from commgraph.render.table import Column, Report, Table

TASK_COLUMNS = (Column("task", "task", "text"), Column("start", "start", "s"), Column("finish", "finish", "s"))
LINK_COLUMNS = (
    Column("link", "link", "text"),
    Column("kind", "kind", "text"),
    Column("bytes", "bytes", "B"),
    Column("busy_seconds", "busy", "s"),
    Column("utilisation", "utilisation", "%"),
)


def dag_report(result: dict, first: str, tasks: list[dict], links: list[dict]) -> Report:
    """``sim dag``'s report under the line ``first``: ``tasks`` (task, start, finish; none for a
    large DAG) and ``links`` (the busiest, each with link, kind, bytes, busy_seconds, utilisation)."""
    tables = (Table(TASK_COLUMNS, tuple(tasks)),) if tasks else ()
    if links:
        tables += (Table(LINK_COLUMNS, tuple(links), title="busiest links:"),)
    return Report(result, tables, before=(first,))
