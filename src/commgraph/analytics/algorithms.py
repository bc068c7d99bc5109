"""BFS, SSSP, PageRank and connected components as vertex programs (:mod:`commgraph.analytics.program`).

Every program is exact and deterministic, so any number of workers gives the very same answer:
BFS parents are the smallest-id in-neighbour one level up, component labels the smallest id in the
component, SSSP distances the same float sums along the same shortest paths.
"""

from __future__ import annotations

import numpy as np

from commgraph.analytics import kernels
from commgraph.analytics.program import LocalGraph, VertexProgram
from commgraph.errors import AnalyticsError


class BFS(VertexProgram):
    """Breadth-first search from ``source`` (a global id) along edge directions.

    .. math::
        \\ell(s) = 0, \\qquad \\ell(v) = 1 + \\min_{u \\to v} \\ell(u), \\qquad
        \\mathrm{parent}(v) = \\min \\{u : u \\to v,\\ \\ell(u) = \\ell(v) - 1\\}

    Iteration ``i`` scatters the frontier (vertices at level ``i``) to the unreached vertices; a
    pull visits only unreached rows. Results: levels (-1 unreached) and parents (-1 unreached, the
    source its own parent).
    """

    def __init__(self, source: int):
        self.source = int(source)

    def init(self, graph: LocalGraph) -> tuple[np.ndarray, np.ndarray]:
        level = np.where(graph.ids == self.source, 0.0, np.inf)
        self.level = level[: graph.num_owned].copy()
        self.parent = np.where(self.level == 0, self.source, -1)
        return level, level == 0

    scatter = kernels.source_id

    def candidates(self) -> np.ndarray:
        return np.flatnonzero(np.isinf(self.level))

    def update(self, reduced, iteration, totals):
        reached = np.isinf(self.level) & (reduced < np.inf)
        self.level[reached] = iteration + 1
        self.parent[reached] = reduced[reached].astype(np.int64)
        return self.level, reached

    def result(self) -> np.ndarray:
        return np.where(np.isinf(self.level), -1, self.level).astype(np.int64)


class SSSP(VertexProgram):
    """Single-source shortest paths by frontier Bellman-Ford: each iteration relaxes the out-edges
    of the vertices whose distance fell in the previous one, until none falls.

    .. math::
        d(s) = 0, \\qquad d(v) \\leftarrow \\min\\big(d(v), \\min_{u \\to v,\\ u \\text{ changed}} d(u) + w_{uv}\\big)

    Weights must be non-negative (unweighted graphs use 1 per edge); unreached vertices are ``inf``.
    """

    def __init__(self, source: int):
        self.source = int(source)

    def init(self, graph: LocalGraph) -> tuple[np.ndarray, np.ndarray]:
        check_weights(graph.weights)
        dist = np.where(graph.ids == self.source, 0.0, np.inf)
        self.dist = dist[: graph.num_owned].copy()
        return dist, dist == 0

    scatter = kernels.path_length

    def update(self, reduced, iteration, totals):
        better = reduced < self.dist
        self.dist[better] = reduced[better]
        return self.dist, better

    def result(self) -> np.ndarray:
        return self.dist


class ConnectedComponents(VertexProgram):
    r"""Connected components, each labelled by its smallest global id. On a symmetric graph these are
    the (weak) components; :func:`commgraph.analytics.analyze` symmetrises a directed graph first.

    Each worker first finds the components of its own table (owned rows and halo rows, joined by
    its part's edges) by union-find (:func:`~commgraph.analytics.kernels.components`, Afforest)
    and labels every owned vertex with the smallest id of its local component. The
    owners' labels then reach the halo rows, and min-label propagation runs across parts only:

    .. math::
        \ell(v) \leftarrow \min_{w \in C(v)} \min\big(\ell(w), \min_{u \to w} \ell(u)\big)

    where :math:`C(v)` is ``v``'s local component, so a label crosses a whole part in one
    iteration. One worker (no halo) is done after the union-find.
    """

    exchange_init = True

    def init(self, graph: LocalGraph) -> tuple[np.ndarray, np.ndarray]:
        # a part of a symmetric graph (analyze symmetrises it): owned-to-owned edges are listed both ways
        roots, self.init_edges = kernels.components(graph.indptr, graph.indices, graph.num_rows, True)
        label = kernels.lowest_per_component(roots, graph.ids.astype(np.int64)).astype(np.float64)
        n = graph.num_owned
        self.settled = graph.num_rows == n
        self.roots = roots[:n]
        self.label = label[:n].copy()
        active = np.zeros(graph.num_rows, dtype=bool)
        active[n:] = True  # owned rows' labels are folded over their local components already
        return label, active

    def update(self, reduced, iteration, totals):
        lowest = np.full(self.label.shape[0], np.inf)
        np.minimum.at(lowest, self.roots, np.minimum(self.label, reduced))
        folded = lowest[self.roots]
        changed = folded < self.label
        self.label = folded
        return self.label, changed

    def result(self) -> np.ndarray:
        return self.label.astype(np.int64)


