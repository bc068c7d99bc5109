"""The compute probe of ``commgraph topo calibrate``: the step-time cost model's coefficients
(:class:`~commgraph.topology.compute.ComputeModel`) measured on this machine in a few seconds.

- **layers**: for each model, a training step (forward, cross-entropy, backward, Adam's step) of
  an ``L``-layer GNN on R-MAT graphs of :data:`LAYER_POINTS` (nodes, edges, input width, layers),
  one thread, shaped as ``train`` shapes its models: the input width narrowed to
  :data:`HIDDEN` (GAT: times its :data:`HEADS` heads), then :data:`CLASSES` classes, so that the
  row term's coefficient carries a transform's element-wise work (dropout, activation) as a job's
  does. The points pair a tiny graph with large ones, narrow inputs with wide ones and two layers
  with three, so that the fixed costs and the slopes separate: the seconds are fitted, by
  non-negative least squares on the relative error, as ``step_s + L layer_s + edge_s sum(E a) +
  row_s sum(R w o)`` (the terms a prediction sums, :func:`~commgraph.plan.steptime.layer_terms`);
- **sample**: :class:`~commgraph.sample.neighbor.NeighborSampler` batches of
  :data:`SAMPLE_BATCHES` seeds, fitted as ``sample_batch_s + sample_edge_s * edges``;
- **gather**: feature rows gathered into a table, :data:`GATHER_ROWS` rows each of
  :data:`GATHER_WIDTHS` widths, fitted as ``gather_row_s * rows + gather_byte_s * bytes``;
- **efficiency**: the largest layer point on every core against one thread;
- **corun**: the largest layer point on one thread in each of ``cores`` processes forked at once,
  against one alone (the median process's time over the lone one's, at least 1): how much the
  machine's busy cores slow one another, as a job's one-thread workers do.

Each probe's error is its fit's worst relative error over its points (the median of
:data:`REPEATS` timings each).
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable

import numpy as np
import torch
from scipy.optimize import nnls

from commgraph.errors import TopologyError
from commgraph.graph.core import loop_free_in_degrees
from commgraph.graph.synthetic import rmat
from commgraph.nn.block import Block
from commgraph.nn.model import GNN
from commgraph.plan.steptime import layer_terms
from commgraph.sample.base import SamplingGraph
from commgraph.sample.neighbor import NeighborSampler
from commgraph.topology.compute import MODELS, ComputeModel, machine_kind

# nodes, edges, input width, layers: a tiny graph (the fixed costs), edges and input widths grown apart
LAYER_POINTS = (
    (64, 256, 8, 2),
    (64, 256, 8, 3),
    (2000, 40000, 16, 2),
    (2000, 8000, 512, 2),
    (2000, 20000, 128, 3),
)
HIDDEN, HEADS = 16, 4  # train's defaults (--hidden, --heads)
SAMPLE_BATCHES = (16, 256, 1024)
GATHER_ROWS = (2000, 20000)
GATHER_WIDTHS = (16, 512)  # floats: a narrow row costs its index, a wide one its bytes
REPEATS = 5
CLASSES = 8


def probe_compute() -> ComputeModel:
    """This machine's compute coefficients (see the module's description)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        graphs = {(n, e): rmat(n, e // 2, seed=1) for n, e, _, _ in LAYER_POINTS}
        coefficients, errors = {}, {}
        for model in MODELS:
            points = [
                (*_terms(model, graphs[n, e], w, layers), _step_seconds(model, graphs[n, e], w, layers))
                for n, e, w, layers in LAYER_POINTS
            ]
            coefficients[model], errors[model] = _fit(points)
        largest = max(LAYER_POINTS, key=lambda point: point[1] * point[2])
        graph = graphs[largest[:2]]
        (sample_batch_s, sample_edge_s), errors["sample"] = _fit(_sample_points(graph))
        (gather_row_s, gather_byte_s), errors["gather"] = _fit(_gather_points())
        largest_step = lambda: _step_seconds("sage", graph, largest[2], largest[3])  # noqa: E731
        single = largest_step()
        cores = os.cpu_count() or 1
        corun = _corun(largest_step, cores)
    finally:
        torch.set_num_threads(threads)
    many = largest_step()
    efficiency = 1.0 if cores == 1 else min(1.0, max(0.05, (single / many - 1) / (cores - 1)))
    return ComputeModel(
        edge_s={m: c[2] for m, c in coefficients.items()},
        row_s={m: c[3] for m, c in coefficients.items()},
        layer_s={m: c[1] for m, c in coefficients.items()},
        step_s={m: c[0] for m, c in coefficients.items()},
        sample_edge_s=sample_edge_s,
        sample_batch_s=sample_batch_s,
        gather_byte_s=gather_byte_s,
        gather_row_s=gather_row_s,
        efficiency=efficiency,
        corun=corun,
        machine=machine_kind(),
        cores=cores,
        errors=errors,
    )


def _terms(model: str, graph, width: int, layers: int) -> tuple[float, float, float, float]:
    """An ``layers``-layer GNN's step terms on ``graph`` as a whole-graph block (``width`` wide
    input, :data:`HIDDEN` hidden, :data:`CLASSES` classes): 1 (the step), the layers, the edge
    term and the row term."""
    n, e = graph.num_nodes, graph.num_edges
    hidden = HIDDEN * (HEADS if model == "gat" else 1)
    ins = [width] + [hidden] * (layers - 1)
    widths = list(zip(ins, [hidden] * (layers - 1) + [CLASSES]))
    edges, rows = layer_terms(model, [(e, n, n, w, o) for w, o in widths])
    return 1.0, float(layers), edges, rows


def _step_seconds(model: str, graph, width: int, layers: int) -> float:
    """The median seconds of a training step of ``layers``-layer ``model`` on ``graph``: forward,
    cross-entropy, backward and Adam's step, as the trainer takes one."""
    torch.manual_seed(0)
    gnn = GNN(model, width, HIDDEN, CLASSES, layers=layers, heads=HEADS)
    optimizer = torch.optim.Adam(gnn.parameters())
    degree = torch.from_numpy(loop_free_in_degrees(graph.indptr, graph.indices).astype(np.float32))
    block = Block.from_csr(graph.num_nodes, graph.indptr, graph.indices, degree)
    x = torch.randn(graph.num_nodes, width)
    y = torch.randint(0, CLASSES, (graph.num_nodes,))

    def step() -> None:
        optimizer.zero_grad()
        h = x
        for index in range(layers):
            h = gnn.layer(index, h, block)
        torch.nn.functional.cross_entropy(h, y).backward()
        optimizer.step()

    return _median(step)


def _sample_points(graph) -> list[tuple[float, float, float]]:
    """``(1, sampled edges, seconds)`` of a batch of each of :data:`SAMPLE_BATCHES` seeds."""
    sampler = NeighborSampler(SamplingGraph.from_graph(graph), "10,5")
    rng = np.random.default_rng(0)
    points = []
    for batch in SAMPLE_BATCHES:
        seeds = rng.choice(graph.num_nodes, batch, replace=False)
        edges = sum(layer.num_edges for layer in sampler.sample(seeds, rng).layers)
        points.append((1.0, float(edges), _median(lambda: sampler.sample(seeds, rng))))
    return points


def _gather_points() -> list[tuple[float, float, float]]:
    """``(rows, bytes, seconds)`` of random rows gathered from a table, each count and width."""
    rng = np.random.default_rng(0)
    points = []
    for width in GATHER_WIDTHS:
        table = rng.standard_normal((2 * GATHER_ROWS[-1], width), dtype=np.float32)
        for rows in GATHER_ROWS:
            index = rng.integers(0, table.shape[0], rows)
            points.append((float(rows), float(rows * width * 4), _median(lambda: torch.from_numpy(table[index]))))
    return points


def _fit(points: list[tuple[float, ...]]) -> tuple[tuple[float, ...], float]:
    """The non-negative coefficients ``c`` of ``seconds = sum_i c_i terms_i`` over points
    ``(*terms, seconds)``, fitted on the relative error, and the fit's worst relative error."""
    terms = np.array([p[:-1] for p in points], dtype=float)
    seconds = np.array([p[-1] for p in points], dtype=float)
    weights = 1 / seconds  # relative errors
    coefficients, _ = nnls(terms * weights[:, None], seconds * weights)
    return tuple(float(c) for c in coefficients), float(np.max(np.abs(terms @ coefficients - seconds) / seconds))


def _corun(step: Callable[[], float], cores: int) -> float:
    """How many times slower ``step`` (seconds it measured) runs in each of ``cores`` processes at
    once than alone: the median process's over the lone run's, at least 1 (1 on one core)."""
    if cores < 2:
        return 1.0
    alone = step()
    return max(1.0, float(np.median(_together(step, cores))) / alone)


def _together(step: Callable[[], float], processes: int) -> list[float]:
    """``step()`` in each of ``processes`` processes forked at once; their results."""
    read, write = os.pipe()
    children = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:  # the child reports its seconds and leaves without running the parent's cleanup
            code = 1
            try:
                os.write(write, struct.pack("d", step()))
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    os.close(write)
    with os.fdopen(read, "rb") as results:
        data = results.read()
    failed = sum(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0 for pid in children)
    if failed or len(data) != 8 * processes:
        raise TopologyError(f"the compute probe's corun: {failed} of {processes} forked processes failed")
    return list(struct.unpack(f"{processes}d", data))


def _median(run: Callable[[], object]) -> float:
    run()  # warm: allocations, first-call dispatch
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return float(np.median(times))
