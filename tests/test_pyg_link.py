"""Link prediction in the bridge: ``cg.edge_split``, ``cg.negative_sampling``, ``cg.edge_embeddings``
and the global metrics, alone and across two ranks (a GCN link predictor on Cora trained as the
one-process script trains it)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

import commgraph.pyg as cg
from commgraph.errors import BridgeError

TESTS = Path(__file__).parent


def _graph(num_nodes: int = 40, edges: int = 120, seed: int = 0) -> Data:
    """A random undirected graph (both directions of each pair, no repeats) with two self loops and
    an edge attribute."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, num_nodes, (2, edges))
    keep = src < dst
    keys = np.unique(src[keep] * num_nodes + dst[keep])
    src, dst = keys // num_nodes, keys % num_nodes
    pairs = np.concatenate([np.stack([src, dst]), np.stack([dst, src]), [[3, 7], [3, 7]]], 1)
    edge_index = torch.from_numpy(pairs)
    x = torch.randn(num_nodes, 4)
    return Data(edge_index=edge_index, edge_attr=edge_index[0].float(), x=x, num_nodes=num_nodes)


def _pairs(edge_index: torch.Tensor, num_nodes: int) -> set[int]:
    lo, hi = edge_index.min(0).values, edge_index.max(0).values
    return set((lo * num_nodes + hi).tolist())


# -- edge_split ----------------------------------------------------------------------------------


def test_split_counts_are_disjoint_and_cover_every_pair():
    data = _graph()
    n = data.num_nodes
    train, val, test = cg.edge_split(data, num_val=np.int64(5), num_test=0.2, seed=1)
    every = _pairs(data.edge_index[:, data.edge_index[0] != data.edge_index[1]], n)
    assert val.edge_label_index.shape[1] == 5 and test.edge_label_index.shape[1] == int(0.2 * len(every))
    splits = [_pairs(s.edge_label_index, n) for s in (train, val, test)]
    assert sum(len(s) for s in splits) == len(every) and set.union(*splits) == every
    assert all(torch.equal(s.edge_label, torch.ones(s.edge_label_index.shape[1])) for s in (train, val, test))
    assert all((s.edge_label_index[0] < s.edge_label_index[1]).all() for s in (train, val, test))


def test_held_out_pairs_carry_no_message_in_either_direction():
    data = _graph()
    n = data.num_nodes
    train, val, test = cg.edge_split(data, num_val=0.1, num_test=0.1)
    held = _pairs(val.edge_label_index, n) | _pairs(test.edge_label_index, n)
    for split in (train, val, test):
        assert torch.equal(split.edge_index, train.edge_index)
        assert not held & _pairs(split.edge_index, n)
    # every training pair passes messages both ways; the self loops stay; attributes follow the edges
    ei = train.edge_index
    assert _pairs(ei[:, ei[0] != ei[1]], n) == _pairs(train.edge_label_index, n)
    assert ei.shape[1] == 2 * train.edge_label_index.shape[1] + 2
    assert torch.equal(train.edge_attr, ei[0].float())


def test_split_is_the_same_for_a_seed_and_directed_pairs_split_apart():
    data = _graph()
    first, second = cg.edge_split(data, seed=3), cg.edge_split(data, seed=3)
    assert all(torch.equal(a.edge_label_index, b.edge_label_index) for a, b in zip(first, second))
    train, val, test = cg.edge_split(data, num_val=0, num_test=0, undirected=False)
    assert train.edge_label_index.shape[1] == data.edge_index.shape[1] - 2  # each direction a pair
    assert val.edge_label_index.shape[1] == test.edge_label_index.shape[1] == 0


@pytest.mark.parametrize(
    ("num_val", "num_test", "message"),
    [(60, 60, "node pairs"), (1.5, 0.1, "fraction"), (-1, 0, "negative"), ("5", 0, "an int")],
)
def test_split_refuses_bad_counts(num_val, num_test, message):
    with pytest.raises(BridgeError, match=message):
        cg.edge_split(_graph(), num_val=num_val, num_test=num_test)


