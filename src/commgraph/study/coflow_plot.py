"""Traces of simulated LLM iterations: per scheduler, each pipeline stage's computations and every
coflow type's coflows over time, as a Chrome/Perfetto trace (JSON)."""

from __future__ import annotations

import json
from pathlib import Path

from commgraph.atomic import atomic_write
from commgraph.sim.dag import Compute
from commgraph.study.coflow import Outcome


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
