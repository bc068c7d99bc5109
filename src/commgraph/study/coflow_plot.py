"""Pictures and traces of simulated LLM iterations: per scheduler, each pipeline stage's computations
and every coflow type's coflows over time (PNG), or the same as a Chrome/Perfetto trace (JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from commgraph.atomic import atomic_write
from commgraph.plotting import pyplot, save_png
from commgraph.sim.dag import Compute
from commgraph.study.coflow import Outcome

COLOURS = {"pp": "C0", "dp": "C1", "ep": "C2", "tp": "C3"}


def plot_schedulers(outcomes: dict[str, Outcome], rows: list[str], path: str | Path) -> None:
    """One panel per scheduler: a row per device in ``rows`` (computations, grey) and a row per
    coflow type (each coflow from its first flow's start to its last flow's end)."""
    plt = pyplot()

    fig, axes = plt.subplots(
        len(outcomes),
        1,
        figsize=(12, 2.2 + 0.25 * len(rows) * len(outcomes) + 1.5 * len(outcomes)),
        sharex=True,
        squeeze=False,
    )
    for ax, (name, outcome) in zip(axes[:, 0], outcomes.items()):
        row_of = {device: k for k, device in enumerate(rows)}
        tasks, result = outcome.schedule.tasks, outcome.result
        for task, start, finish in zip(tasks, result.start, result.finish):
            if isinstance(task, Compute) and task.device in row_of and finish > start:
                ax.barh(row_of[task.device], finish - start, left=start, height=0.7, color="0.6")
        kinds = list(dict.fromkeys(c.kind for c in outcome.schedule.coflows))
        for k, kind in enumerate(kinds):
            mine = np.array([c.kind == kind for c in outcome.schedule.coflows])
            ax.barh(
                np.full(mine.sum(), len(rows) + k),
                outcome.coflow_finish[mine] - outcome.coflow_start[mine],
                left=outcome.coflow_start[mine],
                height=0.7,
                color=COLOURS.get(kind, "C4"),
                alpha=0.35,
            )
        ax.set_yticks(range(len(rows) + len(kinds)), [*rows, *(f"{kind} coflows" for kind in kinds)], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{name}: iteration {result.makespan:.3f} s", fontsize=9)
    axes[-1, 0].set_xlabel("time (s)")
    save_png(fig, path)


def write_trace(outcomes: dict[str, Outcome], path: str | Path) -> None:
    """Chrome trace-event JSON (opens in ui.perfetto.dev): a process per scheduler, a thread per
    device for computations and one per coflow type for coflows; times in microseconds."""
    events = []
    for pid, (name, outcome) in enumerate(outcomes.items()):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})
        threads: dict[str, int] = {}

        def tid(label: str) -> int:
            if label not in threads:
                threads[label] = len(threads)
                events.append(
                    {"ph": "M", "name": "thread_name", "pid": pid, "tid": threads[label], "args": {"name": label}}
                )
            return threads[label]

        result = outcome.result
        for task, start, finish in zip(outcome.schedule.tasks, result.start.tolist(), result.finish.tolist()):
            if isinstance(task, Compute) and finish > start:
                events.append(
                    {
                        "ph": "X",
                        "name": task.id,
                        "pid": pid,
                        "tid": tid(task.device),
                        "ts": start * 1e6,
                        "dur": (finish - start) * 1e6,
                    }
                )
        for coflow, start, finish in zip(
            outcome.schedule.coflows, outcome.coflow_start.tolist(), outcome.coflow_finish.tolist()
        ):
            events.append(
                {
                    "ph": "X",
                    "name": coflow.id,
                    "pid": pid,
                    "tid": tid(f"{coflow.kind} coflows"),
                    "ts": start * 1e6,
                    "dur": (finish - start) * 1e6,
                    "args": {"microbatch": coflow.microbatch, "layer": coflow.layer, "type": coflow.kind},
                }
            )
    with atomic_write(path) as handle:
        handle.write(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}).encode())