# -- negative_sampling ---------------------------------------------------------------------------


def _keys(pairs: torch.Tensor, num_nodes: int) -> np.ndarray:
    return (pairs[0] * num_nodes + pairs[1]).numpy()


@pytest.mark.parametrize("count", [50, 600])  # drawn in rounds; drawn from the listed candidates
def test_negatives_are_distinct_non_edges_and_the_same_for_a_seed(count):
    data = _graph(num_nodes=30)
    n = data.num_nodes
    neg = cg.negative_sampling(data.edge_index, n, np.int64(count), seed=4)
    keys = _keys(neg, n)
    assert neg.shape == (2, count) and np.unique(keys).shape[0] == count
    assert (neg[0] != neg[1]).all()
    assert not np.isin(keys, _keys(data.edge_index, n)).any()
    assert torch.equal(neg, cg.negative_sampling(data.edge_index, n, count, seed=4))
    assert not torch.equal(neg, cg.negative_sampling(data.edge_index, n, count, seed=5))


def test_every_non_edge_can_be_drawn_and_no_more():
    data = _graph(num_nodes=12, edges=30)
    n = data.num_nodes
    positives = np.unique(_keys(data.edge_index[:, data.edge_index[0] != data.edge_index[1]], n))
    every = n * (n - 1) - positives.shape[0]
    assert np.unique(_keys(cg.negative_sampling(data.edge_index, n, every, seed=0), n)).shape[0] == every
    with pytest.raises(BridgeError, match=f"has {every} non-edges"):
        cg.negative_sampling(data.edge_index, n, every + 1, seed=0)


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_rank_shares_make_up_the_global_draw(ranks):
    data = _graph(num_nodes=50, edges=200)
    n = data.num_nodes
    owner = np.random.default_rng(ranks).integers(0, ranks, n)
    whole = cg.negative_sampling(data.edge_index, n, 300, seed=7)
    shares = [
        cg.negative_sampling(data.edge_index, n, 300, seed=7, share=torch.from_numpy(owner == r)) for r in range(ranks)
    ]
    assert sum(s.shape[1] for s in shares) == 300
    for r, share in enumerate(shares):
        assert torch.equal(share, whole[:, torch.from_numpy(owner[whole[1].numpy()] == r)])


def test_negative_sampling_refuses_bad_arguments():
    data = _graph()
    with pytest.raises(BridgeError, match="non-negative int"):
        cg.negative_sampling(data.edge_index, data.num_nodes, -1, seed=0)
    with pytest.raises(BridgeError, match="bool mask of shape"):
        cg.negative_sampling(data.edge_index, data.num_nodes, 5, seed=0, share=torch.ones(3, dtype=torch.bool))
    with pytest.raises(BridgeError, match="node id"):
        cg.negative_sampling(data.edge_index, 10, 5, seed=0)


# -- edge_embeddings alone -----------------------------------------------------------------------


def test_edge_embeddings_alone_are_the_endpoints_rows(bridge_alone):
    data = _graph()
    part = cg.partition(data, method="chunk")
    z = torch.randn(data.num_nodes, 3, requires_grad=True)
    label_index = cg.negative_sampling(data.edge_index, data.num_nodes, 25, seed=0)
    label = torch.arange(25.0)
    rows, index, picked_label, ids = cg.edge_embeddings(z, label_index, part, label)
    assert torch.equal(ids, torch.arange(25)) and torch.equal(picked_label, label)
    assert rows.shape[0] == torch.unique(label_index).shape[0]
    scores = (rows[index[0]] * rows[index[1]]).sum(-1)
    expected = (z[label_index[0]] * z[label_index[1]]).sum(-1)
    assert torch.equal(scores, expected)
    scores.sum().backward()
    assert z.grad is not None and z.grad.abs().sum() > 0
    with pytest.raises(BridgeError, match="not a part"):
        cg.edge_embeddings(z, label_index, data)
    with pytest.raises(BridgeError, match="edge_label has"):
        cg.edge_embeddings(z, label_index, part, label[:3])


