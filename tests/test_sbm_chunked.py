"""``sbm:...,chunked=1`` (``commgraph.graph.sbm_chunked``): the block model written a chunk at a
time. It cannot equal the in-memory ``sbm`` for a seed (that one draws each array whole from one
generator and permutes its labels), so these tests check what it guarantees: the model's law
beside the in-memory graph's, a graph independent of the external sort's bucket size, the same
bytes for a seed, and a writer whose memory does not grow with the node count."""

from __future__ import annotations

import numpy as np
import pytest

from commgraph.errors import GraphSpecError
from commgraph.graph import load_graph, sbm, sbm_chunked
from commgraph.graph.npz import load_npz
from writer_peak import writer_peak


def _edges(graph):
    degree = np.diff(np.asarray(graph.indptr))
    return np.repeat(np.arange(graph.num_nodes), degree), np.asarray(graph.indices), degree


def test_the_chunked_graph_has_the_in_memory_models_law(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path))
    chunked = load_graph("sbm:nodes=60000,classes=7,features=8,seed=1,chunked=1")
    plain = sbm(60000, 7, 8, seed=1)
    assert chunked.name == "sbm-60000-c7-f8-s1-chunked" and chunked.num_nodes == plain.num_nodes
    rows, cols, degree = _edges(chunked)
    assert np.array_equal(np.sort(rows * 60000 + cols), np.sort(cols * 60000 + rows))  # symmetric
    assert not np.any(rows == cols)
    assert all(np.all(np.diff(cols[a:b]) > 0) for a, b in zip(chunked.indptr[:500], chunked.indptr[1:501]))
    labels = np.asarray(chunked.labels)
    assert np.ptp(np.bincount(labels)) <= 1  # equal blocks
    plain_rows, plain_cols, plain_degree = _edges(plain)
    plain_labels = np.asarray(plain.labels)
    assert abs(degree.mean() - plain_degree.mean()) < 0.02 * plain_degree.mean()
    homophily = (labels[rows] == labels[cols]).mean()
    assert abs(homophily - (plain_labels[plain_rows] == plain_labels[plain_cols]).mean()) < 0.01
    for mine, theirs in zip((chunked.train_mask, chunked.val_mask), (plain.train_mask, plain.val_mask)):
        assert abs(np.mean(mine) - np.mean(theirs)) < 0.01
    assert not np.any(np.asarray(chunked.train_mask) & np.asarray(chunked.test_mask))
    centroid_gap = [np.asarray(chunked.features)[labels == c].mean(0) for c in range(2)]
    assert np.linalg.norm(centroid_gap[0] - centroid_gap[1]) > 0.5  # features carry the class


def test_the_graph_does_not_depend_on_the_bucket_size_and_a_seed_gives_the_same_bytes(tmp_path, monkeypatch):
    sbm_chunked.write_sbm_chunked(tmp_path / "a.npz", 70000, 5, 4, seed=2)
    sbm_chunked.write_sbm_chunked(tmp_path / "b.npz", 70000, 5, 4, seed=2)
    monkeypatch.setattr(sbm_chunked, "BUCKET_NODES", 5000)
    sbm_chunked.write_sbm_chunked(tmp_path / "c.npz", 70000, 5, 4, seed=2)
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes() == (tmp_path / "c.npz").read_bytes()
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no bucket or temporary left
    sbm_chunked.write_sbm_chunked(tmp_path / "d.npz", 70000, 5, 4, seed=3)
    first = [np.asarray(load_npz(tmp_path / name).indices[:100]) for name in ("a.npz", "d.npz")]
    assert not np.array_equal(*first)


def test_a_node_count_beyond_the_label_bijection_is_refused(tmp_path):
    with pytest.raises(GraphSpecError, match="nodes x nodes"):
        sbm_chunked.write_sbm_chunked(tmp_path / "x.npz", 4_000_000_000, 2, 1)
    assert not list(tmp_path.iterdir())


@pytest.mark.multiproc
@pytest.mark.slow
def test_the_writers_memory_is_a_buckets_whatever_the_node_count(tmp_path):
    def peak(nodes: int) -> dict:
        return writer_peak(
            "commgraph.graph.sbm_chunked", "write_sbm_chunked", tmp_path / f"{nodes}.npz", nodes, ", 10, 16"
        )

    small, large = peak(131072), peak(524288)  # two buckets, then eight
    assert large["file"] > 3.5 * small["file"]
    assert large["peak_added"] < small["peak_added"] + 16e6  # one chunk's and one bucket's arrays, not the graph's
