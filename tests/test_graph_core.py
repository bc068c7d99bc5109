import numpy as np
import pytest

from commgraph.errors import GraphValidationError
from commgraph.graph import Graph, from_edges, split_masks


def test_from_edges_symmetrises_dedups_and_drops_self_loops():
    g = from_edges([0, 0, 1, 2, 2], [1, 1, 2, 2, 0], 4)
    src, dst = g.edge_list()
    assert sorted(zip(src.tolist(), dst.tolist())) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    assert g.num_nodes == 4 and g.num_edges == 6
    assert g.in_degrees().tolist() == [2, 2, 2, 0]
    assert g.indptr.dtype == np.int64 and g.indices.dtype == np.int64


def test_rows_are_destinations_and_directed_input_is_kept_when_asked():
    g = from_edges([0, 0, 3], [1, 2, 1], symmetrize=False)
    assert g.num_nodes == 4
    # row 1 lists the sources of edges into node 1
    assert g.indices[g.indptr[1] : g.indptr[2]].tolist() == [0, 3]
    assert g.in_degrees().tolist() == [0, 2, 1, 0]


def test_self_loops_kept_by_option():
    g = from_edges([0, 1], [0, 1], 2, self_loops=True)
    assert g.num_edges == 2 and g.stats()["self_loops"] == 2
    assert from_edges([0, 1], [0, 1], 2).num_edges == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(src=[0, -1], dst=[1, 0]), "negative node id -1"),
        (dict(src=[0, 5], dst=[1, 0], num_nodes=3), "out of range"),
        (dict(src=[0, 1], dst=[1]), "same length"),
        (dict(src=[0.5], dst=[1]), "integer node ids"),
        (dict(src=[0], dst=[1], features=np.zeros((3, 2))), "features must have shape"),
        (dict(src=[0], dst=[1], features=np.array([[1.0], [np.nan]])), "node 1 contain NaN"),
        (dict(src=[0], dst=[1], labels=[0, 1]), "labels were given without"),
        (dict(src=[0], dst=[1], train_mask=[True, False]), "masks were given but no labels"),
        (dict(src=[0], dst=[1], labels=[0, 1, 2], train_mask=[1, 0, 0]), "labels must have shape"),
        (dict(src=[0], dst=[1], labels=[-1, 0], train_mask=[1, 0]), "unlabelled"),
        (dict(src=[0], dst=[1], labels=[0, 1], train_mask=[2, 0]), "must be boolean"),
    ],
)
def test_validation_errors_are_typed_and_say_what_is_wrong(kwargs, message):
    with pytest.raises(GraphValidationError, match=message):
        from_edges(**kwargs)


def test_raw_csr_validation():
    with pytest.raises(GraphValidationError, match="non-decreasing"):
        Graph(indptr=[0, 2, 1, 2], indices=[0, 1])
    with pytest.raises(GraphValidationError, match="end at len"):
        Graph(indptr=[0, 1], indices=[0, 0])
    with pytest.raises(GraphValidationError, match="out of range"):
        Graph(indptr=[0, 1], indices=[1])


def test_stats_and_equality():
    labels = np.array([0, 1, 1])
    masks = split_masks(3, 0.34, 0.33, seed=0)
    g = from_edges(
        [0, 1],
        [1, 2],
        3,
        features=np.eye(3),
        labels=labels,
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
        name="tiny",
    )
    stats = g.stats()
    assert stats["num_nodes"] == 3 and stats["num_edges"] == 4
    assert stats["num_features"] == 3 and stats["num_classes"] == 2
    assert stats["train_nodes"] + stats["val_nodes"] + stats["test_nodes"] == 3
    assert stats["degree"] == {"min": 1, "mean": 4 / 3, "median": 1.0, "max": 2}
    assert g.equals(g) and not g.equals(from_edges([0, 1], [1, 2], 3))


def test_split_masks_partition_nodes_deterministically():
    a = split_masks(100, 0.6, 0.2, seed=3)
    b = split_masks(100, 0.6, 0.2, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert [int(m.sum()) for m in a] == [60, 20, 20]
    assert not (a[0] & a[1]).any() and (a[0] | a[1] | a[2]).all()
    with pytest.raises(GraphValidationError):
        split_masks(10, 0.9, 0.2, seed=0)