@pytest.mark.parametrize("ranks", [2, 3])
def test_each_rank_sends_the_rows_its_peers_expect(ranks):
    """The fetch plans that simulated ranks make alone agree: what rank s sends rank r, in order,
    is what r expects from s, and with its own rows r then has both endpoints of its edges."""
    from commgraph.pyg.endpoints import _fetch_plan

    n = 30
    rng = np.random.default_rng(ranks)
    owner = np.arange(n) % ranks
    rng.shuffle(owner)
    edges = rng.integers(0, n, (2, 80))
    owned = [np.flatnonzero(owner == r) for r in range(ranks)]
    plans = [_fetch_plan(edges, owner, ranks, r, owned[r]) for r in range(ranks)]
    assert all(np.array_equal(p.counts, plans[0].counts) for p in plans)
    counts = plans[0].counts
    for s in range(ranks):
        sent = np.split(owned[s][plans[s].send_rows.numpy()], np.cumsum(counts[s])[:-1])
        for r in range(ranks):
            expected = np.split(plans[r].recv_nodes, np.cumsum(counts[:, r])[:-1])[s]
            assert np.array_equal(sent[r], expected) and (s != r or sent[r].size == 0)
    for r in range(ranks):
        have = set(owned[r].tolist()) | set(plans[r].recv_nodes.tolist())
        assert set(edges[:, owner[edges[1]] == r].ravel().tolist()) <= have


# -- metrics -------------------------------------------------------------------------------------


def test_metrics_match_hand_computed_values(bridge_alone):
    # positives 0.9 and 0.5 against negatives 0.5 and 0.1: 1 + 1 + 1/2 (the tie) + 1 of 4 pairs
    assert cg.auc(torch.tensor([0.9, 0.5, 0.5, 0.1]), torch.tensor([1, 1, 0, 0])) == 0.875
    assert cg.auc(torch.tensor([0.2, 0.2]), torch.tensor([1, 0])) == 0.5
    pos, neg = torch.tensor([3.0, 2.0, 1.0]), torch.tensor([2.5, 1.5, 0.5])
    assert [cg.hits_at_k(pos, neg, k) for k in (1, 2, 3, 4)] == [1 / 3, 2 / 3, 1.0, 1.0]
    # 3.0 is first; 1.5 has 2.0 above and ties 1.5: rank 1 + 1 + 1/2
    assert cg.mrr(torch.tensor([3.0, 1.5]), torch.tensor([2.0, 1.5, 1.0])) == pytest.approx((1 + 1 / 2.5) / 2)
    assert cg.mrr(torch.tensor([1.0, 2.0]), torch.tensor([[0.0, 2.0], [1.0, 1.0]])) == 0.75


def test_metrics_equal_their_definitions_pair_by_pair(bridge_alone):
    """Random scores with many ties: each metric equals its definition over every (positive,
    negative) pair."""
    rng = np.random.default_rng(0)
    pos, neg = rng.integers(0, 6, 40).astype(float), rng.integers(0, 6, 70).astype(float)
    wins = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    scores, labels = torch.from_numpy(np.concatenate([pos, neg])), torch.cat([torch.ones(40), torch.zeros(70)])
    assert cg.auc(scores, labels) == pytest.approx(wins.mean(), abs=1e-15)
    rank = 1 + (neg[None, :] > pos[:, None]).sum(1) + 0.5 * (neg[None, :] == pos[:, None]).sum(1)
    assert cg.mrr(torch.from_numpy(pos), torch.from_numpy(neg)) == pytest.approx(np.mean(1 / rank), abs=1e-15)
    for k in (1, 10, 70):
        assert cg.hits_at_k(torch.from_numpy(pos), torch.from_numpy(neg), k) == np.mean(pos > np.sort(neg)[-k])


