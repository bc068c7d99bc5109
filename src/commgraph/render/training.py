"""The report of ``commgraph plot``: a row per training run (epochs, epoch time's median, minimum
and maximum, communication wait and its share, predicted and measured step time), then a row per
run of the bytes an epoch moves by kind; built from the
:class:`~commgraph.study.training.TrainingSummary`'s JSON object."""

from __future__ import annotations

from commgraph.render.table import Column, Report, Table

RUN = Column("run", "run", "text")
RUN_COLUMNS = (
    RUN,
    Column("epochs", "epochs"),
    Column("loss", "last loss"),
    Column("epoch_median", "epoch median", "s"),
    Column("epoch_min", "min", "s"),
    Column("epoch_max", "max", "s"),
    Column("wait_median", "comm wait median", "s"),
    Column("wait_share", "wait share", "%"),
    Column("predicted_step_seconds", "predicted step", "s"),
    Column("measured_step_seconds", "measured step", "s"),
    Column("measured_over_predicted", "measured / predicted", "x"),
)


def training_report(data: dict) -> Report:
    """``plot``'s report from a training summary's JSON object (``runs``: label to summary)."""
    runs = data["runs"]
    rows = tuple(_run_row(label, run) for label, run in runs.items())
    kinds = list(dict.fromkeys(kind for run in runs.values() for kind in run["bytes"]))
    tables = [Table(RUN_COLUMNS, rows)]
    if kinds:
        columns = (RUN, *(Column(kind, kind, "B") for kind in kinds))
        moved = tuple({"run": label, **run["bytes"]} for label, run in runs.items())
        tables.append(Table(columns, moved, title="bytes an epoch moves, by kind (mean over epochs, every worker)"))
    return Report(data, tuple(tables))


def _run_row(label: str, run: dict) -> dict:
    epoch, wait = run["epoch_seconds"] or {}, run["comm_wait_seconds"] or {}
    return {
        "run": label,
        "epochs": run["epochs"],
        "loss": run["loss"],
        "epoch_median": epoch.get("median"),
        "epoch_min": epoch.get("min"),
        "epoch_max": epoch.get("max"),
        "wait_median": wait.get("median"),
        "wait_share": run["wait_share"],
        "predicted_step_seconds": run["predicted_step_seconds"],
        "measured_step_seconds": run["measured_step_seconds"],
        "measured_over_predicted": run["measured_over_predicted"],
    }
