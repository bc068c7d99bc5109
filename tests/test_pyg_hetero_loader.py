"""``commgraph.pyg.NeighborLoader`` over a ``HeteroData``: PyG's heterogeneous batch layout with
per-relation fanouts in a one-process world, reproducible draws, its argument checks, and the
exactness of a ``to_hetero(SAGE)`` model trained sampled at fanout -1 against the one-process
full-graph run, with 1, 2 and 4 ranks (``pyg_hetero_loader_driver``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from commgraph.errors import BridgeError

TESTS = Path(__file__).parent


@pytest.fixture(scope="module")
def mag():
    from pyg_hetero_loader_driver import make_data

    return make_data()


def check_layout(data, batch, fanouts: dict) -> None:
    """``batch`` as PyG lays a heterogeneous one out: per type distinct ``n_id`` and the rows of
    ``data``; per relation real edges (``e_id``) towards the nodes the hop before added, each with
    ``min(fanout, in-degree)`` of them (all with -1); each type's new nodes in order of first draw
    over the relations in ``data.edge_types`` order."""
    bounds = {t: np.cumsum([0, *batch[t].num_sampled_nodes]).tolist() for t in data.node_types}
    for t in data.node_types:
        n_id = batch[t].n_id
        assert n_id.unique().shape[0] == n_id.shape[0] and bounds[t][-1] == n_id.shape[0]
        assert torch.equal(batch[t].x, data[t].x[n_id])
    assert torch.equal(batch["paper"].y, data["paper"].y[batch["paper"].n_id])
    first = {r: 0 for r in data.edge_types}
    for h in range(len(next(iter(fanouts.values())))):
        drawn = {t: [] for t in data.node_types}
        for r in data.edge_types:
            src, _, dst = r
            edge_index, e_id = batch[r].edge_index, batch[r].e_id
            assert torch.equal(
                data[r].edge_index[:, e_id],
                torch.stack([batch[src].n_id[edge_index[0]], batch[dst].n_id[edge_index[1]]]),
            )
            last = first[r] + batch[r].num_sampled_edges[h]
            out_of, into = edge_index[:, first[r] : last]
            assert bool(((into >= bounds[dst][h]) & (into < bounds[dst][h + 1])).all())
            degree = torch.bincount(data[r].edge_index[1], minlength=data[dst].num_nodes)
            wanted = degree[batch[dst].n_id[bounds[dst][h] : bounds[dst][h + 1]]]
            counts = torch.bincount(into - bounds[dst][h], minlength=bounds[dst][h + 1] - bounds[dst][h])
            assert torch.equal(counts, wanted if fanouts[r][h] == -1 else wanted.clamp(max=fanouts[r][h]))
            drawn[src].append(out_of)
            first[r] = last
        for t, pieces in drawn.items():
            sources = torch.cat(pieces).numpy() if pieces else np.empty(0, np.int64)
            new = sources[sources >= bounds[t][h + 1]]
            added, at = np.unique(new, return_index=True)
            assert added[np.argsort(at)].tolist() == list(range(bounds[t][h + 1], bounds[t][h + 2]))
    assert all(first[r] == batch[r].edge_index.shape[1] for r in data.edge_types)


def test_batches_have_pygs_heterogeneous_layout(alone, mag):
    import commgraph.pyg as cg

    fanouts = {r: [3, 2] for r in mag.edge_types}
    fanouts["paper", "cites", "paper"] = [-1, 1]
    mask = mag["paper"].train_mask
    loader = cg.NeighborLoader(mag, num_neighbors=fanouts, batch_size=16, input_nodes=("paper", mask), shuffle=True)
    batches = list(loader)
    assert len(loader) == len(batches) == -(-int(mask.sum()) // 16)
    seeds = torch.cat([b["paper"].n_id[: b["paper"].batch_size] for b in batches])
    assert torch.equal(seeds.sort().values, mask.nonzero().view(-1))
    for batch in batches:
        check_layout(mag, batch, fanouts)
        size = batch["paper"].batch_size
        assert torch.equal(mask.nonzero().view(-1)[batch["paper"].input_id], batch["paper"].n_id[:size])
        assert batch["author"].num_sampled_nodes[0] == batch["field"].num_sampled_nodes[0] == 0


def test_a_relation_with_fewer_neighbours_than_its_fanout_takes_them_all(alone, mag):
    """Every field has fewer than 40 papers (``has_topic``), so a fanout of 40 takes all of them;
    a list fanout applies to every relation."""
    import commgraph.pyg as cg

    relation = ("paper", "has_topic", "field")
    degree = torch.bincount(mag[relation].edge_index[1], minlength=mag["field"].num_nodes)
    assert 0 < int(degree.max()) < 40
    batch = next(iter(cg.NeighborLoader(mag, num_neighbors=[40, 40], batch_size=12, input_nodes="field")))
    assert batch["field"].batch_size == 12
    check_layout(mag, batch, {r: [40, 40] for r in mag.edge_types})
    assert batch[relation].num_sampled_edges[0] == int(degree.sum())


def test_draws_are_reproducible_for_a_seed(alone, mag):
    import commgraph.pyg as cg

    def epoch(seed):
        loader = cg.NeighborLoader(
            mag, num_neighbors=[2, 2], batch_size=32, input_nodes="paper", shuffle=True, seed=seed
        )
        return [(b["paper"].n_id, b["author"].n_id, b["author", "writes", "paper"].e_id) for b in loader]

    first, again, other = epoch(3), epoch(3), epoch(4)
    assert all(torch.equal(a, b) for x, y in zip(first, again) for a, b in zip(x, y))
    assert not all(torch.equal(x[0], y[0]) for x, y in zip(first, other))


def test_fanout_minus_one_gives_the_full_graph_output(alone, mag):
    """At fanout -1 a seed's rows after two layers are the full-graph model's, so the sampled run's
    losses are the full-graph run's."""
    import commgraph.pyg as cg
    from pyg_hetero_loader_driver import full_graph_losses, make_model, sampled_losses

    model = make_model(mag)
    with torch.no_grad():
        whole = model(mag.x_dict, mag.edge_index_dict)["paper"]
        for batch in cg.NeighborLoader(mag, num_neighbors=[-1, -1], batch_size=50, input_nodes="paper"):
            size = batch["paper"].batch_size
            out = model(batch.x_dict, batch.edge_index_dict)["paper"][:size]
            torch.testing.assert_close(out, whole[batch["paper"].n_id[:size]], rtol=1e-5, atol=1e-6)
    assert sampled_losses(mag)[0] == pytest.approx(full_graph_losses(mag), rel=1e-5)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"num_neighbors": {("paper", "cites", "paper"): [2]}}, "no fanouts for relation"),
        ({"num_neighbors": {("paper", "cited_by", "paper"): [2]}}, "names relation .*cited_by"),
        ({"num_neighbors": {"paper__cites__paper": [2, 2], "default": [1]}}, "names relation"),
        ({"num_neighbors": "mixed"}, "num_neighbors must be"),
        ({"input_nodes": ("venue", None)}, "node type 'venue'"),
        ({"input_nodes": None}, "must name the seeds' node type"),
        ({"input_nodes": ("paper", torch.ones(5, dtype=torch.bool))}, "mask of shape"),
        ({"input_nodes": ("author", torch.tensor([0.5]))}, "1-D bool mask or 1-D integer"),
        ({"input_nodes": ("field", torch.tensor([12]))}, "node id 12 but the graph has 12"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_arguments_say_what_to_fix(alone, mag, options, message):
    import commgraph.pyg as cg

    arguments = {"num_neighbors": [2, 2], "input_nodes": "paper", **options}
    with pytest.raises(BridgeError, match=message):
        cg.NeighborLoader(mag, **arguments)


def test_fanout_lists_of_different_lengths_are_refused(alone, mag):
    import commgraph.pyg as cg

    fanouts = {r: [2, 2] for r in mag.edge_types}
    fanouts["author", "writes", "paper"] = [2]
    with pytest.raises(BridgeError, match=r"lists of \[1, 2\] hops"):
        cg.NeighborLoader(mag, num_neighbors=fanouts, input_nodes="paper")


def test_edges_out_of_their_types_range_are_refused(alone, mag):
    import commgraph.pyg as cg

    uncounted = mag.clone()
    del uncounted["field"].x
    with pytest.warns(UserWarning), pytest.raises(BridgeError, match=r"set data\['field'\].num_nodes"):
        cg.NeighborLoader(uncounted, num_neighbors=[2], input_nodes="paper")

    bad = mag.clone()
    bad["paper", "has_topic", "field"].edge_index = torch.tensor([[0], [12]])
    with pytest.raises(
        BridgeError,
        match=r"data\[\('paper', 'has_topic', 'field'\)\].edge_index holds target id 12 but its node type has 12",
    ):
        cg.NeighborLoader(bad, num_neighbors=[2], input_nodes="paper")


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.parametrize("workers", [2, 4])
def test_ranks_train_exactly_as_the_full_graph_run(tmp_path, monkeypatch, mag, workers):
    from forked import launch_forked
    from pyg_hetero_loader_driver import full_graph_losses

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    assert (
        launch_forked([str(tmp_path)], workers, grace=30, module="pyg_hetero_loader_driver", threads_per_worker=1) == 0
    )
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(workers)]
    seeds = [set(r["seeds"]) for r in ranks]
    assert sum(len(s) for s in seeds) == len(set().union(*seeds)) == int(mag["paper"].train_mask.sum())
    assert all(seeds)  # every rank trains on its share
    expected = full_graph_losses(mag)
    for r in ranks:
        assert r["losses"] == pytest.approx(expected, rel=1e-5)