def test_metrics_refuse_bad_inputs(bridge_alone):
    with pytest.raises(BridgeError, match="positives and negatives"):
        cg.auc(torch.tensor([0.1, 0.2]), torch.tensor([1, 1]))
    with pytest.raises(BridgeError, match="0 or 1"):
        cg.auc(torch.tensor([0.1, 0.2]), torch.tensor([1, 2]))
    with pytest.raises(BridgeError, match="NaN"):
        cg.auc(torch.tensor([float("nan"), 0.2]), torch.tensor([1, 0]))
    with pytest.raises(BridgeError, match="positive int"):
        cg.hits_at_k(torch.ones(2), torch.ones(2), 0)
    with pytest.raises(BridgeError, match="rows for"):
        cg.mrr(torch.ones(2), torch.ones(3, 4))


# -- LinkNeighborLoader -------------------------------------------------------------------------


def _check_batches(loader, train, held: set[int], n: int, fanouts: list[int]) -> int:
    """Every batch's blocks hold training edges only (none held out), each node at most ``fanout``
    in-edges, and its label edges are the loader's; returns the positives seen."""
    train_keys = set(_keys(train.edge_index, n).tolist())
    seen = 0
    for batch in loader:
        ei = batch.n_id[batch.edge_index]
        assert set(_keys(ei, n).tolist()) <= train_keys and not held & _pairs(ei, n)
        assert torch.bincount(batch.edge_index[1]).max() <= max(fanouts)
        assert torch.equal(batch.x, train.x[batch.n_id])
        labelled = batch.n_id[batch.edge_label_index]
        positive = batch.input_id >= 0
        assert torch.equal(labelled[:, positive], train.edge_label_index[:, batch.input_id[positive]])
        assert torch.equal(batch.edge_label, positive.float())
        assert not np.isin(_keys(labelled[:, ~positive], n), _keys(train.edge_index, n)).any()
        seen += int(positive.sum())
    return seen


def test_link_loader_blocks_hold_training_edges_only(bridge_alone):
    data = _graph(num_nodes=60, edges=300)
    n = data.num_nodes
    train, val, test = cg.edge_split(data, num_val=0.1, num_test=0.1)
    held = _pairs(val.edge_label_index, n) | _pairs(test.edge_label_index, n)
    loader = cg.LinkNeighborLoader(train, [3, 2], neg_sampling_ratio=1.0, batch_size=8, shuffle=True)
    assert len(loader) == math.ceil(train.edge_label_index.shape[1] / 8)
    assert _check_batches(loader, train, held, n, [3, 2]) == train.edge_label_index.shape[1]
    part = cg.partition(train, method="chunk")  # the partition set's in-edges: the training graph
    loader = cg.LinkNeighborLoader(part, [-1], train.edge_label_index, neg_sampling_ratio=0.5, batch_size=16)
    assert _check_batches(loader, train, held, n, [n]) == train.edge_label_index.shape[1]


def test_link_loader_takes_every_in_neighbour_with_fanout_minus_one(bridge_alone):
    data = _graph()
    train, _, _ = cg.edge_split(data)
    batch = next(iter(cg.LinkNeighborLoader(train, [-1], batch_size=1)))
    seeds = batch.n_id[torch.unique(batch.edge_label_index)]
    expected = train.edge_index[:, torch.isin(train.edge_index[1], seeds)]
    sampled = _keys(batch.n_id[batch.edge_index], data.num_nodes)
    assert np.array_equal(np.sort(sampled), np.sort(_keys(expected, data.num_nodes)))
    with pytest.raises(BridgeError, match="num_neighbors"):
        cg.LinkNeighborLoader(train, [0])
    with pytest.raises(BridgeError, match="edge_label_index"):
        cg.LinkNeighborLoader(data, [2])


def test_link_loader_positives_are_the_edge_lists_keys():
    """The loader's positives, made from the in-edge CSR in place, are the edge list's distinct
    keys without self loops (a duplicate edge and two loops included)."""
    from commgraph.pyg.link import PairSpace, _positive_keys
    from commgraph.pyg.link_loader import _in_edge_csr, csr_keys

    edges = np.concatenate([_graph(num_nodes=30, edges=90).edge_index.numpy(), [[4, 4, 7, 3], [4, 4, 2, 3]]], 1)
    indptr, indices = _in_edge_csr(edges, 30)
    expected = _positive_keys(torch.from_numpy(edges), PairSpace(30, 30))
    assert np.array_equal(csr_keys(indptr, indices), expected)
    assert np.array_equal(csr_keys(indptr, indices.astype(np.int32)), expected)


