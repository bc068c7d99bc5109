"""The pictures of reports: bar charts, one bar per row, against reference lines (a bound, a
floor, a ceiling). Each picture is described first as :class:`Bars` panels (the data behind it,
which tests check) and then drawn by :func:`draw_bars`.

- plans (``plan allgather|allreduce --png``): modeled time per planner, and algorithm bandwidth
  against the throughput bound where the plans have one; the chosen planner's bar is dark;
- schedulers (``sim llm --png``): each scheduler's iteration time beside free communication (the
  ceiling: no scheduler is faster) and the floor;
- training runs (``plot --y``): epoch time, communication wait or bytes per epoch (every byte the
  thesis counts: halo, features and the gradients' all-reduce), a panel each and a line per run
  (:func:`metric_panels`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from commgraph.errors import TrainingError
from commgraph.plotting import pyplot, save_png


@dataclass(frozen=True)
class Bars:
    """One panel: a bar per label, reference lines across it.

    Args:
        title: the panel's title.
        ylabel: the value axis, with its unit.
        labels: a bar's name each.
        values: a bar's height each, in the unit of ``ylabel``.
        lines: each reference line's label and height.
        chosen: the index of the bar drawn dark, or None.
    """

    title: str
    ylabel: str
    labels: tuple[str, ...]
    values: tuple[float, ...]
    lines: dict[str, float] = field(default_factory=dict)
    chosen: int | None = None


TIME_SCALES = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"))


def time_scale(values) -> tuple[float, str]:
    """The unit of a time axis: the largest of s, ms, us at which the largest value is >= 1."""
    top = max((abs(v) for v in values), default=0.0)
    return next(((s, n) for s, n in TIME_SCALES if top >= s), TIME_SCALES[-1])


def time_bars(title: str, what: str, labels, seconds, lines: dict[str, float], chosen=None) -> Bars:
    """A panel of times (seconds) on an axis scaled to them."""
    scale, unit = time_scale([*seconds, *lines.values()])
    return Bars(
        title,
        f"{what} ({unit})",
        tuple(labels),
        tuple(s / scale for s in seconds),
        {k: v / scale for k, v in lines.items()},
        chosen,
    )


def plan_bars(result: dict, chosen: str | None, nbytes: float | None = None) -> list[Bars]:
    """The panels of ``plan allgather|allreduce --png`` from the command's JSON object: modeled time
    per planner (with the time at the throughput bound, for ``nbytes`` across the workers) and, where
    the plans report it, algorithm bandwidth against the bound."""
    names = list(result["planners"])
    index = names.index(chosen) if chosen in names else None
    rows = list(result["planners"].values())
    bounds = [r["bandwidth"]["bound"]["algbw_gbps"] for r in rows if "bandwidth" in r]
    bound = {"throughput bound": nbytes / (min(bounds) * 1e9)} if bounds and nbytes else {}
    panels = [
        time_bars("modeled time per planner", "modeled time", names, [r["modeled_seconds"] for r in rows], bound, index)
    ]
    if bounds:
        algbw = tuple(r["bandwidth"]["algbw_gbps"] for r in rows)
        panels.append(
            Bars("algorithm bandwidth", "algbw (GB/s)", tuple(names), algbw, {"throughput bound": min(bounds)}, index)
        )
    return panels


def scheduler_bars(report: dict) -> list[Bars]:
    """The panel of ``sim llm --png`` from its JSON object: each scheduler's iteration seconds,
    free communication's (the ceiling) and the floor per iteration (the floor of every
    iteration's makespan over the iterations)."""
    rows, top = report["schedulers"], report["ceiling"]
    lines = {
        "ceiling: free communication": top["free_communication_seconds"],
        "floor (per iteration)": top["floor_seconds"] / report["iterations"],
    }
    seconds = [r["iteration_seconds"] for r in rows.values()]
    return [time_bars("iteration time per scheduler", "iteration time", rows, seconds, lines)]


def draw_bars(panels: list[Bars], path: str | os.PathLike[str]) -> None:
    """Draw ``panels`` side by side, each a bar per label with its reference lines dashed, to a PNG."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        colours = ["C0" if k != panel.chosen else "C3" for k in range(len(panel.labels))]
        ax.bar(range(len(panel.labels)), panel.values, color=colours)
        for (label, value), style in zip(panel.lines.items(), ("--", ":", "-.")):
            ax.axhline(value, color="black", linewidth=1, linestyle=style, label=label)
        ax.set_xticks(range(len(panel.labels)), panel.labels, rotation=30, ha="right", fontsize=8)
        ax.set(ylabel=panel.ylabel, title=panel.title)
        ax.grid(axis="y", alpha=0.3)
        if panel.lines:
            ax.legend(fontsize=7)
    save_png(fig, path)


# ``plot --y`` names: the metrics record's field, the axis label and the scale to its unit
METRICS = {
    "epoch_s": ("epoch_seconds", "epoch time (s)", 1.0),
    "comm_wait": ("comm_wait_seconds", "communication wait (s)", 1.0),
    "bytes": ("total_bytes", "bytes per epoch (MB)", 1e-6),
}


@dataclass(frozen=True)
class Lines:
    """One panel of lines against epochs: per run, its epochs and values (in ``ylabel``'s unit)."""

    title: str
    ylabel: str
    series: dict[str, tuple[tuple[int, ...], tuple[float, ...]]]


def metric_panels(runs: dict[str, list[dict]], names: list[str]) -> list[Lines]:
    """A panel per ``plot --y`` name of :data:`METRICS`, a line per run of epoch records.

    Raises:
        TrainingError: a name not in :data:`METRICS`, or a run whose records lack its field.
    """
    panels = []
    for name in names:
        if name not in METRICS:
            raise TrainingError(f"--y {name!r}: choose from {', '.join(METRICS)}")
        key, label, scale = METRICS[name]
        series = {}
        for run, records in runs.items():
            if any(record.get(key) is None for record in records):
                raise TrainingError(f"run {run!r} records no {key} (a run of an older commgraph): leave out --y {name}")
            series[run] = (tuple(r["epoch"] for r in records), tuple(r[key] * scale for r in records))
        panels.append(Lines(label.split(" (")[0], label, series))
    return panels


def draw_lines(panels: list[Lines], path: str | os.PathLike[str]) -> None:
    """Draw ``panels`` side by side, a line per run against epochs, to a PNG."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for index, (run, (epochs, values)) in enumerate(panel.series.items()):
            ax.plot(epochs, values, color=f"C{index % 10}", marker="o", markersize=3, label=run)
        ax.set(xlabel="epoch", ylabel=panel.ylabel, title=panel.title)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save_png(fig, path)
