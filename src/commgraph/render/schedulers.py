"""The report of ``commgraph sim llm``: one row per coflow scheduler (iteration time, makespan,
tokens/s, speed-up over the baseline, the share of the possible gain reached, each coflow type's
mean completion time), built from the comparison's JSON object.

A headroom share is ``-`` where nothing is left to gain, and ``slower`` where the scheduler's
makespan is longer than the baseline's (a negative share of a small gap reads as a large loss).
"""

from __future__ import annotations

from commgraph.render.table import Column, Report, Shown, Table
from commgraph.render.units import seconds


def scheduler_columns(baseline: str) -> tuple[Column, ...]:
    return (
        Column("scheduler", "scheduler", "text"),
        Column("iteration_seconds", "iteration", "s"),
        Column("makespan_seconds", "makespan", "s"),
        Column("tokens_per_second", "tokens/s"),
        Column("speedup", f"vs {baseline}", "x"),
        Column("headroom_reached", "headroom reached", "%"),
        Column("coflows", "coflow mean completion", "text"),
    )


def scheduler_report(report: dict, before: tuple[str, ...] = ()) -> Report:
    """``sim llm``'s report from its JSON object, under the lines ``before`` (the run's header)."""
    rows = tuple(_row(name, row) for name, row in report["schedulers"].items())
    return Report(report, (Table(scheduler_columns(report["baseline"]), rows),), before=before)


def _row(name: str, row: dict) -> dict:
    reached = row["headroom_reached"]
    return {
        "scheduler": name,
        "iteration_seconds": row["iteration_seconds"],
        "makespan_seconds": row["makespan_seconds"],
        "tokens_per_second": round(row["tokens_per_second"]),
        "speedup": row["speedup"],
        "headroom_reached": Shown(reached, "slower") if reached is not None and reached < 0 else reached,
        "coflows": "  ".join(f"{kind} {seconds(c['mean_seconds'])}" for kind, c in row["coflows"].items()),
    }
