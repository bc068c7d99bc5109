"""The per-node writers: results per node (predictions, analytics values) and chunked tables."""

import hashlib

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


def test_tables_are_written_a_chunk_at_a_time_as_np_save_writes_them(tmp_path, monkeypatch):
    monkeypatch.setattr(nodefile, "CHUNK_BYTES", 3 * 8 * 4)  # 4 rows a chunk: 10 rows in 3 chunks
    table = np.arange(30, dtype=np.float64).reshape(10, 3)
    asked = []

    def rows(start, stop):
        asked.append((start, stop))
        return table[start:stop].astype(np.int64)  # converted to the file's dtype

    digest = nodefile.save_npy_in_chunks(tmp_path / "t.npy", np.float64, (10, 3), rows)
    np.save(tmp_path / "whole.npy", table)
    assert (tmp_path / "t.npy").read_bytes() == (tmp_path / "whole.npy").read_bytes()
    assert digest == hashlib.sha256((tmp_path / "whole.npy").read_bytes()).hexdigest()
    assert asked == [(0, 4), (4, 8), (8, 10)]


def test_a_chunk_of_the_wrong_shape_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"rows 0\.\.4 of .* came as shape \(5, 2\), expected \(5, 3\)"):
        nodefile.save_npy_in_chunks(tmp_path / "t.npy", np.float32, (5, 3), lambda a, b: np.zeros((b - a, 2)))
