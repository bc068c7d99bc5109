"""Timeline picture of a simulation: tasks per device over time, and the busiest links' use."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from commgraph.plotting import pyplot, save_png
from commgraph.sim.dag import Compute
from commgraph.sim.engine import SimResult

TOP_LINKS = 12


def plot_timeline(result: SimResult, path: str | Path) -> None:
    plt = pyplot()

    fig, (tasks_ax, links_ax) = plt.subplots(2, 1, figsize=(12, 8), sharex=True)
    rows: dict[str, int] = {}
    for task, start, finish in zip(result.tasks, result.start, result.finish):
        row_name = task.device if isinstance(task, Compute) else f"{task.src}->{task.dst}"
        row = rows.setdefault(row_name, len(rows))
        colour = "0.6" if isinstance(task, Compute) else f"C{task.priority % 10}"
        tasks_ax.barh(
            row,
            max(finish - start, result.makespan * 1e-3),
            left=start,
            height=0.6,
            color=colour,
            edgecolor="black",
            linewidth=0.3,
        )
    if len(rows) <= 40:
        tasks_ax.set_yticks(range(len(rows)), list(rows), fontsize=7)
    tasks_ax.set_ylabel("compute (grey) / transfers (colour = class)")
    tasks_ax.invert_yaxis()
    tasks_ax.set_title(f"{result.topology.name}: makespan {result.makespan * 1e3:.3f} ms")

    if result.timeline is not None and result.timeline[0].size:
        times, resources, utilisation = result.timeline
        busiest = np.argsort(-result.bytes_moved)[:TOP_LINKS]
        for r in busiest[result.bytes_moved[busiest] > 0]:
            mask = resources == r
            t = np.concatenate([times[mask], [result.makespan]])
            u = np.concatenate([utilisation[mask], [utilisation[mask][-1]]])
            links_ax.step(t, u, where="post", label=result.resource_name(int(r)))
        links_ax.legend(fontsize=7, ncol=2, loc="upper right")
    links_ax.set_ylabel(f"utilisation (top {TOP_LINKS} links)")
    links_ax.set_xlabel("time (s)")
    links_ax.set_ylim(0, 1.05)
    save_png(fig, path)
