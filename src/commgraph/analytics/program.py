"""Vertex programs in ChattyGraph's shape (Jiang et al., "ChattyGraph: Highly Scalable Graph Computing
System for Heterogeneous Multi Accelerators", Journal of Software 2023), vectorised per worker.

ChattyGraph's four user hooks become the methods of a :class:`VertexProgram`, each called once per
iteration on whole arrays (never once per vertex):

- ``InitVertex`` -> :meth:`VertexProgram.init`: the shared value of every row of the worker's table
  (its owned vertices, then its halo) and which of them start active;
- ``ComputeScatter(vertex, edge, shared_vertex)`` -> :attr:`VertexProgram.scatter`: a numba function
  ``(value, weight, source) -> message`` giving what each edge ``u -> v`` with an active source
  carries, from ``u``'s shared value, the edge's weight (1 on unweighted graphs) and ``u``'s global id;
- ``ComputeReduce(shared_vertex, nbr_shared_vertex)`` -> :attr:`VertexProgram.reduce`: a numba
  function ``(a, b) -> folded`` (``kernels.minimum``, ``kernels.add``) with its ``identity``;
- ``UpdateStatus(computed_vertex, previous_vertex)`` -> :meth:`VertexProgram.update`: the new state
  of the owned vertices from the folded messages; it returns which of them changed, and those are
  the next iteration's active vertices.

The engine's loops over edges are compiled (:mod:`commgraph.analytics.kernels`) with the two edge
hooks inlined; ``init`` and ``update`` work on whole arrays with numpy.

One iteration on a worker (:func:`run_program`):

.. math::
    m_v = \\bigoplus_{u \\to v,\\ u \\text{ active}} \\mathrm{scatter}(x_u, w_{uv}, u), \\qquad
    (x_v', \\mathrm{changed}_v) = \\mathrm{update}(m_v, x_v)

over the worker's in-edges (rows are owned vertices, sources are owned or halo rows). The engine
picks the direction per iteration: *push* walks the out-edges of the active rows (a sparse
frontier), *pull* the in-edges of every row that may still change (a dense one), whichever scans
fewer edges (Beamer's direction-optimising BFS rule, with the pull side weighted by ``PULL_COST``).
Both give the same result: a reduction is order-free and every program's messages are exact.

Between iterations the owners' new shared values reach the workers whose halo holds them, through the
job's all-gather plan and the runtime's executor (:class:`Boundary`). The plan moves a fixed set of
rows, so what is "only the values that changed" here is: an iteration in which no worker changed a
boundary row exchanges nothing at all (every worker learns that from the iteration's one small
all-reduce), and a receiver tells which of its halo rows changed by comparing them with the copy it
held, so only those become active sources.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from commgraph.analytics import kernels

PULL_COST = 4.0  # a pull scans every in-edge of a candidate row; push only the active rows' out-edges


@dataclass
class LocalGraph:
    """One worker's share of a graph: its owned vertices' in-edges in CSR form (rows are owned
    vertices, columns are table rows: owned ``0..num_owned-1``, then halo), the global id of every
    table row, and the same edges transposed for pushing (rows are table rows).

    Shapes: ``indptr`` [num_owned + 1], ``indices`` and ``weights`` [E], ``ids`` [num_owned + num_halo].
    """

    num_nodes: int  # in the whole graph
    ids: np.ndarray
    num_owned: int
    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray | None = None
    out_degree: np.ndarray | None = None  # whole-graph out-degree of each owned vertex (set by the engine)
    _out: tuple | None = field(default=None, repr=False)

    @property
    def num_rows(self) -> int:
        return int(self.ids.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    @property
    def in_degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    def local_out_degree(self) -> np.ndarray:
        """Out-edges of every table row that end at an owned vertex."""
        return np.bincount(self.indices, minlength=self.num_rows)

    def out_edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(outptr [num_rows + 1], outdst [E], outweights [E] or empty): row ``u``'s out-edges end
        at owned rows ``outdst[outptr[u]:outptr[u + 1]]`` (made on first use)."""
        if self._out is None:
            weights = _NO_WEIGHTS if self.weights is None else self.weights
            self._out = kernels.transpose(self.indptr, self.indices, weights, self.num_rows)
        return self._out


