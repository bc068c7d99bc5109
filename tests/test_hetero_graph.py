"""``HeteroGraph``: typed nodes and relations, validated; its homogeneous view; PyG round trips;
the ``mag-shaped:`` and ``movielens-shaped:`` generators as GRAPH arguments; OGB's heterogeneous
directory layout."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from commgraph.cli.main import main
from commgraph.errors import GraphFormatError, GraphSpecError, GraphValidationError
from commgraph.graph import HeteroGraph, Relation, from_pyg, load_graph, to_pyg


def tiny(**changes) -> HeteroGraph:
    """Two papers, three authors: a0 wrote p0, a1 and a2 wrote p1; p1 cites p0."""
    options = dict(
        num_nodes={"paper": 2, "author": 3},
        relations={
            ("author", "writes", "paper"): Relation.from_edges([0, 1, 2], [0, 1, 1], 2),
            ("paper", "cites", "paper"): Relation.from_edges([1], [0], 2),
        },
        features={"paper": np.array([[1.0, 0.0], [0.0, 1.0]])},
        target="paper",
        labels=np.array([0, 1]),
        train_mask=np.array([True, False]),
        val_mask=np.array([False, True]),
        test_mask=np.array([False, False]),
        name="tiny",
    )
    return HeteroGraph(**{**options, **changes})


def test_the_homogeneous_view_numbers_types_in_order_and_keeps_each_edge_type():
    view = tiny().homogeneous()
    # papers are 0, 1; authors 2, 3, 4
    np.testing.assert_array_equal(view.offsets, [0, 2, 5])
    np.testing.assert_array_equal(view.node_type, [0, 0, 1, 1, 1])
    graph = view.graph
    np.testing.assert_array_equal(graph.indptr, [0, 2, 4, 4, 4, 4])
    np.testing.assert_array_equal(graph.indices, [1, 2, 3, 4])  # p0 <- p1 (cites), a0; p1 <- a1, a2
    np.testing.assert_array_equal(view.edge_type, [1, 0, 0, 0])
    np.testing.assert_array_equal(graph.labels, [0, 1, -1, -1, -1])
    np.testing.assert_array_equal(graph.train_mask, [True, False, False, False, False])
    types, ids = view.typed([0, 1, 2, 4])
    np.testing.assert_array_equal(types, [0, 0, 1, 1])
    np.testing.assert_array_equal(ids, [0, 1, 0, 2])
    np.testing.assert_array_equal(view.type_weights().sum(axis=0), [2, 3])


def test_pyg_round_trip_is_exact():
    graph = tiny()
    data = to_pyg(graph)
    assert data["author", "writes", "paper"].edge_index.tolist() == [[0, 1, 2], [0, 1, 1]]
    assert data["author"].num_nodes == 3 and torch.equal(data["paper"].y, torch.tensor([0, 1]))
    back = from_pyg(data)
    assert isinstance(back, HeteroGraph) and back.equals(graph) and back.checksum() == graph.checksum()


def test_edge_features_ride_with_their_edges():
    rel = Relation.from_edges([2, 0, 1], [1, 0, 1], 2, features=np.array([[3.0], [1.0], [2.0]]))
    np.testing.assert_array_equal(rel.indices, [0, 1, 2])  # by destination, then source
    np.testing.assert_array_equal(rel.features[:, 0], [1.0, 2.0, 3.0])
    graph = HeteroGraph({"u": 3, "i": 2}, {("u", "rates", "i"): rel})
    back = from_pyg(to_pyg(graph))
    np.testing.assert_array_equal(back.relations[("u", "rates", "i")].features, rel.features)


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"relations": {("author", "writes", "book"): Relation.from_edges([0], [0], 1)}},
            "names node type 'book', which the graph does not have",
        ),
        ({"features": {"paper": np.ones((3, 2))}}, r"features of 'paper' must have shape \[2, F\]"),
        ({"num_nodes": {"paper": 2, "author": 0}}, "node type 'author' has no nodes"),
        ({"target": "author"}, "labels live on the target type only"),
        (
            {"relations": {("author", "writes", "paper"): Relation.from_edges([5], [0], 2)}},
            "source id 5, out of range for 3 'author' nodes",
        ),
    ],
    ids=["unknown-type", "feature-rows", "empty-type", "labels-off-target", "id-out-of-range"],
)
def test_bad_input_is_refused_naming_the_fix(changes, message):
    with pytest.raises(GraphValidationError, match=message):
        tiny(**changes)


def test_a_hetero_data_with_an_id_out_of_range_is_refused():
    data = to_pyg(tiny())
    data["author", "writes", "paper"].edge_index = torch.tensor([[0, 7], [0, 1]])
    with pytest.raises(GraphValidationError, match=r"row 0 holds id 7, out of range for 3 'author' nodes"):
        from_pyg(data)


def test_mag_shaped_has_ogbn_mags_shape_and_is_deterministic():
    graph = load_graph("mag-shaped:scale=0.002,seed=3")
    assert graph.num_nodes == {"paper": 1473, "author": 2269, "institution": 17, "field_of_study": 120}
    assert len(graph.relations) == 8 and graph.target == "paper" and graph.num_features("paper") == 128
    assert graph.num_features("author") == 0
    for (src, name, dst), relation in list(graph.relations.items())[::2]:
        back = graph.relations[(dst, f"rev_{name}", src)]
        forward = set(zip(*relation.edge_list()))
        assert {(d, s) for s, d in zip(*back.edge_list())} == forward  # the reverse holds every edge back
    assert graph.train_mask.sum() == round(1473 * 629_571 / 736_389)
    assert graph.checksum() == load_graph("mag-shaped:scale=0.002,seed=3").checksum()
    assert graph.checksum() != load_graph("mag-shaped:scale=0.002,seed=4").checksum()


def test_papers_of_one_class_share_authors_more_than_chance():
    """The structure carries the labels: a paper's co-authored papers share its class far above 1/C."""
    graph = load_graph("mag-shaped:scale=0.005,seed=0,classes=8")
    writes = graph.relations[("author", "writes", "paper")]
    authors, papers = writes.edge_list()
    order = np.argsort(authors, kind="stable")
    authors, papers = authors[order], papers[order]
    same_author = authors[1:] == authors[:-1]
    same_class = graph.labels[papers[1:]] == graph.labels[papers[:-1]]
    assert same_class[same_author].mean() > 0.4  # chance is 1/8


