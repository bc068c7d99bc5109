"""Running a vertex program: on one process over a whole :class:`~commgraph.graph.Graph`
(:func:`analyze`), or as one worker per part of a partition set (:func:`run_worker`), the parts'
boundary values moving through the job's all-gather plan and the runtime's executor
(:class:`PlanBoundary`: ``gather_halo`` owner -> halo, ``scatter_back`` halo -> owner).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from commgraph.analytics.algorithms import BFS, SSSP, ConnectedComponents, PageRank, check_pagerank, check_weights
from commgraph.analytics.program import (
    Alone,
    Boundary,
    LocalGraph,
    RunStats,
    VertexProgram,
    compile_hooks,
    run_program,
    whole_out_degree,
)
from commgraph.errors import AnalyticsError
from commgraph.graph import Graph
from commgraph.graph.build import from_edges
from commgraph.options import Options, option
from commgraph.partition import Part, PartitionSet

ALGORITHMS = ("bfs", "sssp", "pagerank", "cc")
WEIGHT_RANGE = (1.0, 100.0)  # seeded SSSP weights: uniform in [low, high)


@dataclass(frozen=True)
class AnalyzeOptions(Options):
    """One analytics request, validated once (``check``) against the graph's size. ``source`` is a
    global id (0..N-1) here; the command line's ``--source`` is an original id, turned into one."""

    error = AnalyticsError
    algo: str = option("the analysis to run", choices=ALGORITHMS)
    source: int | None = option("BFS and SSSP: the source node, an original id", type=int, default=None)
    damping: float = option("PageRank's damping", type=float, default=0.85)
    tol: float = option("PageRank stops when the L1 change is below N * tol", type=float, default=1e-6)
    max_iterations: int = option(
        "PageRank's iteration cap (the other programs run until nothing changes)", type=int, default=100
    )
    weight_seed: int | None = option(
        "SSSP: seeded weights in [1, 100) instead of the graph's own", type=int, metavar="S", default=None
    )

    def check(self, num_nodes: int | None) -> None:
        """Refuse bad options; with ``num_nodes``, a source outside the graph too."""
        if self.algo not in ALGORITHMS:
            raise AnalyticsError(f"unknown --algo {self.algo!r}; choose one of {', '.join(ALGORITHMS)}")
        if self.algo in ("bfs", "sssp"):
            if self.source is None:
                raise AnalyticsError(f"--algo {self.algo} needs --source")
            if num_nodes is not None and not 0 <= self.source < num_nodes:
                raise AnalyticsError(f"source {self.source} is not a node of the graph (0..{num_nodes - 1})")
        if self.algo == "pagerank":
            check_pagerank(self.damping, self.tol)
        if self.max_iterations < 1:
            raise AnalyticsError("--max-iterations must be >= 1")

    def program(self, personalization: np.ndarray | None = None) -> VertexProgram:
        if self.algo == "bfs":
            return BFS(self.source)
        if self.algo == "sssp":
            return SSSP(self.source)
        if self.algo == "pagerank":
            return PageRank(self.damping, self.tol, personalization)
        return ConnectedComponents()

    @property
    def iteration_cap(self) -> int:
        return self.max_iterations if self.algo == "pagerank" else np.iinfo(np.int64).max


@dataclass
class Analysis:
    """A finished run: per-vertex ``values`` (global id order) and the job's figures."""

    algo: str
    values: np.ndarray
    parents: np.ndarray | None  # BFS only
    iterations: int
    seconds: float
    bytes: int  # halo bytes sent by all workers together
    edges: int  # edges scanned by all workers together
    converged: bool
    exchanges: int = 0

    @property
    def edges_per_second(self) -> float:
        return self.edges / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict:
        return {
            "algo": self.algo,
            "iterations": self.iterations,
            "seconds": self.seconds,
            "bytes": self.bytes,
            "edges_per_second": self.edges_per_second,
        }


