"""``commgraph analyze``: outputs in the graph's original ids, the JSON report, weighted SNAP files,
a partition set run by two worker processes, and bad input refused in one line with nothing written."""

import json

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from commgraph.analytics import AnalyzeOptions, analyze
from commgraph.cli.main import main
from commgraph.graph import load_graph
from commgraph.partition import partition_graph, write_partition_set
from forked import run_commgraph

# sparse original ids 10..60; a weighted, directed chain 10 -> 20 -> 30 with a shortcut, and 50 -> 60 apart
WEIGHTED = "# a weighted edge list\n10 20 1.5\n20 30 0.25\n10 30 2.0\n50 60 1.0\n30 40 3\n"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def weighted(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text(WEIGHTED)
    return path


@pytest.mark.multiproc
def test_sssp_on_a_weighted_snap_file_in_original_ids(capsys, tmp_path, weighted):
    out = tmp_path / "d.csv"
    code, stdout, err = run(
        capsys, "analyze", str(weighted), "--directed", "--algo", "sssp", "--source", "10", "--out", str(out), "--json"
    )
    assert code == 0, err
    assert set(json.loads(stdout)) == {"algo", "iterations", "seconds", "bytes", "edges_per_second"}
    rows = out.read_text().splitlines()
    assert rows[0] == "node,value"
    assert dict(r.split(",") for r in rows[1:]) == {
        "10": "0.0",
        "20": "1.5",
        "30": "1.75",
        "40": "4.75",
        "50": "inf",
        "60": "inf",
    }


@pytest.mark.multiproc
def test_bfs_npy_levels_and_components_labelled_by_original_ids(capsys, tmp_path, weighted):
    levels = tmp_path / "l.npy"
    assert (
        run(capsys, "analyze", str(weighted), "--directed", "--algo", "bfs", "--source", "20", "--out", str(levels))[0]
        == 0
    )
    assert np.load(levels).tolist() == [-1, 0, 1, 2, -1, -1]
    labels = tmp_path / "c.csv"
    assert run(capsys, "analyze", str(weighted), "--directed", "--algo", "cc", "--out", str(labels))[0] == 0
    assert labels.read_text().splitlines()[1:] == ["10,10", "20,10", "30,10", "40,10", "50,50", "60,50"]


def test_weighted_snap_file_keeps_the_lightest_of_repeated_edges(tmp_path):
    path = tmp_path / "r.txt"
    path.write_text("0 1 5\n0 1 2\n1 2 1\n")
    graph = load_graph(path, directed=True)
    assert graph.edge_weights.tolist() == [2.0, 1.0]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--algo", "bfs", "--source", "99"], "source 99 is not a node"),
        (["--algo", "sssp", "--source", "-1"], "source -1 is not a node"),
        (["--algo", "bfs"], "needs --source"),
        (["--algo", "pagerank", "--damping", "1.5"], "--damping must be in [0, 1]"),
        (["--algo", "pagerank", "--tol", "0"], "--tol must be > 0"),
        (["--algo", "pagerank", "--max-iterations", "0"], "--max-iterations must be >= 1"),
    ],
)
@pytest.mark.multiproc
def test_bad_input_is_one_line_exit_2_and_no_output(capsys, tmp_path, weighted, argv, message):
    out = tmp_path / "x.npy"
    code, _, err = run(capsys, "analyze", str(weighted), *argv, "--out", str(out))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.multiproc
def test_negative_sssp_weights_are_refused(capsys, tmp_path):
    path = tmp_path / "neg.txt"
    path.write_text("0 1 1.0\n1 2 -0.5\n")
    out = tmp_path / "d.npy"
    code, _, err = run(capsys, "analyze", str(path), "--algo", "sssp", "--source", "0", "--out", str(out))
    assert code == 2 and "non-negative edge weights" in err and not out.exists()
    assert run(capsys, "analyze", str(path), "--algo", "bfs", "--source", "0")[0] == 0  # BFS ignores weights


@pytest.mark.multiproc
def test_bad_output_name_and_existing_file(capsys, tmp_path):
    code, _, err = run(capsys, "analyze", "cora", "--algo", "cc", "--out", str(tmp_path / "x.txt"))
    assert code == 2 and "--out must end in .npy or .csv" in err
    (tmp_path / "x.npy").write_bytes(b"keep")
    code, _, err = run(capsys, "analyze", "cora", "--algo", "cc", "--out", str(tmp_path / "x.npy"))
    assert code == 2 and "--force" in err and (tmp_path / "x.npy").read_bytes() == b"keep"


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_two_workers_on_a_partition_set(tmp_path):
    """The launcher path: two processes exchange through the plan; rank 0 writes what one process gets."""
    graph = load_graph("rmat:nodes=800,edges=4000,seed=5")
    assignment, _ = partition_graph(graph, 2, "g3", 0)
    write_partition_set(graph, assignment, 2, tmp_path / "parts", method="g3", seed=0, seconds=0, metrics={})
    out = tmp_path / "d.npy"
    proc = run_commgraph(
        [
            "analyze",
            str(tmp_path / "parts"),
            "--algo",
            "sssp",
            "--source",
            "3",
            "--weight-seed",
            "2",
            "--out",
            str(out),
            "--json",
            "--timeout",
            "30",
        ]
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["algo"] == "sssp" and report["bytes"] > 0 and report["edges_per_second"] > 0
    alone = analyze(graph, AnalyzeOptions("sssp", source=3, weight_seed=2)).values
    np.testing.assert_array_equal(np.load(out), alone)
    src, dst = graph.edge_list()
    from commgraph.analytics import seeded_weights

    matrix = csr_matrix((seeded_weights(src, dst, 2), (src, dst)), shape=(graph.num_nodes, graph.num_nodes))
    np.testing.assert_allclose(alone, dijkstra(matrix, indices=3), rtol=1e-12)


@pytest.mark.multiproc
def test_components_refuse_a_directed_partition_set(capsys, tmp_path):
    graph = load_graph("cora")
    from commgraph.graph.build import from_edges

    src, dst = graph.edge_list()
    keep = src < dst
    directed = from_edges(src[keep], dst[keep], graph.num_nodes, symmetrize=False)
    write_partition_set(
        directed, np.arange(graph.num_nodes) % 2, 2, tmp_path / "p", method="chunk", seed=0, seconds=0, metrics={}
    )
    code, _, err = run(capsys, "analyze", str(tmp_path / "p"), "--algo", "cc")
    assert code == 2 and "directed graph" in err


@pytest.mark.multiproc
def test_a_one_part_partition_set_runs_in_this_process(capsys, tmp_path, weighted):
    graph = load_graph(weighted, directed=True)
    write_partition_set(
        graph,
        np.zeros(graph.num_nodes, dtype=np.int64),
        1,
        tmp_path / "p1",
        method="chunk",
        seed=0,
        seconds=0,
        metrics={},
    )
    out = tmp_path / "d.npy"
    code, stdout, err = run(
        capsys, "analyze", str(tmp_path / "p1"), "--algo", "sssp", "--source", "0", "--out", str(out)
    )
    assert code == 0, err
    assert np.load(out).tolist() == [0.0, 1.5, 1.75, 4.75, np.inf, np.inf]  # the weights travel in the set