def test_link_loader_lays_out_its_batch_hop_by_hop_as_pyg(bridge_alone):
    """The label edges' endpoints lead ``n_id``, then each hop's new nodes; hop h's edges (listed
    hop after hop) run into the nodes hop h - 1 added; the counts are PyG's for trim_to_layer."""
    train, _, _ = cg.edge_split(_graph(num_nodes=60, edges=300))
    loader = cg.LinkNeighborLoader(train, [3, 2], neg_sampling_ratio=1.0, batch_size=8, shuffle=True)
    for batch in loader:
        nodes, edges = batch.num_sampled_nodes, batch.num_sampled_edges
        assert len(nodes) == 3 and len(edges) == 2
        assert sum(nodes) == batch.n_id.shape[0] and sum(edges) == batch.edge_index.shape[1]
        assert nodes[0] == torch.unique(batch.edge_label_index).shape[0] == int(batch.edge_label_index.max()) + 1
        ends, first = np.cumsum(nodes), 0
        for hop, count in enumerate(edges):
            src, dst = batch.edge_index[:, first : first + count]
            assert bool(((dst >= (ends[hop - 1] if hop else 0)) & (dst < ends[hop])).all())
            assert bool((src < ends[hop + 1]).all())
            first += count


# -- across ranks --------------------------------------------------------------------------------


def _link_job(workers: int, out: Path, monkeypatch) -> dict:
    from forked import launch_forked

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    assert launch_forked([str(out), "3"], workers, grace=30, module="link_driver", threads_per_worker=1) == 0
    return json.loads(out.read_text())


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_ranks_train_a_link_predictor_as_one_process_does(tmp_path, monkeypatch):
    """A GCN link predictor on Cora, 3 full-graph epochs: the losses and the test metrics of two
    ranks are the one-process script's, by each rank's share and by the wrapper's decoder scoring
    every pair; the label edges' remote rows went through the runtime."""
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    alone = _link_job(1, tmp_path / "one.json", monkeypatch)
    two = _link_job(2, tmp_path / "two.json", monkeypatch)
    np.testing.assert_allclose(two["losses"], alone["losses"], rtol=1e-5)
    np.testing.assert_allclose(alone["decoder_losses"], alone["losses"], rtol=1e-6)
    np.testing.assert_allclose(two["decoder_losses"], alone["losses"], rtol=1e-5)
    for metric in ("auc", "hits20", "mrr"):
        assert two[metric] == pytest.approx(alone[metric], rel=1e-6), metric
    assert not alone["refused_different_edges"] and two["refused_different_edges"]
    assert two["loader_loads_each_edge_once"] and two["loader_blocks_train_only"]
    assert "link_forward" not in alone["bytes"]
    assert two["bytes"]["link_forward"] > 0 and two["bytes"]["link_backward"] > 0


def test_every_link_name_is_documented_with_its_arguments_and_result():
    import inspect

    from commgraph.pyg import endpoints, link, link_loader, metrics

    modules = (endpoints.__name__, link.__name__, link_loader.__name__, metrics.__name__)
    names = [n for n in cg.__all__ if getattr(cg, n).__module__ in modules]
    assert len(names) == 10
    for name in names:
        member, doc = getattr(cg, name), inspect.getdoc(getattr(cg, name))
        assert doc and (not inspect.isfunction(member) or ("Args:" in doc and "Returns:" in doc)), name


def test_no_exported_name_is_hidden_by_a_submodule():
    """Importing a submodule sets it on the package, so no submodule may be spelt as a name the
    package exports (``cg.full_graph`` stays the function once ``cg.FullGraph`` loaded its module)."""
    import pkgutil

    assert cg.FullGraph and callable(cg.full_graph) and cg.full_graph.__name__ == "full_graph"
    assert not {m.name for m in pkgutil.iter_modules(cg.__path__)} & set(cg.__all__)