def test_the_pages_sampled_training_block_runs(capsys, tmp_path, monkeypatch):
    """docs/heterogeneous.md's section "Sampled training with per-relation fanouts": its scripts
    (node classification, then link prediction on a relation) run in a one-process world."""
    import re

    import commgraph.pyg as cg

    page = (TESTS.parent / "docs" / "heterogeneous.md").read_text()
    section = page.split("## Sampled training with per-relation fanouts\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python runnable\n(.*?)^```$", section, re.S | re.M)
    assert len(blocks) == 2
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path))
    try:
        exec(compile("\n".join(blocks), "heterogeneous.md", "exec"), {"__name__": "page"})
    finally:
        cg.shutdown()
    out = capsys.readouterr().out
    losses = [float(v) for v in re.findall(r"epoch \d: loss (\d+\.\d+)", out)]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert 0.0 <= float(re.search(r"validation AUC (\d\.\d+)", out).group(1)) <= 1.0


# -- link prediction on a relation ---------------------------------------------------------------

WRITES, REV_WRITES = ("author", "writes", "paper"), ("paper", "rev_writes", "author")


def keys(edge_index: torch.Tensor, width: int) -> set[int]:
    return set((edge_index[0] * width + edge_index[1]).tolist())


def test_edge_split_of_a_relation_drops_held_out_pairs_and_their_reverses(mag):
    import commgraph.pyg as cg

    n = mag["paper"].num_nodes
    train, val, test = cg.edge_split(mag, num_val=0.1, num_test=0.2, edge_type=WRITES, rev_edge_type=REV_WRITES)
    labels = [keys(split[WRITES].edge_label_index, n) for split in (train, val, test)]
    assert [len(k) for k in labels] == [300 - 30 - 60, 30, 60]
    assert set().union(*labels) == keys(mag[WRITES].edge_index, n)
    for split in (train, val, test):
        assert keys(split[WRITES].edge_index, n) == labels[0]
        assert keys(split[REV_WRITES].edge_index.flip(0), n) == labels[0]
        assert torch.equal(split["paper", "cites", "paper"].edge_index, mag["paper", "cites", "paper"].edge_index)
    assert mag[WRITES].edge_index.shape[1] == 300 and "edge_label_index" not in mag[WRITES]  # data untouched
    cites = cg.edge_split(mag, num_val=20, num_test=20, edge_type=("paper", "cites", "paper"), undirected=False)
    assert cites.val["paper", "cites", "paper"].edge_label_index.shape[1] == 20
    with pytest.raises(BridgeError, match="pass edge_type="):
        cg.edge_split(mag)
    with pytest.raises(BridgeError, match="rev_edge_type"):
        cg.edge_split(mag, edge_type=WRITES, rev_edge_type=("paper", "cites", "paper"))


