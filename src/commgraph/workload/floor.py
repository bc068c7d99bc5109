"""A floor under an LLM training iteration that keeps every dependency, beside the
free-communication ceiling (an oracle that lets every byte move in no time).

One iteration (:func:`iteration_floor` on a one-iteration DAG) is a DAG's makespan:
:func:`commgraph.sim.floor.dag_floor` bounds it (critical path at each task's least time, each
link's bytes priced in the windows where they can move).

Several iterations without a barrier report a steady-state iteration time ``T``. In a steady state
that repeats every ``T`` with the data-parallel replicas in phase (what the schedulers here reach
on a symmetric fabric), a layer's gradient collective of iteration ``k`` cannot start before the
layer's last backward pass of iteration ``k`` ends (``B(l)``), and must reach every replica before
its first forward pass of iteration ``k + 1`` starts (``F(l) + T``). Its window is
``T - (B(l) - F(l))`` long, and ``B(l) - F(l)`` is at least ``D(l)``: the longest path from the
start of ``F(l)`` to the end of ``B(l)`` in one iteration (computations, pipeline hand-offs and
expert all-to-alls at their least times: bubbles included). A stage's lower layers run their
forward pass earlier and their last backward pass later, so their windows nest inside layer
``l``'s, and a link must carry all of their data-parallel bytes inside it:

.. math::  T \\ge D(l) + \\sum_{l' \\le l \\text{ on the stage}} \\frac{bytes_{link}(l')}{B_{link}} .

The floor is the largest of that over stages, layers and link directions, the busiest link
direction's bytes per iteration over its bandwidth (the link bound) and the busiest device's
computation per iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commgraph.sim.floor import Graph, dag_floor, resource_name, task_graph
from commgraph.workload.iteration import Iteration, compute_id
from commgraph.workload.layout import Op


@dataclass(frozen=True)
class IterationFloor:
    """``seconds``: the floor per iteration; ``binding``: what gives it; the parts: ``window_seconds``
    (data-parallel bytes in their windows; for one iteration the DAG's window bound),
    ``link_seconds`` (busiest link direction per iteration), ``device_seconds`` (busiest device's
    computation per iteration; for one iteration the critical path)."""

    seconds: float
    binding: str
    window_seconds: float
    link_seconds: float
    device_seconds: float

    def to_dict(self) -> dict:
        return {
            "floor_seconds": self.seconds,
            "floor_binding": self.binding,
            "floor_window_seconds": self.window_seconds,
        }


def iteration_floor(iteration: Iteration) -> IterationFloor:
    """The floor of ``iteration``'s DAG (module docstring): its makespan's for one iteration, the
    steady state's for several."""
    graph = task_graph(iteration.topology, iteration.tasks)
    first = np.array([not (t.id[0] == "i" and t.id[1].isdigit()) for t in iteration.tasks])  # iteration 0
    link = _link_seconds(iteration, graph, first)
    if iteration.iterations == 1:
        floor = dag_floor(iteration.topology, iteration.tasks, graph=graph)
        binding = f"window on {floor.resource}" if floor.window_seconds >= floor.path_seconds else "critical path"
        return IterationFloor(floor.seconds, binding, floor.window_seconds, link, floor.path_seconds)
    device = _device_seconds(iteration, graph, first)
    window, where = _window_seconds(iteration, graph)
    parts = {"data-parallel window" + where: window, "link bound": link, "busiest device": device}
    binding = max(parts, key=parts.get)
    return IterationFloor(parts[binding], binding, window, link, device)


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


def _device_seconds(iteration: Iteration, graph: Graph, first: np.ndarray) -> float:
    busy: dict[str, float] = {}
    for i in np.flatnonzero(first & (graph.flows.task_flow < 0)):
        device = iteration.tasks[i].device
        busy[device] = busy.get(device, 0.0) + graph.seconds[i]
    return float(max(busy.values(), default=0.0))


def _window_seconds(iteration: Iteration, graph: Graph) -> tuple[float, str]:
    """The data-parallel window bound (module docstring) and where it binds."""
    model, layout = iteration.model, iteration.layout
    position = {t.id: i for i, t in enumerate(iteration.tasks)}
    part = ".a" if model.moe else ""
    per_vstage = model.layers // (layout.pp * layout.chunks)
    dp = [c for c in iteration.coflows if c.kind == "dp" and c.iteration == 0]
    best, where = 0.0, ""
    for stage in range(layout.pp):
        layers = [layer for layer in range(model.layers) if (layer // per_vstage) % layout.pp == stage]
        row = {layer: r for r, layer in enumerate(layers)}
        mine = [c for c in dp if c.layer in row]
        if not mine:
            continue
        tasks = np.concatenate([np.asarray(c.flows, dtype=np.int64) for c in mine])
        layer_of = np.repeat([row[c.layer] for c in mine], [len(c.flows) for c in mine])
        task, resource, seconds = _entries(graph, tasks)
        rows = _rows_of(tasks, layer_of, task)
        used, column = np.unique(resource, return_inverse=True)
        load = np.zeros((len(layers), used.size))
        np.add.at(load, (rows, column), seconds)
        nested = np.cumsum(load, axis=0)  # row l: the bytes of layers <= l, in seconds per link direction
        for layer in layers:
            chunk = layer // per_vstage // layout.pp
            forward = position[compute_id("", stage, 0, Op(False, chunk, 0), layer, part)]
            backward = position[compute_id("", stage, 0, Op(True, chunk, layout.microbatches - 1), layer, part)]
            span = float(graph.longest_from(forward)[backward])
            busiest = int(np.argmax(nested[row[layer]]))
            value = span + float(nested[row[layer], busiest])
            if value > best:
                best = value
                where = f" (stage {stage}, layer {layer}, {resource_name(iteration.topology, int(used[busiest]))})"
    return best, where


def _rows_of(tasks: np.ndarray, layer_of: np.ndarray, task: np.ndarray) -> np.ndarray:
    """The layer row of each entry's task (``tasks[k]`` is in row ``layer_of[k]``)."""
    lookup = dict(zip(tasks.tolist(), layer_of.tolist()))
    return np.array([lookup[t] for t in task.tolist()], dtype=np.int64)
