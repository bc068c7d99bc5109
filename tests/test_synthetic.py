import numpy as np
import pytest

from commgraph.errors import GraphSpecError
from commgraph.graph import load_graph, rmat, sbm, synthetic


def test_rmat_is_deterministic_with_exact_edge_count():
    a = rmat(nodes=1000, edges=5000, seed=4)
    b = load_graph("rmat:nodes=1000,edges=5000,seed=4")
    assert a.equals(b)
    assert a.num_nodes == 1000 and a.num_edges == 10000 and a.stats()["self_loops"] == 0
    assert not a.equals(rmat(nodes=1000, edges=5000, seed=5))


def test_rmat_is_power_law_skewed():
    g = rmat(nodes=4096, edges=40000, seed=0)
    deg = g.in_degrees()
    assert deg.max() > 20 * np.median(deg[deg > 0])  # hubs, unlike a uniform random graph


def test_rmat_optional_features_and_labels():
    g = load_graph("rmat:nodes=500,edges=2000,features=4,classes=3,seed=1")
    assert g.features.shape == (500, 4) and g.num_classes == 3
    assert g.train_mask.sum() == 50


def test_gaussian_features_do_not_depend_on_the_number_of_threads(monkeypatch):
    monkeypatch.setattr(synthetic, "_BLOCK_ROWS", 64)  # 16 blocks, the last one short
    tables = []
    for cores in (1, 3, 8):
        monkeypatch.setattr(synthetic.os, "sched_getaffinity", lambda pid, cores=cores: set(range(cores)))
        tables.append(synthetic.gaussian_table(7, 1000, 33))
    assert all(np.array_equal(t, tables[0]) for t in tables)
    table = tables[0]
    assert table.dtype == np.float32 and abs(table.mean()) < 0.02 and abs(table.std() - 1) < 0.02
    assert not np.array_equal(table[:64], table[64:128])  # blocks draw different numbers
    assert not np.array_equal(table, synthetic.gaussian_table(8, 1000, 33))


def test_sbm_labels_are_learnable_from_neighbourhoods():
    g = sbm(nodes=3000, classes=4, features=16, seed=0)
    assert g.num_classes == 4 and g.features.shape == (3000, 16)
    assert abs(g.num_edges / g.num_nodes - 10) < 0.5
    src, dst = g.edge_list()
    assert 0.75 < np.mean(g.labels[src] == g.labels[dst]) < 0.85  # homophily 0.8

    def nearest_centroid_accuracy(x):
        train = g.train_mask
        cents = np.stack([x[train & (g.labels == c)].mean(0) for c in range(4)])
        pred = np.argmin(((x[:, None, :] - cents[None]) ** 2).sum(-1), axis=1)
        return np.mean(pred[g.test_mask] == g.labels[g.test_mask])

    aggregated = np.zeros_like(g.features)
    np.add.at(aggregated, dst, g.features[src])
    aggregated /= np.maximum(g.in_degrees(), 1)[:, None]
    alone, with_graph = nearest_centroid_accuracy(g.features), nearest_centroid_accuracy(aggregated)
    assert alone > 0.4 and with_graph > alone + 0.15


@pytest.mark.parametrize(
    "spec, message",
    [
        ("rmat:nodes=10", "missing edges"),
        ("rmat:nodes=10,edges=100", "at most 45 edges"),
        ("rmat:nodes=10,edges=5,colour=3", "bad rmat parameter 'colour=3'"),
        ("rmat:nodes=ten,edges=5", "must be a number"),
        ("rmat:nodes=10.5,edges=5", "must be an integer"),
        ("rmat:nodes=0,edges=5", "nodes must be >= 1"),
        ("sbm:nodes=3,classes=5,features=2", "at least one node per class"),
        ("sbm:nodes=30,classes=3,features=2,homophily=2", "homophily"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(GraphSpecError, match=message):
        load_graph(spec)


def test_names_tell_different_graphs_apart():
    assert rmat(1000, 5000).name == "rmat-1000-5000-s0"
    assert load_graph("rmat:nodes=1000,edges=5000,a=0.5,b=0.1,c=0.1").name == "rmat-1000-5000-s0-a0.5-b0.1-c0.1"
    assert rmat(1000, 5000, features=8, classes=3).name == "rmat-1000-5000-s0-features8-classes3"
    assert sbm(1000, 4, 8).name == "sbm-1000-c4-f8-s0"
    assert sbm(1000, 4, 8, homophily=0.9, degree=5).name == "sbm-1000-c4-f8-s0-degree5-homophily0.9"
