"""The reports of the commands that run a job: ``predict`` (the model, then a row per split with
its accuracy), ``analyze`` (one row: iterations, seconds, bytes exchanged, edges a second), and the
estimates ``train|predict|analyze --dry-run`` print before any worker starts (memory by part, once
per machine and for each worker; a step's predicted seconds by part), and ``run --dry-run``'s (the
job, then each partition set's memory and halo exchange), each built from the command's JSON
object."""

from __future__ import annotations

from commgraph.render.table import Column, Report, Table
from commgraph.render.units import count, nbytes, seconds

PART = Column("part", "part", "text")
ACCURACY_COLUMNS = (Column("split", "split", "text"), Column("accuracy", "accuracy"), Column("nodes", "nodes"))
ANALYSIS_COLUMNS = (
    Column("algo", "algorithm", "text"),
    Column("iterations", "iterations"),
    Column("seconds", "time", "s"),
    Column("bytes", "exchanged", "B"),
    Column("edges_per_second", "edges/s"),
)
MEMORY_COLUMNS = (
    PART,
    Column("machine", "once per machine", "B"),
    Column("worker", "each worker", "B"),
    Column("streamed", "streamed from disk", "B"),
)
STEP_PARTS = (
    ("compute", "compute"),
    ("sampling", "sampling"),
    ("feature_fetch", "feature fetch"),
    ("halo_exchange", "halo exchange"),
    ("allreduce", "all-reduce"),
)
STEP_COLUMNS = (PART, Column("seconds", "each step", "s"), Column("share", "share", "%"))
EXCHANGE_COLUMNS = (
    Column("layer", "layer", "text"),
    Column("columns", "columns"),
    Column("bytes", "bytes", "B"),
    Column("modeled_seconds", "modeled", "s"),
    Column("planner", "plan", "text"),
)


def prediction_report(result: dict) -> Report:
    """``predict``'s report: a line on the model and the graph, then each split's accuracy."""
    origin = "the graph it was trained on" if result["same_graph"] else "a graph it was not trained on"
    line = (
        f"{result['model']}, {result['layers']} layers, hidden {result['hidden']}, after epoch {result['epoch']}, "
        f"on {origin}: {result['graph']}, {result['num_nodes']:,} nodes in {seconds(result['seconds'])}"
    )
    rows = tuple({"split": split, **figures} for split, figures in result["accuracy"].items())
    return Report(result, (Table(ACCURACY_COLUMNS, rows),) if rows else (), before=(line,))


def analysis_report(summary: dict) -> Report:
    """``analyze``'s report: its one row (:meth:`~commgraph.analytics.Analysis.summary`)."""
    return Report(summary, (Table(ANALYSIS_COLUMNS, (summary,)),))


def estimate_report(data: dict) -> Report:
    """``--dry-run``'s report from its JSON object (a :class:`~commgraph.plan.memory.MemoryEstimate`'s
    data, with a ``step_time`` where the step is predicted)."""
    tables, after = [_memory_table(data)], []
    if data.get("budget") is not None:
        after.append(
            f"budget {nbytes(data['budget'])}: resident at least {nbytes(data['minimum_bytes'])}, "
            f"each worker's feature cache {nbytes(data['worker'].get('features', 0))}"
        )
    step = data.get("step_time")
    if step is not None:
        tables.append(_step_table(step))
        if step["defaults"]:
            after.append(
                f"defaults, not measured here: {', '.join(step['defaults'])} (run commgraph topo calibrate "
                "--out FILE.yaml and pass --topology FILE.yaml or --cost-model FILE.yaml)"
            )
    return Report(data, tuple(tables), after=tuple(after))


def _memory_table(data: dict, heading: str = "") -> Table:
    """A memory estimate's bytes by part, once per machine and for each worker (and streamed from
    disk under a budget), under its total; ``heading`` goes before the title."""
    kinds = {key: data.get(key) or {} for key in ("machine", "worker", "streamed")}
    parts = dict.fromkeys(name for values in kinds.values() for name in values)
    rows = tuple({"part": name, **{key: values.get(name) for key, values in kinds.items()}} for name in parts)
    workers = count(data["machine_workers"], "worker")
    title = (
        f"{heading}memory estimate: {nbytes(data['machine_peak_bytes'])} per machine "
        f"({workers} of {nbytes(data['worker_peak_bytes'])} each)"
    )
    columns = MEMORY_COLUMNS if kinds["streamed"] else MEMORY_COLUMNS[:-1]
    return Table(columns, rows, title=title)


def _step_table(step: dict) -> Table:
    total = step["step_seconds"]
    rows = tuple(
        {"part": name, "seconds": step[f"{key}_seconds"], "share": step[f"{key}_seconds"] / total if total else None}
        for key, name in STEP_PARTS
    )
    title = (
        f"step time estimate: {seconds(total)} a step, {seconds(step['epoch_seconds'])} an epoch "
        f"({count(step['steps_per_epoch'], 'step')})"
    )
    return Table(STEP_COLUMNS, rows, title=title)


def script_report(data: dict) -> Report:
    """``run --dry-run``'s report (:func:`~commgraph.launch.script.dry_run`): the job, then per
    partition set its memory estimate and the halo exchange before each ``MessagePassing`` layer."""
    job = data["job"]
    before = (
        f"job: {count(job['ranks'], 'rank')} on this machine, {job['device']} with {job['backend']}, "
        f"{job['threads'] or 'cores / ranks'} thread(s) each; cg.full_graph plans on topology {job['topology']} "
        "(detected: its default)",
        "step time: not predicted (the script's model and loop are not known before it runs; "
        "commgraph train --dry-run predicts train's models)",
    )
    tables = []
    for found in data["sets"]:
        tables.append(
            _memory_table(
                found["memory"], f"{found['path']}, as {found['training']} training of train's default model: "
            )
        )
        rows = found["exchange"]["halo_rows"]
        title = f"exchange before each MessagePassing layer: {rows:,} halo rows, {nbytes(4 * rows)} a float32 column"
        tables.append(Table(EXCHANGE_COLUMNS, tuple(found["exchange"]["layers"]), title=title))
    after = () if data["sets"] else ("no partition set among the script's arguments: nothing to estimate",)
    return Report(data, tuple(tables), before=before, after=after)
