"""The chunked edge-list reader and CSR builder against a plain reference build (from_edges), across
chunk boundaries, line endings, comments and id widths; the memory-mapped npz."""

import gzip

import numpy as np
import pytest

from commgraph.errors import GraphFormatError
from commgraph.graph import edgelist, from_edges, load_npz, load_snap, save_npz
from commgraph.graph.edgelist import read_edge_chunks


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
@pytest.mark.parametrize("symmetrize, self_loops", [(True, False), (False, False), (False, True), (True, True)])
def test_chunked_build_equals_the_reference(tmp_path, monkeypatch, chunk, symmetrize, self_loops):
    monkeypatch.setattr(edgelist, "CHUNK_BYTES", chunk)
    rng = np.random.default_rng(0)
    edges = rng.integers(0, 300, size=(4000, 2)) * 3  # sparse ids, remapped
    edges[:50, 1] = edges[:50, 0]  # self loops
    edges[50:100] = edges[100:150]  # repeats
    lines = [f"{a}\t{b}\r\n" if i % 3 else f"  {a}   {b} 7.5 1 # note\n" for i, (a, b) in enumerate(edges)]
    path = tmp_path / "g.txt.gz"
    path.write_bytes(gzip.compress(("# header\n\n" + "".join(lines)).rstrip("\n").encode()))
    g = load_snap(path, symmetrize=symmetrize, self_loops=self_loops)
    present = np.unique(edges)
    ref = from_edges(
        np.searchsorted(present, edges[:, 0]),
        np.searchsorted(present, edges[:, 1]),
        present.shape[0],
        symmetrize=symmetrize,
        self_loops=self_loops,
        node_ids=present,
        name="g",
    )
    assert g.equals(ref)


def test_ids_beyond_int32_and_sparse_ids(tmp_path):
    path = tmp_path / "big.txt"
    path.write_text(f"5 {2**40}\n{2**40} 7\n7 5\n")
    g = load_snap(path)
    assert g.node_ids.tolist() == [5, 7, 2**40] and g.num_edges == 6


def test_csv_columns_and_line_numbers_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(edgelist, "CHUNK_BYTES", 16)
    path = tmp_path / "edge.csv"
    path.write_text("0,1\n1,2\n2,3\n3,4\n4,5\n5,6,7\n")
    with pytest.raises(GraphFormatError, match="expected exactly 2 columns, found 3") as info:
        read_edge_chunks(path, comma=True, exact_columns=True)
    assert info.value.line == 6
    path.write_text("0,1\n1;2\n")
    with pytest.raises(GraphFormatError, match="expected an integer") as info:
        read_edge_chunks(path, comma=True)
    assert info.value.line == 2
    path.write_text("0,1\n1,12345678901234567890\n")  # beyond int64
    with pytest.raises(GraphFormatError, match="line 2"):
        read_edge_chunks(path, comma=True)
    path.write_text("0 1\n")
    with pytest.raises(GraphFormatError, match="line 1"):
        read_edge_chunks(path, comma=True)
    path.write_text("3, 4\n")
    parsed = read_edge_chunks(path, comma=True)
    assert parsed.rows == 1 and parsed.chunks[0].tolist() == [[3, 4]]


def test_stored_npz_is_memory_mapped_copy_on_write(tmp_path):
    rng = np.random.default_rng(1)
    g = from_edges(
        rng.integers(0, 100, 500),
        rng.integers(0, 100, 500),
        100,
        features=rng.random((100, 3)).astype(np.float32),
        name="m",
    )
    save_npz(g, tmp_path / "m.npz", compress=False)
    save_npz(g, tmp_path / "c.npz")
    mapped, packed = load_npz(tmp_path / "m.npz"), load_npz(tmp_path / "c.npz")
    assert mapped.equals(g) and packed.equals(g) and mapped.checksum() == g.checksum()
    assert isinstance(mapped.indices.base, np.memmap) and not isinstance(packed.indices.base, np.memmap)
    mapped.features[0, 0] = 42.0  # a private page: the file is unchanged
    assert load_npz(tmp_path / "m.npz").features[0, 0] == g.features[0, 0]
