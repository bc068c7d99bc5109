"""Graph analytics: exact against scipy.sparse.csgraph (BFS levels, SSSP, components) and networkx
(PageRank), on Cora, RMAT, SBM, a weighted directed graph and a graph with isolated nodes; 2 and 4
workers exchanging through the plan executor give the one-worker results; the CLI's outputs and
its refusals."""

import json
import os
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components, dijkstra, shortest_path

from commgraph.analytics import AnalyzeOptions, analyze, seeded_weights
from commgraph.analytics import program as engine
from commgraph.graph import Graph, load_graph
from commgraph.graph.build import from_edges
from commgraph.partition import partition_graph, write_partition_set
from forked import launch_forked

TESTS = Path(__file__).parent
ALGOS = ("bfs", "sssp", "pagerank", "cc")


def _directed() -> Graph:
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 600, 3000), rng.integers(0, 600, 3000)
    return from_edges(src, dst, 600, symmetrize=False, weights=rng.uniform(0.5, 5.0, 3000), name="directed")


def _isolated() -> Graph:
    rng = np.random.default_rng(4)
    src, dst = rng.integers(0, 400, 1200), rng.integers(0, 400, 1200)
    return from_edges(src, dst, 500, symmetrize=False, name="isolated")  # nodes 400..499 have no edge


GRAPHS = {
    "cora": lambda: load_graph("cora"),
    "rmat": lambda: load_graph("rmat:nodes=1500,edges=6000,seed=1"),
    "sbm": lambda: load_graph("sbm:nodes=1200,classes=4,features=4,seed=2"),
    "directed": _directed,
    "isolated": _isolated,
}


def _options(algo: str, graph: Graph) -> AnalyzeOptions:
    source = int(np.argmax(np.diff(graph.indptr)))  # a node with in-edges, in the largest part of the graph
    seed = 7 if algo == "sssp" and graph.edge_weights is None else None
    return AnalyzeOptions(algo, source=source if algo in ("bfs", "sssp") else None, weight_seed=seed)


def _adjacency(graph: Graph, weights: np.ndarray | None = None) -> csr_matrix:
    """``A[u, v]`` = the weight of edge u -> v."""
    src, dst = graph.edge_list()
    data = np.ones(graph.num_edges) if weights is None else weights
    return csr_matrix((data, (src, dst)), shape=(graph.num_nodes, graph.num_nodes))


def _reference(algo: str, graph: Graph, options: AnalyzeOptions) -> np.ndarray:
    if algo == "bfs":
        levels = shortest_path(_adjacency(graph), unweighted=True, indices=options.source)
        return np.where(np.isinf(levels), -1, levels).astype(np.int64)
    if algo == "sssp":
        src, dst = graph.edge_list()
        weights = graph.edge_weights if options.weight_seed is None else seeded_weights(src, dst, options.weight_seed)
        return dijkstra(_adjacency(graph, weights), indices=options.source)
    if algo == "cc":
        return connected_components(_adjacency(graph), directed=True, connection="weak")[1]
    nxg = nx.DiGraph()
    nxg.add_nodes_from(range(graph.num_nodes))
    nxg.add_edges_from(zip(*(a.tolist() for a in graph.edge_list())))
    ranks = nx.pagerank(nxg, alpha=options.damping, tol=options.tol, weight=None)
    return np.array([ranks[v] for v in range(graph.num_nodes)])


def _check(algo: str, ours: np.ndarray, reference: np.ndarray) -> None:
    if algo == "bfs":
        np.testing.assert_array_equal(ours, reference)
    elif algo == "sssp":
        np.testing.assert_allclose(ours, reference, rtol=1e-12)
        assert np.array_equal(np.isinf(ours), np.isinf(reference))
    elif algo == "cc":  # the same partition of the nodes, labels up to renaming
        pairs = np.unique(np.stack([ours, reference]), axis=1)
        assert pairs.shape[1] == np.unique(ours).size == np.unique(reference).size
    else:
        assert np.abs(ours - reference).sum() < 1e-6


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("algo", ALGOS)
def test_one_worker_matches_the_reference(name, algo):
    graph = GRAPHS[name]()
    options = _options(algo, graph)
    _check(algo, analyze(graph, options).values, _reference(algo, graph, options))


def test_bfs_parents_are_the_smallest_in_neighbour_one_level_up():
    graph = GRAPHS["directed"]()
    options = _options("bfs", graph)
    result = analyze(graph, options)
    level, parent = result.values, result.parents
    src, dst = graph.edge_list()
    below = (level[src] >= 0) & (level[dst] == level[src] + 1)
    expected = np.full(graph.num_nodes, np.iinfo(np.int64).max)
    np.minimum.at(expected, dst[below], src[below])
    reached = level > 0
    np.testing.assert_array_equal(parent[reached], expected[reached])
    assert (parent[level < 0] == -1).all() and parent[options.source] == options.source


@pytest.mark.parametrize("cost", [0.0, 1e9])
def test_push_only_and_pull_only_give_the_same_answers(monkeypatch, cost):
    """PULL_COST 0 always pulls; a huge one pushes whenever the frontier is not everything."""
    graph = GRAPHS["rmat"]()
    monkeypatch.setattr(engine, "PULL_COST", cost)
    for algo in ("bfs", "sssp", "cc"):
        options = _options(algo, graph)
        _check(algo, analyze(graph, options).values, _reference(algo, graph, options))