def seeded_weights(src: np.ndarray, dst: np.ndarray, seed: int) -> np.ndarray:
    """A weight per edge ``src -> dst`` (global ids) in ``WEIGHT_RANGE``, a hash of the pair and the
    seed (splitmix64), so every partitioning of the graph gets the same weights."""
    with np.errstate(over="ignore"):
        z = (src.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (dst.astype(np.uint64) + np.uint64(seed))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    low, high = WEIGHT_RANGE
    return low + (z >> np.uint64(11)).astype(np.float64) / float(1 << 53) * (high - low)


def symmetrized(graph: Graph) -> Graph:
    """The graph with every edge in both directions (its weak components are the components)."""
    src, dst = graph.edge_list()
    return from_edges(
        src, dst, graph.num_nodes, symmetrize=True, self_loops=True, node_ids=graph.node_ids, name=graph.name
    )


def local_graph(
    num_nodes: int,
    owned: np.ndarray,
    halo: np.ndarray,
    indptr: np.ndarray,
    indices: np.ndarray,
    weights: np.ndarray | None,
    options: AnalyzeOptions,
) -> LocalGraph:
    """A worker's :class:`LocalGraph` (edge weights seeded when ``options.weight_seed`` is set)."""
    ids = np.concatenate([np.asarray(owned, np.int64), np.asarray(halo, np.int64)])
    indptr, indices = np.asarray(indptr, np.int64), np.asarray(indices, np.int64)
    if options.algo != "sssp":
        weights = None
    elif options.weight_seed is not None:
        dst = np.repeat(ids[: owned.shape[0]], np.diff(indptr))
        weights = seeded_weights(ids[indices], dst, options.weight_seed)
    elif weights is not None:
        weights = np.asarray(weights, np.float64)
    return LocalGraph(
        num_nodes,
        ids,
        int(owned.shape[0]),
        read_only(indptr),
        read_only(indices),
        None if weights is None else read_only(weights),
    )


def read_only(array: np.ndarray) -> np.ndarray:
    """A read-only plain view: the edge loops are compiled for one array type, whether the edges
    come from a graph in memory or from a partition set's memory-mapped files."""
    view = np.asarray(array).view(np.ndarray)
    view.flags.writeable = False
    return view


def part_graph(part: Part, num_nodes: int, options: AnalyzeOptions) -> LocalGraph:
    return local_graph(num_nodes, part.owned, part.halo, part.indptr, part.indices, part.weights, options)


def execute(
    options: AnalyzeOptions, graph: LocalGraph, boundary: Boundary, personalization: np.ndarray | None = None
) -> tuple[VertexProgram, RunStats, float]:
    """Run one request on one worker: (the program, holding the owned vertices' results; its
    statistics; seconds from the first iteration's set-up, whole-graph out-degrees included, to the
    end; compiling the hooks and transposing the part's edges come before)."""
    program = options.program(personalization)
    compile_hooks(program, graph.weights is not None)
    if not program.dense:
        graph.out_edges()  # both directions of the edges are part of the graph, as in graph libraries
    started = time.perf_counter()
    if options.algo == "pagerank":
        graph.out_degree = whole_out_degree(graph, boundary)
    stats = run_program(program, graph, boundary, options.iteration_cap)
    return program, stats, time.perf_counter() - started


def analyze(graph: Graph, options: AnalyzeOptions, personalization: np.ndarray | None = None) -> Analysis:
    """``options.algo`` on the whole ``graph`` in this process (one worker).

    Shapes: ``values`` [N] (BFS levels, SSSP distances, PageRank scores, component labels);
    ``parents`` [N] for BFS.
    """
    options.check(graph.num_nodes)
    if options.algo == "cc":
        graph = symmetrized(graph)
    n = graph.num_nodes
    local = local_graph(
        n, np.arange(n), np.empty(0, np.int64), graph.indptr, graph.indices, graph.edge_weights, options
    )
    return _alone(options, local, personalization)


def analyze_part(part: Part, num_nodes: int, options: AnalyzeOptions) -> Analysis:
    """``options.algo`` on the only part of a one-part partition set, in this process."""
    options.check(num_nodes)
    return _alone(options, part_graph(part, num_nodes, options))


def _alone(options: AnalyzeOptions, local: LocalGraph, personalization: np.ndarray | None = None) -> Analysis:
    program, stats, seconds = execute(options, local, Alone(), personalization)
    return Analysis(
        options.algo,
        program.result(),
        getattr(program, "parent", None),
        stats.iterations,
        seconds,
        stats.bytes,
        stats.edges,
        stats.converged,
        stats.exchanges,
    )


def stats_dict(program: VertexProgram, stats: RunStats, seconds: float, owned: np.ndarray) -> dict:
    """What a worker reports to rank 0."""
    return {
        "owned": owned,
        "values": program.result(),
        "parents": getattr(program, "parent", None),
        "seconds": seconds,
        **asdict(stats),
    }


def combine(algo: str, num_nodes: int, reports: list[dict]) -> Analysis:
    """Rank 0 puts the workers' reports together in global id order."""
    first = reports[0]
    values = np.empty(num_nodes, dtype=first["values"].dtype)
    parents = None if first["parents"] is None else np.empty(num_nodes, dtype=np.int64)
    for report in reports:
        values[report["owned"]] = report["values"]
        if parents is not None:
            parents[report["owned"]] = report["parents"]
    return Analysis(
        algo,
        values,
        parents,
        first["iterations"],
        max(r["seconds"] for r in reports),
        sum(r["bytes"] for r in reports),
        sum(r["edges"] for r in reports),
        first["converged"],
        first["exchanges"],
    )


def options_for_graph(options: AnalyzeOptions, graph: Graph) -> AnalyzeOptions:
    """``options`` checked against ``graph``, with ``source`` (an original id, as the command line
    gives it) turned into the node's index."""
    source = options.source
    if source is not None and graph.node_ids is not None:
        ids = graph.node_ids
        at = int(np.searchsorted(ids, source))
        if at >= graph.num_nodes or ids[at] != source:
            raise AnalyticsError(
                f"source {source} is not a node of the graph (its ids run {ids[0]}..{ids[-1]} with gaps)"
            )
        source = at
    options = replace(options, source=source)
    options.check(graph.num_nodes)
    if options.algo == "sssp" and options.weight_seed is None:
        check_weights(graph.edge_weights)
    return options


def check_partition_set(options: AnalyzeOptions, pset: PartitionSet) -> None:
    """Refuse what ``options`` cannot run on ``pset``: a source outside it, negative SSSP weights,
    or connected components on a directed graph."""
    options.check(int(pset.manifest["graph"]["num_nodes"]))
    if options.algo == "sssp" and options.weight_seed is None:
        for k in range(pset.num_parts):
            weights = pset.part(k).weights
            check_weights(None if weights is None else np.asarray(weights))
    if options.algo == "cc":
        _check_symmetric(pset)


def _check_symmetric(pset: PartitionSet) -> None:
    from scipy.sparse import csr_matrix

    indptr, indices = pset.in_edges()
    n = indptr.shape[0] - 1
    matrix = csr_matrix((np.ones(indices.shape[0], dtype=np.int8), indices, indptr), shape=(n, n))
    if (matrix != matrix.T).nnz:
        raise AnalyticsError(
            f"{pset.path} holds a directed graph; connected components need both directions: pass "
            "the GRAPH itself (analyze symmetrises it) or partition a symmetrised graph"
        )
