"""The compute probe of ``commgraph topo calibrate``: the step-time cost model's coefficients
(:class:`~commgraph.topology.compute.ComputeModel`) measured on this machine in a few seconds.

- **layers**: for each model, a two-layer GNN's forward and backward on R-MAT graphs of
  :data:`LAYER_POINTS` (nodes, edges, width), one thread; the seconds fitted, by non-negative least
  squares, as ``edge_s * sum(E a) + row_s * sum(R w o)`` (the same terms a prediction sums,
  :func:`~commgraph.plan.steptime.layer_terms`);
- **sample**: :class:`~commgraph.sample.neighbor.NeighborSampler` batches of two sizes, seconds per
  sampled edge;
- **gather**: feature rows gathered into a table, two sizes, seconds per byte;
- **efficiency**: the largest layer point on every core against one thread.

Each probe's error is its fit's worst relative error over its points (the median of
:data:`REPEATS` timings each).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np
import torch
from scipy.optimize import nnls

from commgraph.graph.core import loop_free_in_degrees
from commgraph.graph.synthetic import rmat
from commgraph.nn.block import Block
from commgraph.nn.model import GNN
from commgraph.plan.steptime import layer_terms
from commgraph.sample.base import SamplingGraph
from commgraph.sample.neighbor import NeighborSampler
from commgraph.topology.compute import MODELS, ComputeModel, machine_kind

LAYER_POINTS = ((2000, 10000, 32), (2000, 40000, 32), (2000, 10000, 128), (4000, 20000, 64))  # nodes, edges, width
SAMPLE_BATCHES = (256, 1024)
GATHER_ROWS = (10000, 40000)
REPEATS = 3


def probe_compute() -> ComputeModel:
    """This machine's compute coefficients (see the module's description)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        graphs = {(n, e): rmat(n, e // 2, seed=1) for n, e, _ in LAYER_POINTS}
        edge_s, row_s, errors = {}, {}, {}
        for model in MODELS:
            points = [
                (*_terms(model, graphs[n, e], w), _layer_seconds(model, graphs[n, e], w)) for n, e, w in LAYER_POINTS
            ]
            edge_s[model], row_s[model], errors[model] = _fit(points)
        graph = graphs[LAYER_POINTS[-1][:2]]
        sample_edge_s, errors["sample"] = _per_unit(_sample_points(graph))
        gather_byte_s, errors["gather"] = _per_unit(_gather_points())
        single = _layer_seconds("sage", graph, LAYER_POINTS[-1][2])
    finally:
        torch.set_num_threads(threads)
    cores = os.cpu_count() or 1
    many = _layer_seconds("sage", graph, LAYER_POINTS[-1][2])
    efficiency = 1.0 if cores == 1 else min(1.0, max(0.05, (single / many - 1) / (cores - 1)))
    return ComputeModel(edge_s, row_s, sample_edge_s, gather_byte_s, efficiency, machine_kind(), errors)


def _terms(model: str, graph, width: int) -> tuple[float, float]:
    """A two-layer GNN's edge and row terms on ``graph`` as a whole-graph block (``width`` wide, 8 classes)."""
    n, e = graph.num_nodes, graph.num_edges
    return layer_terms(model, [(e, n, n, width, width), (e, n, n, width, 8)])


def _layer_seconds(model: str, graph, width: int) -> float:
    """The median seconds of a two-layer ``model``'s forward and backward on ``graph``."""
    torch.manual_seed(0)
    gnn = GNN(model, width, width, 8, layers=2, heads=1, dropout=0.0)
    degree = torch.from_numpy(loop_free_in_degrees(graph.indptr, graph.indices).astype(np.float32))
    block = Block.from_csr(graph.num_nodes, graph.indptr, graph.indices, degree)
    x = torch.randn(graph.num_nodes, width)

    def step() -> None:
        h = x
        for index in range(2):
            h = gnn.layer(index, h, block)
        h.sum().backward()

    return _median(step)


def _sample_points(graph) -> list[tuple[float, float]]:
    sampler = NeighborSampler(SamplingGraph.from_graph(graph), "10,5")
    rng = np.random.default_rng(0)
    points = []
    for batch in SAMPLE_BATCHES:
        seeds = rng.choice(graph.num_nodes, batch, replace=False)
        edges = sum(layer.num_edges for layer in sampler.sample(seeds, rng).layers)
        points.append((float(edges), _median(lambda: sampler.sample(seeds, rng))))
    return points


def _gather_points() -> list[tuple[float, float]]:
    rng = np.random.default_rng(0)
    table = rng.standard_normal((GATHER_ROWS[-1], 64), dtype=np.float32)
    points = []
    for rows in GATHER_ROWS:
        index = rng.integers(0, table.shape[0], rows)
        points.append((float(rows * 64 * 4), _median(lambda: torch.from_numpy(table[index]))))
    return points


def _fit(points: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """``edge_s``, ``row_s`` and the worst relative error of ``seconds = edge_s * edges + row_s * rows``."""
    terms = np.array([p[:2] for p in points])
    seconds = np.array([p[2] for p in points])
    weights = 1 / seconds  # relative errors
    (edge, row), _ = nnls(terms * weights[:, None], seconds * weights)
    edge, row = max(edge, 1e-15), max(row, 1e-15)
    return float(edge), float(row), float(np.max(np.abs(terms @ [edge, row] - seconds) / seconds))


def _per_unit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Seconds per unit over ``(units, seconds)`` points (their total's ratio) and its worst relative error."""
    units, seconds = np.array(points).T
    rate = float(seconds.sum() / units.sum())
    return rate, float(np.max(np.abs(units * rate - seconds) / seconds))


def _median(run: Callable[[], object]) -> float:
    run()  # warm: allocations, first-call dispatch
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return float(np.median(times))
