import argparse
import gzip

import numpy as np
import pytest

from commgraph.cli.graph_args import graph_from_args
from commgraph.errors import GraphFormatError, GraphSpecError
from commgraph.graph import load_graph, load_ogb
from commgraph.partition import MANIFEST


def write_csv_gz(path, rows, fmt):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(fmt(row) + "\n" for row in rows)
    path.write_bytes(gzip.compress(lines.encode()))


def make_ogb(
    root, *, num_nodes=6, edges=((0, 1), (1, 2), (3, 4), (4, 5), (5, 3)), labels=True, schemes=("time",), declared=None
):
    """A dataset folder in exactly the layout the ``ogb`` package downloads (ogbn-arxiv style)."""
    raw = root / "raw"
    write_csv_gz(raw / "edge.csv.gz", edges, lambda e: f"{e[0]},{e[1]}")
    write_csv_gz(raw / "num-node-list.csv.gz", [declared or num_nodes], str)
    write_csv_gz(raw / "num-edge-list.csv.gz", [len(edges)], str)
    feats = np.arange(num_nodes * 3, dtype=np.float32).reshape(num_nodes, 3) / 4
    write_csv_gz(raw / "node-feat.csv.gz", feats, lambda r: ",".join(f"{v:.6f}" for v in r))
    if labels:
        write_csv_gz(raw / "node-label.csv.gz", [i % 3 for i in range(num_nodes)], str)
        for scheme in schemes:
            split = root / "split" / scheme
            write_csv_gz(split / "train.csv.gz", [0, 1, 2], str)
            write_csv_gz(split / "valid.csv.gz", [3], str)
            write_csv_gz(split / "test.csv.gz", [4, 5], str)
    return root


def test_ogb_directory_loads_exactly(tmp_path):
    root = make_ogb(tmp_path / "ogbn_toy")
    for path in (root, root / "raw"):
        g = load_graph(path)
        assert g.name == "ogbn_toy"
        assert g.num_nodes == 6 and g.num_edges == 10
        assert g.features.shape == (6, 3) and g.features[5, 2] == pytest.approx(17 / 4)
        assert g.labels.tolist() == [0, 1, 2, 0, 1, 2]
        assert np.flatnonzero(g.train_mask).tolist() == [0, 1, 2]
        assert np.flatnonzero(g.val_mask).tolist() == [3]
        assert np.flatnonzero(g.test_mask).tolist() == [4, 5]


def test_ogb_without_labels_and_isolated_nodes(tmp_path):
    root = make_ogb(tmp_path / "ogbn_nolabel", num_nodes=8, labels=False)
    g = load_ogb(root)
    assert g.num_nodes == 8 and g.labels is None and g.stats()["isolated_nodes"] == 2


def test_ogb_split_choice(tmp_path):
    root = make_ogb(tmp_path / "ogbn_two", schemes=("time", "random"))
    with pytest.raises(GraphFormatError, match="several splits"):
        load_ogb(root)
    assert load_ogb(root, split="random").train_mask.sum() == 3
    with pytest.raises(GraphFormatError, match="no split 'nope'"):
        load_ogb(root, split="nope")


def test_ids_beyond_declared_count(tmp_path):
    root = make_ogb(tmp_path / "ogbn_bad", num_nodes=6, declared=5)
    with pytest.raises(GraphFormatError, match="beyond the declared node count 5") as info:
        load_ogb(root)
    assert info.value.line == 4 and info.value.path.endswith("edge.csv.gz")


def test_feature_rows_must_match_nodes(tmp_path):
    root = make_ogb(tmp_path / "ogbn_feat")
    write_csv_gz(root / "raw" / "node-feat.csv.gz", [[1.0, 2.0]], lambda r: ",".join(map(str, r)))
    with pytest.raises(GraphFormatError, match="has 1 rows but the graph has 6 nodes"):
        load_ogb(root)


def test_non_numeric_feature_names_line(tmp_path):
    root = make_ogb(tmp_path / "ogbn_nan")
    write_csv_gz(root / "raw" / "node-feat.csv.gz", [["1", "2"], ["3", "oops"]], ",".join)
    with pytest.raises(GraphFormatError, match="expected a number, found 'oops'") as info:
        load_ogb(root)
    assert info.value.line == 2


def test_truncated_edge_file(tmp_path):
    root = make_ogb(tmp_path / "ogbn_cut", edges=[(i, i + 1) for i in range(5)] * 4000, num_nodes=6)
    data = (root / "raw" / "edge.csv.gz").read_bytes()
    (root / "raw" / "edge.csv.gz").write_bytes(data[:-20])
    with pytest.raises(GraphFormatError, match="truncated gzip"):
        load_ogb(root)


def test_unknown_directory_and_missing_path(tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "readme.md").write_text("hi")
    with pytest.raises(GraphFormatError, match="no known format"):
        load_graph(tmp_path / "junk")
    (tmp_path / "junk" / MANIFEST).write_text("{}")  # what a partition set holds
    with pytest.raises(GraphFormatError, match="no known format"):  # the graph layer knows no partition sets
        load_graph(tmp_path / "junk")
    given = argparse.Namespace(graph=str(tmp_path / "junk"), format=None, name=None, split=None)
    with pytest.raises(
        GraphFormatError, match="is a partition set, not a graph: describe it with commgraph partition info"
    ):
        graph_from_args(given)  # what every command reading a GRAPH calls
    with pytest.raises(GraphSpecError, match="nor an existing path"):
        load_graph(tmp_path / "missing.txt")
    with pytest.raises(GraphFormatError, match="cannot tell the format"):
        load_graph(tmp_path / "junk" / "readme.md")