def test_pagerank_personalised_and_capped():
    graph = GRAPHS["isolated"]()
    weights = np.random.default_rng(0).uniform(0, 1, graph.num_nodes)
    result = analyze(graph, AnalyzeOptions("pagerank", damping=0.7, tol=1e-9), personalization=weights)
    nxg = nx.DiGraph()
    nxg.add_nodes_from(range(graph.num_nodes))
    nxg.add_edges_from(zip(*(a.tolist() for a in graph.edge_list())))
    ref = nx.pagerank(nxg, alpha=0.7, tol=1e-9, personalization=dict(enumerate(weights)))
    assert np.abs(result.values - [ref[v] for v in range(graph.num_nodes)]).sum() < 1e-6
    capped = analyze(graph, AnalyzeOptions("pagerank", max_iterations=3))
    assert capped.iterations == 3 and not capped.converged


# -- several workers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def worker_runs(tmp_path_factory):
    """One job per worker count (2 and 4) running every algorithm on every graph."""
    root = tmp_path_factory.mktemp("analytics")
    results = {}
    for workers in (2, 4):
        runs = []
        for name, make in GRAPHS.items():
            graph = make()
            for algo in ALGOS:
                target = graph if algo != "cc" else _symmetric(graph)
                partdir = root / f"{name}-{algo == 'cc'}-{workers}"
                if not partdir.exists():
                    assignment, _ = partition_graph(target, workers, "random", 0)
                    write_partition_set(
                        target, assignment, workers, partdir, method="random", seed=0, seconds=0, metrics={}
                    )
                options = _options(algo, graph).__dict__
                runs.append(
                    {
                        "name": f"{name}-{algo}",
                        "partdir": str(partdir),
                        "options": options,
                        "plan": "spst" if workers == 4 else "p2p",
                    }
                )
        out = root / f"out-{workers}"
        out.mkdir()
        spec = root / f"spec-{workers}.json"
        spec.write_text(json.dumps({"runs": runs, "out": str(out)}))
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
            assert launch_forked([str(spec)], workers, grace=30, module="analytics_driver", threads_per_worker=1) == 0
        results[workers] = out
    return results


def _symmetric(graph: Graph) -> Graph:
    from commgraph.analytics import symmetrized

    return symmetrized(graph)


@pytest.mark.multiproc
@pytest.mark.parametrize("workers", [2, 4])
@pytest.mark.parametrize("name", GRAPHS)
def test_workers_give_the_one_worker_results(worker_runs, workers, name):
    graph = GRAPHS[name]()
    for algo in ALGOS:
        options = _options(algo, graph)
        alone = analyze(graph, options)
        got = np.load(worker_runs[workers] / f"{name}-{algo}.npz")
        if algo == "cc":  # one worker's union-find is the answer; workers propagate labels across parts
            assert alone.iterations == 0 and alone.converged and int(got["iterations"]) >= 1
        else:
            assert int(got["iterations"]) == alone.iterations, algo
        if algo == "pagerank":  # sums over workers group the dangling mass differently: last bits only
            np.testing.assert_allclose(got["values"], alone.values, rtol=1e-12, atol=0)
        else:
            np.testing.assert_array_equal(got["values"], alone.values)
        if algo == "bfs":
            np.testing.assert_array_equal(got["parents"], alone.parents)
        assert int(got["bytes"]) > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_union_find_components_equal_scipy(seed):
    """Afforest on a symmetric graph (one giant component, small ones, isolated vertices), and plain
    union-find on a part's table (owned rows' in-edges from owned and halo rows), against scipy."""
    from commgraph.analytics import kernels

    rng = np.random.default_rng(seed)
    n = 3000
    src = np.concatenate([rng.integers(0, 1500, 6000), rng.integers(1500, n, 300)])
    dst = np.concatenate([rng.integers(0, 1500, 6000), rng.integers(1500, n, 300)])
    graph = from_edges(src, dst, n, symmetrize=True)
    roots, linked = kernels.components(graph.indptr, graph.indices, n, True)
    matrix = csr_matrix((np.ones(graph.indices.shape[0]), graph.indices, graph.indptr), shape=(n, n))
    count, expected = connected_components(matrix, directed=False)
    assert len(np.unique(roots)) == count and linked <= graph.indices.shape[0]
    assert all(len(np.unique(expected[roots == r])) == 1 for r in np.unique(roots))
    assert np.array_equal(roots, kernels.lowest_per_component(roots, np.arange(n)))  # roots are the smallest rows
    owned = 2000  # a part: rows 0..1999 owned, the rest halo rows without edge lists of their own
    indptr, indices = graph.indptr[: owned + 1], graph.indices[: graph.indptr[owned]]
    part = csr_matrix((np.ones(indices.shape[0]), indices, indptr), shape=(owned, n))
    square = csr_matrix(
        (part.data, part.indices, np.concatenate([part.indptr, np.full(n - owned, part.nnz)])), shape=(n, n)
    )
    count, expected = connected_components(square, directed=False)
    for symmetric in (True, False):  # Afforest (owned-to-owned edges listed both ways), plain union-find
        roots, _ = kernels.components(indptr, indices, n, symmetric)
        assert len(np.unique(roots)) == count
        assert all(len(np.unique(expected[roots == r])) == 1 for r in np.unique(roots))
