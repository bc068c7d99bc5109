"""A floor under an LLM training run's makespan that keeps every dependency, beside the
free-communication ceiling (an oracle that lets every byte move in no time).

:func:`iteration_floor` prices the whole DAG, every iteration in it, with
:func:`commgraph.sim.floor.dag_floor` (critical path at each task's least time, each link's bytes
priced in the windows where they can move). That is a lower bound on the makespan of any schedule,
whatever the phase of the data-parallel replicas: a steady-state period bound would have to assume
the replicas run in phase, and schedulers that let them drift apart break such a bound. The floor is
therefore a claim about the makespan of all the iterations, not about the steady-state period.

Floating sums in the floor and in the simulator may round differently; the floor is lowered by
:data:`ROUNDING` (relative) so that it never exceeds a simulated makespan it equals in exact
arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commgraph.sim.floor import Graph, dag_floor, task_graph
from commgraph.workload.iteration import Iteration

ROUNDING = 1e-12


@dataclass(frozen=True)
class IterationFloor:
    """``seconds``: the floor on the makespan of all the DAG's iterations; ``binding``: what gives
    it (a window on a resource, or the critical path); the parts: ``window_seconds`` (the DAG's
    window bound), ``path_seconds`` (its critical path) and ``link_seconds`` (the busiest link
    direction's bytes per iteration over its bandwidth)."""

    seconds: float
    binding: str
    window_seconds: float
    path_seconds: float
    link_seconds: float

    def to_dict(self) -> dict:
        return {
            "floor_seconds": self.seconds,
            "floor_binding": self.binding,
            "floor_window_seconds": self.window_seconds,
        }


def iteration_floor(iteration: Iteration) -> IterationFloor:
    """The floor on the makespan of ``iteration``'s DAG, all its iterations (module docstring)."""
    graph = task_graph(iteration.topology, iteration.tasks)
    first = np.array([not (t.id[0] == "i" and t.id[1].isdigit()) for t in iteration.tasks])  # iteration 0
    floor = dag_floor(iteration.topology, iteration.tasks, graph=graph)
    binding = f"window on {floor.resource}" if floor.window_seconds >= floor.path_seconds else "critical path"
    return IterationFloor(
        floor.seconds * (1.0 - ROUNDING),
        binding,
        floor.window_seconds,
        floor.path_seconds,
        _link_seconds(iteration, graph, first),
    )


def _entries(graph: Graph, tasks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the data flows of ``tasks`` (positions of transfers): per route entry, the task, the
    resource, and the seconds of its bytes there at full bandwidth."""
    flows = graph.flows
    f = flows.task_flow[tasks]
    keep = f >= 0
    tasks, f = tasks[keep], f[keep]
    lengths = flows.lengths[f]
    starts = np.repeat(flows.ptr[f], lengths) + (
        np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    )
    resource = flows.resources[starts]
    seconds = np.repeat(flows.sizes[f], lengths) * flows.weights[starts] / flows.capacity[resource]
    return np.repeat(tasks, lengths), resource, seconds


def _link_seconds(iteration: Iteration, graph: Graph, first: np.ndarray) -> float:
    _, resource, seconds = _entries(graph, np.flatnonzero(first))
    links = resource < 2 * len(iteration.topology.links)
    per = np.bincount(resource[links], weights=seconds[links])
    return float(per.max()) if per.size else 0.0
