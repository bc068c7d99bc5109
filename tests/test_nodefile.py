"""The one per-node result writer (predictions, analytics values)."""

import numpy as np
import pytest

import commgraph.graph.nodefile as nodefile
from commgraph.errors import AnalyticsError, CommgraphError
from commgraph.graph.nodefile import check_node_file, write_node_values


def test_csv_and_npy_round_trip_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(nodefile, "CSV_CHUNK", 7)  # 20 rows: three chunks, the last one short
    values, ids = np.arange(20) % 3, np.arange(20) * 5 + 1
    write_node_values(tmp_path / "v.csv", values, ids, column="class")
    write_node_values(tmp_path / "v.npy", values, ids)
    assert (tmp_path / "v.csv").read_text().splitlines()[:3] == ["node,class", "1,0", "6,1"]
    rows = np.loadtxt(tmp_path / "v.csv", delimiter=",", skiprows=1, dtype=np.int64)
    np.testing.assert_array_equal(rows, np.stack([ids, values], axis=1))
    np.testing.assert_array_equal(np.load(tmp_path / "v.npy"), values)  # values alone, in load order


def test_csv_without_ids_numbers_nodes_and_keeps_floats(tmp_path):
    write_node_values(tmp_path / "r.csv", np.array([0.25, 1.5, np.inf]))
    assert (tmp_path / "r.csv").read_text() == "node,value\n0,0.25\n1,1.5\n2,inf\n"


def test_other_names_are_refused_before_writing(tmp_path):
    with pytest.raises(AnalyticsError, match=r"--out must end in \.npy or \.csv, got '.*x\.txt'"):
        check_node_file(tmp_path / "x.txt", AnalyticsError)
    check_node_file(tmp_path / "x.csv", AnalyticsError)  # accepted: returns quietly
    with pytest.raises(CommgraphError, match="a per-node file must end in .npy or .csv"):
        write_node_values(tmp_path / "x.txt", np.zeros(3))
    assert list(tmp_path.iterdir()) == []
