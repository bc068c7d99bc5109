import gzip

import numpy as np
import pytest

from commgraph.errors import GraphFormatError
from commgraph.graph import load_graph, load_snap


def write(path, text, compress=False):
    data = text.encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


SNAP_TEXT = """# Directed graph (each unordered pair of nodes is saved once): example.txt
# Nodes: 4 Edges: 4
# FromNodeId\tToNodeId
10\t20
20 30
30\t10
40   10
"""


@pytest.mark.parametrize("compress", [False, True])
def test_snap_sparse_ids_are_remapped_and_mapping_kept(tmp_path, compress):
    path = write(tmp_path / ("g.txt.gz" if compress else "g.txt"), SNAP_TEXT, compress)
    g = load_graph(path)
    assert g.name == "g"
    assert g.num_nodes == 4 and g.num_edges == 8
    assert g.node_ids.tolist() == [10, 20, 30, 40]
    src, dst = g.edge_list()
    original = {(int(g.node_ids[s]), int(g.node_ids[d])) for s, d in zip(src, dst)}
    assert original == {(10, 20), (20, 10), (20, 30), (30, 20), (30, 10), (10, 30), (40, 10), (10, 40)}


def test_dense_ids_kept_and_declared_count_adds_isolated_nodes(tmp_path):
    path = write(tmp_path / "g.txt", "# Nodes: 6 Edges: 2\n0 1\n1 2\n")
    g = load_snap(path)
    assert g.node_ids is None and g.num_nodes == 6
    assert g.stats()["isolated_nodes"] == 3


def test_a_header_range_counts_the_nodes_no_edge_names(tmp_path):
    """email-Enron's trap: the header's 0..N-1 holds an id in the middle that no edge names. The
    graph has the header's N nodes (as SNAP publishes), ids kept, not N - 1 renumbered ones."""
    path = write(tmp_path / "g.txt", "# Nodes: 5 Edges: 3\n0 1\n1 3\n3 4\n")
    g = load_snap(path)
    assert g.node_ids is None and g.num_nodes == 5 and g.stats()["isolated_nodes"] == 1
    assert sorted(map(tuple, np.stack(g.edge_list(), axis=1).tolist())) == [
        (0, 1),
        (1, 0),
        (1, 3),
        (3, 1),
        (3, 4),
        (4, 3),
    ]
    sparse = write(tmp_path / "s.txt", "# Nodes: 3 Edges: 2\n10 20\n20 30\n")  # ids beyond the range: ids that occur
    assert load_snap(sparse).node_ids.tolist() == [10, 20, 30]


def test_extra_columns_and_directed_option(tmp_path):
    path = write(tmp_path / "g.txt", "0 1 0.5 1234\n1 2 0.1 99\n")
    g = load_snap(path, symmetrize=False)
    assert g.num_edges == 2 and g.in_degrees().tolist() == [0, 1, 1]


def test_matches_a_reference_build_on_random_edges(tmp_path):
    rng = np.random.default_rng(0)
    edges = rng.integers(0, 500, size=(5000, 2)) * 7  # sparse ids
    path = tmp_path / "r.txt"
    np.savetxt(path, edges, fmt="%d", delimiter="\t", header="random", comments="# ")
    g = load_snap(path)
    pairs = {(int(a), int(b)) for a, b in edges if a != b} | {(int(b), int(a)) for a, b in edges if a != b}
    src, dst = g.edge_list()
    assert {(int(g.node_ids[s]), int(g.node_ids[d])) for s, d in zip(src, dst)} == pairs
    assert g.num_edges == len(pairs)


@pytest.mark.parametrize(
    "text, message, line",
    [
        ("# c\n0 1\n2 x\n", "expected an integer, found 'x'", 3),
        ("0 1\n\n2\n", "expected at least 2 columns, found 1", 3),
        ("0 1\n-3 2\n", "negative node id -3", 2),
        ("# only a comment\n", "contains no edges", None),
        ("", "contains no edges", None),
    ],
)
def test_bad_edge_lists_name_file_and_line(tmp_path, text, message, line):
    path = write(tmp_path / "bad.txt", text)
    with pytest.raises(GraphFormatError, match=message) as info:
        load_snap(path)
    assert info.value.path == str(path)
    assert info.value.line == line
    if line is not None:
        assert f"bad.txt, line {line}:" in str(info.value)


@pytest.mark.parametrize(
    "text, nodes, node_ids, counted",
    [
        ("# Nodes: 2\n0 1\n1 2\n", 3, None, 3),  # dense ids beyond the header's range
        ("# Nodes: 2 Edges: 2\n10 20\n20 30\n", 3, [10, 20, 30], 3),  # more distinct ids than declared
        ("# Nodes: 5\n10 20\n20 30\n", 3, [10, 20, 30], 3),  # fewer, out of the header's range
    ],
)
def test_a_header_that_disagrees_with_the_edges_is_a_warning(tmp_path, capsys, text, nodes, node_ids, counted):
    """A '# Nodes:' line is the publisher's statement, not a checksum: the graph keeps the ids its
    edges name, and the disagreement is one warning on stderr naming the file and both counts."""
    path = write(tmp_path / "h.txt", text)
    g = load_snap(path)
    assert g.num_nodes == nodes and g.num_edges == 4
    assert (g.node_ids.tolist() if g.node_ids is not None else None) == node_ids
    declared = int(text.split()[2])
    assert capsys.readouterr().err == (
        f"commgraph: warning: {path}: counted {counted} nodes (the ids its edges "
        f"name) where its '# Nodes:' header states {declared}; kept as counted "
        "(a stated count is not a checksum)\n"
    )


def test_truncated_gzip_is_a_typed_error(tmp_path):
    data = gzip.compress(("0 1\n" * 20000).encode())
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(GraphFormatError, match="damaged or truncated gzip"):
        load_snap(path)


def test_not_gzip_at_all(tmp_path):
    path = write(tmp_path / "fake.txt.gz", "0 1\n")
    with pytest.raises(GraphFormatError, match="gzip"):
        load_snap(path)
