"""``papers-shaped``: papers100M's shape written straight to a graph file a chunk of nodes at a time:
its degrees, no self loop or repeated edge, fp16 features, the same bytes for the same seed, and a
writer whose memory does not grow with the graph."""

from __future__ import annotations

import numpy as np
import pytest

from commgraph.errors import GraphSpecError
from commgraph.graph import load_graph, papers
from commgraph.graph.npz import load_npz
from writer_peak import writer_peak


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    path = tmp_path_factory.mktemp("papers") / "p.npz"
    papers.write_papers_shaped(path, 70000, seed=3, train=0.2, val=0.1, test=0.1)  # three chunks, the last short
    return path


def test_the_graph_has_papers100ms_shape(written):
    graph = load_npz(written)
    degree = np.diff(graph.indptr)
    assert graph.num_nodes == 70000 and 12 < degree.mean() < 17 and degree.max() > 50 * degree.mean()
    rows = np.repeat(np.arange(graph.num_nodes), degree)
    assert not np.any(graph.indices == rows)  # no self loop
    same_row = rows[1:] == rows[:-1]
    assert np.all(np.diff(graph.indices.astype(np.int64))[same_row] > 0)  # sorted, each edge once
    assert not graph.indices.flags.owndata and not graph.features.flags.owndata  # views of the file maps, not copies
    assert graph.features.shape == (70000, papers.WIDTH)
    assert np.array_equal(graph.features[:500], graph.features[:500].astype(np.float16))  # fp16 values
    assert graph.labels.max() < papers.CLASSES
    masks = np.stack([graph.train_mask, graph.val_mask, graph.test_mask])
    assert masks.sum(0).max() == 1 and abs(graph.train_mask.mean() - 0.2) < 0.01


def test_the_same_seed_writes_the_same_bytes_and_the_spec_is_cached(written, tmp_path, monkeypatch):
    again = tmp_path / "again.npz"
    papers.write_papers_shaped(again, 70000, seed=3, train=0.2, val=0.1, test=0.1)
    assert again.read_bytes() == written.read_bytes()
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    graph = load_graph("papers-shaped:nodes=2000,seed=1")
    (cached,) = (tmp_path / "home" / "datasets" / "papers-shaped").glob("*.npz")
    stamp = cached.stat().st_mtime_ns
    assert load_graph("papers-shaped:nodes=2000,seed=1").checksum() == graph.checksum()
    assert cached.stat().st_mtime_ns == stamp  # read, not written again


@pytest.mark.parametrize(
    "spec, message",
    [
        ("papers-shaped:nodes=1", "at least 2 nodes"),
        ("papers-shaped:nodes=100,train=0.9,val=0.2", "summing to at most 1"),
        ("papers-shaped:seed=1", "missing nodes"),
    ],
)
def test_bad_specs_are_refused(spec, message, tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path))
    with pytest.raises(GraphSpecError, match=message):
        load_graph(spec)


@pytest.mark.multiproc
@pytest.mark.slow
def test_the_writers_memory_is_a_chunks_whatever_the_node_count(tmp_path):
    def peak(nodes: int) -> dict:
        return writer_peak("commgraph.graph.papers", "write_papers_shaped", tmp_path / f"{nodes}.npz", nodes)

    small, large = peak(100000), peak(400000)
    assert large["file"] > 3.5 * small["file"]
    assert large["peak_added"] < small["peak_added"] + 16e6  # one chunk's arrays, not the graph's
    assert large["peak_added"] < 0.5 * large["file"]