def test_negatives_of_a_relation_between_two_types():
    import commgraph.pyg as cg

    edges = torch.tensor([[0, 0, 1, 2], [0, 4, 1, 3]])
    shape = (3, 5)
    neg = cg.negative_sampling(edges, shape, 11, seed=1)  # every non-edge: 3 * 5 - 4, self loops included
    assert neg.shape == (2, 11) and len(keys(neg, 5)) == 11 and not keys(neg, 5) & keys(edges, 5)
    assert int(neg[0].max()) < 3 and int(neg[1].max()) < 5
    assert torch.equal(cg.negative_sampling(edges, shape, 6, seed=2), cg.negative_sampling(edges, shape, 6, seed=2))
    many = cg.negative_sampling(torch.tensor([[0], [0]]), (400, 700), 1000, seed=0)  # drawn in rounds
    assert len(keys(many, 700)) == 1000 and 0 not in keys(many, 700) and int(many[0].max()) < 400
    with pytest.raises(BridgeError, match="has 11 non-edges"):
        cg.negative_sampling(edges, shape, 12, seed=0)
    with pytest.raises(BridgeError, match="source id 3 but its node type has 3 nodes"):
        cg.negative_sampling(torch.tensor([[3], [0]]), shape, 1, seed=0)


def test_link_batches_of_a_relation_hold_training_edges_only(alone, mag):
    import commgraph.pyg as cg

    n = mag["paper"].num_nodes
    train, val, test = cg.edge_split(mag, num_val=0.1, num_test=0.2, edge_type=WRITES, rev_edge_type=REV_WRITES)
    held = keys(val[WRITES].edge_label_index, n) | keys(test[WRITES].edge_label_index, n)
    loader = cg.LinkNeighborLoader(
        train, num_neighbors=[3, 2], edge_label_index=WRITES, neg_sampling_ratio=1.0, batch_size=32, shuffle=True
    )
    seen = 0
    for batch in loader:
        check_layout(train, batch, {r: [3, 2] for r in train.edge_types})
        store = batch[WRITES]
        label = torch.stack(
            [batch["author"].n_id[store.edge_label_index[0]], batch["paper"].n_id[store.edge_label_index[1]]]
        )
        positive = store.input_id >= 0
        assert torch.equal(label[:, positive], train[WRITES].edge_label_index[:, store.input_id[positive]])
        assert torch.equal(store.edge_label, positive.float()) and int((~positive).sum()) == int(positive.sum())
        assert not keys(label[:, ~positive], n) & keys(train[WRITES].edge_index, n)
        sampled = torch.stack([batch["author"].n_id[store.edge_index[0]], batch["paper"].n_id[store.edge_index[1]]])
        rev = batch[REV_WRITES].edge_index
        back = torch.stack([batch["author"].n_id[rev[1]], batch["paper"].n_id[rev[0]]])
        assert not (keys(sampled, n) | keys(back, n)) & held
        seen += int(positive.sum())
    assert seen == train[WRITES].edge_label_index.shape[1]
    with pytest.raises(BridgeError, match="must name a relation"):
        cg.LinkNeighborLoader(train, num_neighbors=[2], edge_label_index=train[WRITES].edge_label_index)
    with pytest.raises(BridgeError, match="holds no edge_label_index"):
        cg.LinkNeighborLoader(train, num_neighbors=[2], edge_label_index=("paper", "cites", "paper"))