class VertexProgram:
    """A vertex program; see the module's description of the four hooks. One instance per worker,
    holding that worker's per-vertex state."""

    scatter = kernels.value  # ComputeScatter
    reduce = kernels.minimum  # ComputeReduce
    identity: float = np.inf  # what a vertex that no message reaches gets
    dense: bool = False  # every vertex active every iteration (exchange every iteration too)
    exchange_init: bool = False  # the halo rows start from their owners' initial values
    settled: bool = False  # set by init: its values are already the answer (every worker's must be)
    init_edges: int = 0  # set by init: the edges it scanned

    def init(self, graph: LocalGraph) -> tuple[np.ndarray, np.ndarray]:  # InitVertex
        """Shared values (float64) and active flags of every table row, from the rows' global ids."""
        raise NotImplementedError

    def update(self, reduced: np.ndarray, iteration: int, totals: list[float]) -> tuple[np.ndarray, np.ndarray]:
        """UpdateStatus: given each owned vertex's folded messages (``identity`` where none came)
        and the last whole-job ``totals``, update the state; returns (new shared values of the owned
        vertices, which of them changed)."""
        raise NotImplementedError

    def candidates(self) -> np.ndarray | None:
        """Owned rows a pull needs to visit (None: every row); BFS visits the unreached ones only."""
        return None

    def totals(self) -> list[float]:
        """Per-worker numbers summed over the job after every update (PageRank's dangling mass and
        error); the sums reach the next ``update`` and ``converged``."""
        return []

    def converged(self, totals: list[float]) -> bool:
        """Stop although vertices changed (PageRank's tolerance); sparse programs stop when none did."""
        return False

    def result(self) -> np.ndarray:
        """The per-vertex answer of the owned vertices."""
        raise NotImplementedError


class Boundary(Protocol):
    """How a worker's table meets the other workers': the executor of the job's all-gather plan
    (:class:`commgraph.analytics.job.PlanBoundary`) or nothing at all (:class:`Alone`)."""

    boundary_rows: np.ndarray  # owned rows some other worker reads

    def exchange(self, owned: np.ndarray) -> np.ndarray:
        """The halo rows' values, filled from their owners' ``owned``."""

    def return_sum(self, halo: np.ndarray) -> np.ndarray:
        """Per owned row, the sum of what every worker holding it as halo gives (``halo``)."""

    def global_sum(self, values: list[float]) -> list[float]:
        """Each value summed over the workers."""

    def sent_bytes(self) -> int:
        """Bytes this worker has sent so far."""


class Alone:
    """A single worker: the whole graph, no halo, nothing to exchange."""

    boundary_rows = np.empty(0, dtype=np.int64)

    def exchange(self, owned: np.ndarray) -> np.ndarray:
        return owned[:0]

    def return_sum(self, halo: np.ndarray) -> float:
        return 0.0

    def global_sum(self, values: list[float]) -> list[float]:
        return list(values)

    def sent_bytes(self) -> int:
        return 0


@dataclass
class RunStats:
    """What one worker saw of a run; ``edges`` and ``bytes`` are its own, the rest the job's."""

    iterations: int
    edges: int  # edges scanned by this worker's scatters
    bytes: int  # bytes this worker sent
    exchanges: int  # iterations that exchanged the boundary (the others changed no boundary row)
    pushes: int  # iterations this worker ran as push (the others as pull)
    converged: bool


def whole_out_degree(graph: LocalGraph, boundary: Boundary) -> np.ndarray:
    """Out-degree of each owned vertex in the whole graph: its out-edges in this part, plus those in
    the parts that hold it as halo (sent back through the plan's reverse direction)."""
    local = graph.local_out_degree().astype(np.float64)
    return np.rint(local[: graph.num_owned] + boundary.return_sum(local[graph.num_owned :])).astype(np.int64)