class PageRank(VertexProgram):
    """PageRank by power iteration with networkx's semantics (``nx.pagerank``, weights ignored):

    .. math::
        x' = \\alpha \\big(A^\\top D^{-1} x + p \\textstyle\\sum_{u \\text{ dangling}} x_u\\big) + (1 - \\alpha)\\, p

    from ``x = 1/N``, until :math:`\\lVert x' - x \\rVert_1 < N \\cdot \\mathrm{tol}`. ``p`` is the
    personalisation vector (uniform unless given, normalised to sum 1); dangling vertices (no
    out-edge) spread their mass by ``p``. The shared value of a vertex is its contribution
    :math:`x_u / \\deg^+(u)`, so a worker needs the whole-graph out-degree of its owned vertices
    only (``LocalGraph.out_degree``).

    Args:
        damping: :math:`\\alpha`, in [0, 1].
        tol: the tolerance, > 0.
        personalization: one non-negative weight per global vertex, with a positive sum.
    """

    reduce = kernels.add
    identity = 0.0
    dense = True

    def __init__(self, damping: float = 0.85, tol: float = 1e-6, personalization: np.ndarray | None = None):
        check_pagerank(damping, tol, personalization)
        self.damping, self.tol, self.personalization = damping, tol, personalization

    def init(self, graph: LocalGraph) -> tuple[np.ndarray, np.ndarray]:
        n, total = graph.num_owned, graph.num_nodes
        self.num_nodes = total
        self.degree = graph.out_degree.astype(np.float64)
        self.dangling = self.degree == 0
        if self.personalization is None:
            self.p = np.full(n, 1.0 / total)
        else:
            weights = np.asarray(self.personalization, dtype=np.float64)
            self.p = weights[graph.ids[:n]] / weights.sum()
        self.x = np.full(n, 1.0 / total)
        self.error = np.inf
        values = np.zeros(graph.num_rows)
        values[:n] = self._contribution()
        return values, np.ones(graph.num_rows, dtype=bool)

    def _contribution(self) -> np.ndarray:
        return np.divide(self.x, self.degree, out=np.zeros_like(self.x), where=~self.dangling)

    def totals(self) -> list[float]:
        return [float(self.x[self.dangling].sum()), float(self.error)]

    def update(self, reduced, iteration, totals):
        alpha = self.damping
        x = alpha * (reduced + totals[0] * self.p) + (1 - alpha) * self.p
        self.error = float(np.abs(x - self.x).sum())
        self.x = x
        return self._contribution(), np.ones(x.shape[0], dtype=bool)

    def converged(self, totals: list[float]) -> bool:
        return totals[1] < self.num_nodes * self.tol

    def result(self) -> np.ndarray:
        return self.x


def check_weights(weights: np.ndarray | None) -> None:
    if weights is not None and weights.size and weights.min() < 0:
        raise AnalyticsError(
            f"SSSP needs non-negative edge weights, but the graph has weight {weights.min():g}; "
            "shift or drop the negative edges"
        )


def check_pagerank(damping: float, tol: float, personalization: np.ndarray | None = None) -> None:
    if not 0 <= damping <= 1:
        raise AnalyticsError(f"--damping must be in [0, 1], got {damping}")
    if not tol > 0:
        raise AnalyticsError(f"--tol must be > 0, got {tol}")
    if personalization is not None:
        weights = np.asarray(personalization, dtype=np.float64)
        if weights.ndim != 1 or (weights.size and weights.min() < 0) or not weights.sum() > 0:
            raise AnalyticsError("personalization must be one non-negative weight per node, with a positive sum")
