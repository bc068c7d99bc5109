import numpy as np
import pytest

from commgraph.errors import GraphFormatError, GraphValidationError
from commgraph.graph import from_pyg, load_graph, load_npz, save_npz, sbm, to_pyg


@pytest.fixture
def graph():
    return sbm(nodes=300, classes=3, features=8, seed=1)


def test_npz_round_trip_is_exact(tmp_path, graph):
    graph.node_ids = np.arange(graph.num_nodes, dtype=np.int64) * 3 + 7
    save_npz(graph, tmp_path / "g.npz")
    back = load_graph(tmp_path / "g.npz")
    assert back.equals(graph)
    assert back.features.dtype == np.float32 and back.labels.dtype == np.int64


def test_npz_write_is_atomic(tmp_path, graph, monkeypatch):
    target = tmp_path / "g.npz"
    save_npz(graph, target)
    before = target.read_bytes()

    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(np, "savez_compressed", explode)
    with pytest.raises(RuntimeError):
        save_npz(graph, target)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["g.npz"]


def test_bad_npz_files(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(GraphFormatError, match="not a readable .npz"):
        load_npz(tmp_path / "junk.npz")
    np.savez(tmp_path / "other.npz", a=np.arange(3))
    with pytest.raises(GraphFormatError, match="not a commgraph graph"):
        load_npz(tmp_path / "other.npz")
    np.savez(tmp_path / "future.npz", commgraph_format=np.array(99), indptr=[0], indices=[])
    with pytest.raises(GraphFormatError, match="format 99"):
        load_npz(tmp_path / "future.npz")
    np.savez(tmp_path / "broken.npz", commgraph_format=np.array(1), indptr=[0, 1], indices=[5])
    with pytest.raises(GraphFormatError, match="out of range"):
        load_npz(tmp_path / "broken.npz")
    np.savez(tmp_path / "objects.npz", commgraph_format=np.array(1), indptr=np.array([None]), indices=[])
    with pytest.raises(GraphFormatError, match="not a readable"):
        load_npz(tmp_path / "objects.npz")


def test_pyg_round_trip_both_ways(graph):
    data = to_pyg(graph)
    assert data.num_nodes == graph.num_nodes and data.edge_index.shape == (2, graph.num_edges)
    assert data.x.shape == (graph.num_nodes, 8) and data.train_mask.dtype.is_floating_point is False
    assert from_pyg(data).equals(graph)
    again = to_pyg(from_pyg(data))
    for key in ("edge_index", "x", "y", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(again, key).numpy(), getattr(data, key).numpy())


def test_from_pyg_directed_and_errors():
    import torch
    from torch_geometric.data import Data

    data = Data(edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=4)
    directed = from_pyg(data, symmetrize=False)
    assert directed.num_edges == 2 and directed.num_nodes == 4
    assert from_pyg(data).num_edges == 4
    with pytest.raises(GraphValidationError, match="only 1-D class labels"):
        from_pyg(Data(edge_index=torch.tensor([[0], [1]]), y=torch.zeros(2, 3), num_nodes=2))