def run_program(program: VertexProgram, graph: LocalGraph, boundary: Boundary, max_iterations: int) -> RunStats:
    """Run ``program`` on this worker's ``graph`` until no vertex changes anywhere, the program says
    it converged, or ``max_iterations`` iterations ran. Every worker of a job runs this together."""
    values, active = program.init(graph)
    values = np.array(values, dtype=np.float64)
    n = graph.num_owned
    if program.dense or program.exchange_init:  # halo values that only their owners can compute
        values[n:] = boundary.exchange(values[:n])
    first = boundary.global_sum([float(program.settled), 1.0, *program.totals()])
    converged = first[0] == first[1]  # every worker's init gave the answer
    totals = first[2:]
    edges, exchanges, pushes = program.init_edges, 0, 0
    iteration = 0
    while not converged and iteration < max_iterations:
        reduced, scanned, pushed = _gather(program, graph, values, active)
        edges += scanned
        pushes += pushed
        shared, changed = program.update(reduced, iteration, totals)
        values[:n] = shared
        iteration += 1
        counts = boundary.global_sum(
            [float(changed.sum()), float(changed[boundary.boundary_rows].sum()), *program.totals()]
        )
        totals = counts[2:]
        if program.converged(totals) or counts[0] == 0:
            converged = True
            break
        active = (
            np.ones(graph.num_rows, dtype=bool)
            if program.dense
            else np.concatenate([changed, np.zeros(graph.num_rows - n, dtype=bool)])
        )
        if counts[1] > 0:  # the same on every worker: they all exchange, or none does
            halo = boundary.exchange(values[:n])
            if not program.dense:
                active[n:] = halo != values[n:]
            values[n:] = halo
            exchanges += 1
    return RunStats(iteration, edges, boundary.sent_bytes(), exchanges, pushes, converged)


def _gather(
    program: VertexProgram, graph: LocalGraph, values: np.ndarray, active: np.ndarray
) -> tuple[np.ndarray, int, int]:
    """Each owned vertex's folded messages from its active in-neighbours; the edges scanned; and
    whether it was done by pushing (1) or pulling (0)."""
    reduced = np.full(graph.num_owned, program.identity)
    weights = _NO_WEIGHTS if graph.weights is None else graph.weights
    rows = None if program.dense else program.candidates()
    if not program.dense:
        sources = np.flatnonzero(active)
        outptr, outdst, outweights = graph.out_edges()
        pull_edges = graph.num_edges if rows is None else int(graph.in_degree[rows].sum())
        if kernels.frontier_edges(outptr, sources) * PULL_COST < pull_edges:
            scanned = kernels.push(
                outptr, outdst, outweights, values, graph.ids, sources, program.scatter, program.reduce, reduced
            )
            return reduced, int(scanned), 1
    every = rows is None
    scanned = kernels.pull(
        graph.indptr,
        graph.indices,
        weights,
        values,
        graph.ids,
        active,
        _NO_ROWS if every else rows,
        every,
        program.scatter,
        program.reduce,
        program.identity,
        reduced,
    )
    return reduced, int(scanned), 0


def compile_hooks(program: VertexProgram, weighted: bool) -> None:
    """Compile the edge loops for ``program``'s hooks now (numba compiles on first call), so that a
    run's time is the run's."""
    indptr, indices, weights = np.array([0, 0, 1]), np.array([0]), np.ones(1) if weighted else _NO_WEIGHTS
    for array in (indptr, indices, weights):
        array.flags.writeable = False  # as a worker's edges are (see ``job.read_only``)
    tiny = LocalGraph(2, np.arange(2), 2, indptr, indices, weights if weighted else None)
    outptr, outdst, outweights = tiny.out_edges()
    values, active, out = np.zeros(2), np.ones(2, dtype=bool), np.zeros(2)
    kernels.pull(
        tiny.indptr,
        tiny.indices,
        weights,
        values,
        tiny.ids,
        active,
        _NO_ROWS,
        True,
        program.scatter,
        program.reduce,
        program.identity,
        out,
    )
    kernels.pull(
        tiny.indptr,
        tiny.indices,
        weights,
        values,
        tiny.ids,
        active,
        np.arange(2),
        False,
        program.scatter,
        program.reduce,
        program.identity,
        out,
    )
    kernels.push(outptr, outdst, outweights, values, tiny.ids, np.arange(2), program.scatter, program.reduce, out)
    kernels.frontier_edges(outptr, np.arange(2))


_NO_WEIGHTS = np.empty(0, dtype=np.float64)
_NO_WEIGHTS.flags.writeable = False  # as every worker's edge weights are
_NO_ROWS = np.empty(0, dtype=np.int64)
