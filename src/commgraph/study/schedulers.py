"""An LLM training iteration under each coflow scheduler, against three bounds.

The iteration's DAG (:func:`~commgraph.workload.build_iteration`) is simulated under every
scheduler asked (:func:`~commgraph.study.coflow.run_schedule`), then priced three more ways:

- free communication (an oracle): the same DAG with every transfer instant, so no scheduler's
  iteration is shorter (:func:`~commgraph.study.coflow.free_communication`);
- the busiest link's bytes over its speed, a bound over many iterations
  (:func:`~commgraph.study.coflow.link_bound`);
- the floor (:func:`~commgraph.workload.floor.iteration_floor`): every dependency kept and link
  bytes priced where they can move, a bound on the makespan of all iterations. Each scheduler's
  headroom reached is measured on its makespan against it.

Speed-ups are over the first scheduler asked (the baseline).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from commgraph.errors import SimulationError
from commgraph.sim.progress import stage
from commgraph.sizes import check_room
from commgraph.study.coflow import (
    Outcome,
    Progress,
    ceiling,
    free_communication,
    headroom_reached,
    iteration_seconds,
    link_bound,
    report_step,
    run_schedule,
)
from commgraph.topology import Topology
from commgraph.workload import Layout, build_iteration
from commgraph.workload.floor import iteration_floor
from commgraph.workload.iteration import Iteration

TASK_BYTES = 4_000  # peak bytes per DAG task, built and then simulated (measured: about 3,100)


@dataclass
class SchedulerComparison:
    """Every scheduler's run of one DAG and the bounds beside them (:func:`compare_schedulers`).

    Args:
        schedulers: per scheduler, its summary row (iteration and makespan seconds, tokens/s,
            ``speedup`` over the baseline, ``headroom_reached``, coflow completion times).
        baseline: the scheduler the speed-ups are over (the first asked).
        ceiling: the bounds: free communication's and the busiest link's ceilings over the
            baseline, the floor's seconds, ceiling and binding resource.
        free_seconds: an iteration's seconds with free communication.
        iteration: the simulated DAG.
        outcomes: per scheduler, its simulated run (for timelines and traces); empty when the
            comparison was asked not to keep them.
    """

    schedulers: dict[str, dict]
    baseline: str
    ceiling: dict
    free_seconds: float
    iteration: Iteration
    outcomes: dict[str, Outcome]

    def to_dict(self) -> dict:
        """Plain data: ``schedulers``, ``baseline``, ``ceiling``, ``flows``, ``iterations``."""
        return {
            "schedulers": self.schedulers,
            "baseline": self.baseline,
            "ceiling": self.ceiling,
            "flows": self.iteration.flows,
            "iterations": self.iteration.iterations,
        }


def check_dag_size(spec, layout: Layout, hardware, topology: Topology, iterations: int, options: dict) -> None:
    """Refuse a DAG that would not fit in memory, before it is built: the tasks of one iteration
    of the fewest micro-batches the schedule allows, built, times the micro-batches and iterations
    asked (the task count grows no faster than that)."""
    fewest = layout.pp if layout.schedule == "interleaved" else 1
    probe = build_iteration(spec, replace(layout, microbatches=fewest), hardware, topology, iterations=1, **options)
    tasks = len(probe.tasks) * (layout.microbatches // fewest) * iterations
    check_room(
        f"--microbatches {layout.microbatches} x --iterations {iterations} ({tasks:,} tasks, "
        f"{len(probe.tasks):,} per {fewest} micro-batch(es) and iteration)",
        tasks * TASK_BYTES,
        SimulationError,
        "simulate fewer micro-batches or iterations",
    )


def compare_schedulers(
    spec,
    layout: Layout,
    hardware,
    topology: Topology,
    names: list[str],
    *,
    iterations: int = 1,
    matching: str | Mapping[str, str] | None = None,
    keep_outcomes: bool = True,
    progress: Progress | None = None,
    **options,
) -> SchedulerComparison:
    """Simulate ``iterations`` iterations of ``spec`` trained with ``layout`` on ``topology`` under
    each scheduler of ``names``, and the bounds beside them (module docstring).

    Args:
        spec: the model (:func:`~commgraph.workload.model`).
        layout: its parallel degrees and pipeline schedule.
        hardware: the GPU pricing compute (:func:`~commgraph.workload.gpu`).
        topology: the machine or cluster.
        names: schedulers of :data:`~commgraph.plan.coflow.SCHEDULERS`; the first is the baseline.
        iterations: iterations run back to back.
        matching: how EP all-to-alls send: one matching for every scheduler, or per scheduler name
            (the others, and None: each scheduler's default).
        keep_outcomes: keep each scheduler's simulated run in the report (timelines, traces);
            False drops each once summarised, so a large DAG holds one run at a time.
        progress: called with each step's label as it ends: ``build``, ``schedule NAME``,
            ``simulate NAME``, ``free communication``, ``floor``.
        **options: :func:`~commgraph.workload.build_iteration`'s DAG options (``dp_allreduce``,
            ``dp_collective``, ``barrier``, ``grad_bytes``, ``ep_flows``, ``routing_alpha``, ``seed``).

    Raises:
        SimulationError: a DAG that would not fit in memory.
    """
    stage("building the DAG")
    check_dag_size(spec, layout, hardware, topology, iterations, options)
    iteration = build_iteration(spec, layout, hardware, topology, iterations=iterations, **options)
    report_step("build", progress)
    outcomes, rows, spans = {}, {}, {}
    for name in names:
        outcome = run_schedule(
            name,
            iteration.tasks,
            iteration.coflows,
            topology,
            interleaved=layout.schedule == "interleaved",
            matching=matching.get(name) if isinstance(matching, Mapping) else matching,
            progress=progress,
        )
        rows[name] = outcome.summary(iteration.tokens, iteration.ends)
        spans[name] = outcome.result.makespan
        if name == names[0]:
            links = link_bound(outcome.result, iteration.iterations)
        if keep_outcomes:
            outcomes[name] = outcome
        del outcome
    stage("simulating free communication")
    free = iteration_seconds(free_communication(topology, iteration.tasks), iteration.ends)
    report_step("free communication", progress)
    stage("the floor")
    floor = iteration_floor(iteration)
    report_step("floor", progress)
    base, span = rows[names[0]]["iteration_seconds"], spans[names[0]]
    for name, row in rows.items():
        row["makespan_seconds"] = spans[name]
        row["speedup"] = base / row["iteration_seconds"]
        row["headroom_reached"] = headroom_reached(span, row["makespan_seconds"], floor.seconds)
    top = {
        **ceiling(base, free, links),
        "floor_seconds": floor.seconds,
        "floor_ceiling": span / floor.seconds if floor.seconds > 0 else float("inf"),
        "floor_binding": floor.binding,
    }
    return SchedulerComparison(rows, names[0], top, free, iteration, outcomes)