def test_movielens_shaped_rates_items_of_the_users_taste():
    graph = load_graph("movielens-shaped:scale=1,seed=1")
    rates = graph.relations[("user", "rates", "item")]
    assert graph.num_nodes == {"user": 6040, "item": 3706} and graph.target is None
    assert 0.7 * 1_000_209 < rates.num_edges <= 1_000_209  # draws less their duplicates
    ratings = rates.features[:, 0]
    assert set(np.unique(ratings).tolist()) == {1, 2, 3, 4, 5}
    users, items = rates.edge_list()
    item_genre = graph.features["item"].argmax(axis=1)  # an item's first set genre
    taste = np.bincount(users * 18 + item_genre[items], minlength=6040 * 18).reshape(6040, 18).argmax(axis=1)
    liked = item_genre[items] == taste[users]
    assert ratings[liked].mean() > ratings[~liked].mean() + 0.15  # a user rates their genre higher


def test_graph_info_prints_types_and_relations(capsys):
    assert main(["graph", "info", "mag-shaped:scale=0.001,seed=0"]) == 0
    out = capsys.readouterr().out
    assert "type paper" in out and "128" in out and "relation author__writes__paper" in out
    assert main(["graph", "info", "movielens-shaped:scale=0.01", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["node_types"]["item"]["num_features"] == 18
    assert stats["relations"]["user__rates__item"]["edge_features"] == 1


def test_a_command_of_one_node_type_refuses_a_heterogeneous_graph(capsys):
    assert main(["graph", "convert", "mag-shaped:scale=0.001", "--out", "x.npz"]) == 2
    assert "is a heterogeneous graph (paper, author, institution, field_of_study)" in capsys.readouterr().err


def test_generator_options_out_of_range_are_refused():
    with pytest.raises(GraphSpecError, match="mag-shaped needs 0 < scale"):
        load_graph("mag-shaped:scale=0")


def test_the_pages_load_section_runs():
    """docs/heterogeneous.md's "Load" section: its Python block runs as written."""
    page = (Path(__file__).parents[1] / "docs" / "heterogeneous.md").read_text()
    section = page.split("## Load", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"^```python runnable\n(.*?)^```$", section, re.S | re.M)
    exec(compile(block, "heterogeneous.md", "exec"), {"__name__": "page"})


def write_ogb_hetero(root: Path, *, writes: str = "0,0\n1,1\n2,1\n", triplets: str | None = None) -> Path:
    """:func:`tiny` in OGB's heterogeneous layout (``ogb``'s ``read_csv_heterograph_raw``)."""
    files = {
        "raw/num-node-dict.csv.gz": "author,paper\n3,2\n",
        "raw/triplet-type-list.csv.gz": triplets or "paper,cites,paper\nauthor,writes,paper\n",
        "raw/relations/author___writes___paper/edge.csv.gz": writes,
        "raw/relations/author___writes___paper/num-edge-list.csv.gz": "3\n",
        "raw/relations/paper___cites___paper/edge.csv.gz": "1,0\n",
        "raw/relations/paper___cites___paper/num-edge-list.csv.gz": "1\n",
        "raw/node-feat/paper/node-feat.csv.gz": "1.0,0.0\n0.0,1.0\n",
        "raw/nodetype-has-label.csv.gz": "author,paper\nFalse,True\n",
        "raw/node-label/paper/node-label.csv.gz": "0\n1\n",
        "split/time/nodetype-has-split.csv.gz": "author,paper\nFalse,True\n",
        "split/time/paper/train.csv.gz": "0\n",
        "split/time/paper/valid.csv.gz": "1\n",
        "split/time/paper/test.csv.gz": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(root / name, "wt") as handle:
            handle.write(text)
    return root


def test_an_ogb_heterogeneous_directory_reads_exactly(tmp_path, capsys):
    root = write_ogb_hetero(tmp_path / "tiny")
    graph = load_graph(root)
    # ogb's order: node types and relations sorted
    expected = tiny(num_nodes={"author": 3, "paper": 2})
    assert graph.node_types == ["author", "paper"]
    assert graph.equals(expected) and graph.checksum() == expected.checksum()
    assert load_graph(root / "raw", format="ogb").equals(expected)
    assert main(["graph", "info", str(root), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["target"] == "paper" and stats["relations"]["author__writes__paper"]["num_edges"] == 3


def test_an_ogb_heterogeneous_directory_without_labels_has_no_target(tmp_path):
    root = write_ogb_hetero(tmp_path / "tiny")
    (root / "raw/nodetype-has-label.csv.gz").unlink()
    graph = load_graph(root)
    assert graph.target is None and graph.labels is None and graph.num_edges == 4


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(writes="0,0\n3,1\n"), r"edge\.csv\.gz, line 2: 'author' id 3 is out of range for its 3 nodes"),
        (dict(writes="0,0\n1,2\n"), r"line 2: 'paper' id 2 is out of range for its 2 nodes"),
        (dict(triplets="author,writes,venue\n"), r"line 1: names node type 'venue', absent from raw/num-node-dict"),
    ],
)
def test_a_bad_ogb_heterogeneous_directory_is_refused_in_one_line(tmp_path, changes, message):
    root = write_ogb_hetero(tmp_path / "tiny", **changes)
    with pytest.raises(GraphFormatError, match=message):
        load_graph(root)
