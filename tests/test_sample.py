"""Samplers: distributions checked against their formulas, and blocks that train exactly as the
whole graph does when nothing is left out."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from commgraph.errors import SamplingError
from commgraph.graph import from_edges, load_graph
from commgraph.graph.core import loop_free_in_degrees
from commgraph.nn import GNN
from commgraph.partition import load_partition_set, partition_metrics, write_partition_set
from commgraph.runtime import World
from commgraph.runtime.job import Job, JobOptions
from commgraph.sample import (
    ClusterSampler,
    DGSMasks,
    DGSSampler,
    FastGCNSampler,
    LADIESSampler,
    NeighborSampler,
    SamplingGraph,
    forward_blocks,
    parse_fanouts,
)
from commgraph.train.executor import BarrierExecutor


def _sampling_graph(src, dst, n, owner=None, part=None) -> SamplingGraph:
    graph = from_edges(np.asarray(src), np.asarray(dst), n, symmetrize=False, self_loops=True)
    owner = np.zeros(n, dtype=np.int64) if owner is None else np.asarray(owner)
    return SamplingGraph(graph.indptr, graph.indices, loop_free_in_degrees(graph.indptr, graph.indices), owner, part)


def _fan_in(sources_per_destination: int, destinations: int):
    """Destinations 0..D-1, each with its own in-neighbours (disjoint), and no other edge."""
    dst = np.repeat(np.arange(destinations), sources_per_destination)
    src = destinations + np.arange(destinations * sources_per_destination)
    return src, dst, destinations * (1 + sources_per_destination)


def _inclusion(sampler, seeds, draws: int, n: int, at_most: int = 5) -> np.ndarray:
    """How often each node was a sampled in-neighbour of a seed, over ``draws`` batches (each seed
    with at most ``at_most`` of them)."""
    rng = np.random.default_rng(7)
    hits = np.zeros(n)
    for _ in range(draws):
        last = sampler.sample(seeds, rng).layers[-1]
        assert np.all(np.bincount(last.edge_dst) <= at_most)
        hits[last.src[last.edge_src]] += 1
    return hits / draws


def test_neighbor_inclusion_frequencies_match_uniform_sampling():
    src, dst, n = _fan_in(20, 10)
    src, dst = np.concatenate([src, [0, 0]]), np.concatenate([dst, [10, 11]])  # node 10 -> 0 too
    graph = _sampling_graph(src, dst, n)
    sampler = NeighborSampler(graph, [5])
    draws = 2000
    freq = _inclusion(sampler, np.arange(10), draws, n)
    # each of a destination's 20 neighbours is kept with probability 5/20; 5 standard deviations
    bound = 5 * np.sqrt(0.25 * 0.75 / draws)
    assert np.all(np.abs(freq[10:] - 0.25) < bound), np.abs(freq[10:] - 0.25).max()
    # and all 5 are distinct, 5 per destination, every time
    batch = sampler.sample(np.arange(10), np.random.default_rng(0))
    last = batch.layers[-1]
    assert last.num_edges == 50 and np.unique(last.src[last.edge_src]).shape[0] == 50
    # a destination with fewer neighbours than the fanout keeps them all; -1 keeps everything
    small = sampler.sample(np.array([10, 11]), np.random.default_rng(0)).layers[0]
    assert small.num_edges == 2 and set(small.src[small.edge_src].tolist()) == {0}
    assert NeighborSampler(graph, [-1]).sample(np.array([0]), np.random.default_rng(0)).layers[0].num_edges == 20


def test_neighbor_blocks_are_deterministic_and_chain():
    graph = SamplingGraph.from_graph(load_graph("cora"))
    sampler = NeighborSampler(graph, "10,5")
    seeds = np.arange(0, 2708, 7)
    one = sampler.sample(seeds, np.random.default_rng(3))
    two = sampler.sample(seeds, np.random.default_rng(3))
    other = sampler.sample(seeds, np.random.default_rng(4))
    for a, b in zip(one.layers, two.layers):
        assert np.array_equal(a.src, b.src) and np.array_equal(a.edge_src, b.edge_src)
    assert not np.array_equal(one.layers[0].src, other.layers[0].src)
    assert np.array_equal(one.layers[-1].dst, seeds)
    assert np.array_equal(one.layers[1].src, one.layers[0].dst)  # a layer's table is the next's output
    for layer, fanout in zip(one.layers, (5, 10)):
        assert np.array_equal(layer.src[: layer.dst.shape[0]], layer.dst)
        degree = np.diff(graph.indptr)[layer.dst]
        assert np.array_equal(np.bincount(layer.edge_dst, minlength=layer.dst.shape[0]), np.minimum(degree, fanout))
        # every sampled edge is an edge of the graph
        keys = set(zip(graph.indices.tolist(), np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr)).tolist()))
        assert all((int(u), int(v)) in keys for u, v in zip(layer.src[layer.edge_src], layer.dst[layer.edge_dst]))


# the path 0 - 1 - 2 - 3, symmetric, with a self loop on 0 (replaced by GCN's own): degrees 1, 2, 2, 1
_PATH = ([0, 1, 1, 2, 2, 3, 0], [1, 0, 2, 1, 3, 2, 0])


def test_fastgcn_probabilities_equal_the_formula_on_a_path():
    graph = _sampling_graph(*_PATH, 4)
    sampler = FastGCNSampler(graph, [2])
    # ||A_hat(:, u)||^2 = sum over v of 1 / ((d_u + 1)(d_v + 1)), the self loop included:
    # u=0: 1/6 + 1/4 = 5/12; u=1: 1/6 + 1/9 + 1/9 = 7/18; u=2 likewise; u=3 like u=0; total 29/18
    np.testing.assert_allclose(sampler.q, np.array([15, 14, 14, 15]) / 58, rtol=1e-12)
    layer = sampler.sample(np.array([1]), np.random.default_rng(0)).layers[0]
    drawn = layer.prob > 0
    np.testing.assert_allclose(layer.prob[drawn], sampler.q[layer.src[drawn]])
    a_hat = 1 / np.sqrt(np.array([2, 3, 3, 2])[layer.src[layer.edge_src]] * 3)  # into node 1 (d = 2)
    np.testing.assert_allclose(layer.weight, a_hat / (2 * sampler.q[layer.src[layer.edge_src]]))


def test_ladies_probabilities_equal_the_formula_and_are_drawn_by_it():
    graph = _sampling_graph(*_PATH, 4)
    sampler = LADIESSampler(graph, [1])
    p, _, _ = sampler.probabilities(np.array([0]))
    np.testing.assert_allclose(p, [3 / 5, 2 / 5, 0, 0])  # (1/4, 1/6) normalised
    p, _, _ = sampler.probabilities(np.array([1, 3]))
    # u=0: A(1,0)^2 = 1/6; u=1: 1/9 (self); u=2: A(1,2)^2 + A(3,2)^2 = 1/9 + 1/6; u=3: 1/4 (self)
    np.testing.assert_allclose(p, np.array([6, 4, 10, 9]) / 29)
    rng, draws = np.random.default_rng(1), 3000
    counts = np.zeros(4)
    for _ in range(draws):
        layer = sampler.sample(np.array([1, 3]), rng).layers[0]
        counts[layer.src[layer.prob > 0]] += 1
    assert np.all(np.abs(counts / draws - p) < 5 * np.sqrt(p * (1 - p) / draws))
    # weights A_hat(v, u) / p(u), normalised over each destination's kept edges
    wide = LADIESSampler(graph, [4]).sample(np.array([1, 3]), np.random.default_rng(0)).layers[0]
    np.testing.assert_allclose(np.bincount(wide.edge_dst, weights=wide.weight), [1.0, 1.0])


def test_ladies_counts_its_probability_synchronisation():
    src, dst = _PATH[0][:6], _PATH[1][:6]
    graph = _sampling_graph(src, dst, 4, owner=[0, 0, 1, 1], part=0)
    batch = LADIESSampler(graph, [4, 4]).sample(np.array([1]), np.random.default_rng(0))
    # hop 1: destination 1 is local: nothing asked. Hop 2 computes 0, 1, 2: part 1 is asked for
    # row 2 (8 bytes) and returns partial sums for 1 and 3 (its in-neighbours) and 2 (the diagonal)
    assert batch.sync_bytes == 8 + 3 * 12
    assert (
        LADIESSampler(_sampling_graph(src, dst, 4), [4, 4]).sample(np.array([1]), np.random.default_rng(0)).sync_bytes
        == 0
    )


def _two_parts():
    """10 destinations owned by part 0, each with 8 local and 12 remote in-neighbours."""
    src, dst, n = _fan_in(20, 10)
    owner = np.zeros(n, dtype=np.int64)
    owner[10:][np.arange(200) % 20 >= 8] = 1
    return _sampling_graph(src, dst, n, owner=owner, part=0), n


@pytest.mark.slow
def test_dgs_samples_like_neighbor_before_masks_and_in_distribution_with_neutral_masks():
    graph, n = _two_parts()
    seeds = np.arange(10)
    dgs, neighbor = DGSSampler(graph, [5], feature_rate=1.0, epsilon=0.0, rule="split"), NeighborSampler(graph, [5])
    before, same = dgs.sample(seeds, np.random.default_rng(5)), neighbor.sample(seeds, np.random.default_rng(5))
    assert np.array_equal(before.layers[0].src, same.layers[0].src) and before.feature_columns is None
    dgs.set_masks(DGSMasks(np.ones(n), np.ones(16)))
    draws = 2000
    freq_dgs = _inclusion(dgs, seeds, draws, n)[10:]
    freq_neighbor = _inclusion(neighbor, seeds, draws, n)[10:]
    bound = 5 * np.sqrt(2 * 0.25 * 0.75 / draws)  # two independent estimates of 5/20 each
    assert np.all(np.abs(freq_dgs - freq_neighbor) < bound)
    assert np.all(np.abs(freq_dgs - 0.25) < bound)
    batch = dgs.sample(seeds, np.random.default_rng(0))
    assert np.array_equal(batch.feature_columns, np.arange(16))
    features = np.random.default_rng(0).random((n, 16)).astype(np.float32)
    assert torch.equal(batch.input_features(features), torch.from_numpy(features[batch.input_nodes]))
    # the thesis's rule keeps every local neighbour and draws the remote ones as uniform sampling does
    keep = DGSSampler(graph, [5], feature_rate=1.0, epsilon=0.0)
    keep.set_masks(DGSMasks(np.ones(n), np.ones(16)))
    freq_keep = _inclusion(keep, seeds, draws, n, at_most=8 + 5)[10:]
    local = graph.owner[10:] == 0
    assert np.all(freq_keep[local] == 1.0)
    assert np.all(np.abs(freq_keep[~local] - freq_neighbor[~local]) < bound)


@pytest.mark.parametrize("rule", ["keep-local", "split"])
@pytest.mark.parametrize("epsilon", [0.0, 0.2, 0.4])
def test_dgs_drops_remote_draws_in_proportion_to_epsilon(rule, epsilon):
    graph, n = _two_parts()
    seeds = np.arange(10)
    dgs = DGSSampler(graph, [5], epsilon=epsilon, rule=rule)
    dgs.set_masks(DGSMasks(np.ones(n), np.ones(20)))
    remote, rng = [], np.random.default_rng(3)
    for _ in range(400):
        layer = dgs.sample(seeds, rng).layers[0]
        chosen = layer.src[layer.edge_src]
        is_remote = graph.owner[chosen] == 1
        remote.append(np.count_nonzero(is_remote) / 10)
        local_per_seed = np.bincount(layer.edge_dst[~is_remote], minlength=10)
        if rule == "keep-local":  # all 8 local neighbours of every seed, every time
            assert np.array_equal(local_per_seed, np.full(10, 8))
        else:  # the total stays at the fanout
            assert np.array_equal(np.bincount(layer.edge_dst, minlength=10), np.full(10, 5))
    # uniform sampling expects 5 * 12/20 = 3 remote draws per seed; epsilon drops epsilon * 5 of them
    assert abs(np.mean(remote) - (3.0 - 5 * epsilon)) < 0.05


def test_dgs_shifts_draws_to_local_nodes_by_epsilon_and_follows_the_masks():
    graph, n = _two_parts()
    seeds = np.arange(10)
    node_prob = np.ones(n)
    node_prob[10:][np.arange(200) % 20 == 19] = 0.0  # one remote neighbour of each seed is ineligible
    feature_mask = np.linspace(0, 1, 20)
    dgs = DGSSampler(graph, [5], feature_rate=0.5, epsilon=0.2, rule="split")
    dgs.set_masks(DGSMasks(node_prob, feature_mask))
    remote_counts, rng = [], np.random.default_rng(2)
    for _ in range(400):
        batch = dgs.sample(seeds, rng)
        layer = batch.layers[0]
        assert np.array_equal(np.bincount(layer.edge_dst), np.full(10, 5))  # the total is unchanged
        chosen = layer.src[layer.edge_src]
        assert np.all(node_prob[chosen] > 0)
        remote_counts.append(np.count_nonzero(graph.owner[chosen] == 1) / 10)
    # uniform sampling expects 5 * 12/20 = 3 remote draws per seed; epsilon 0.2 moves 1 to local
    assert abs(np.mean(remote_counts) - 2.0) < 0.05
    # with nothing to draw (fanout -1), every neighbour stays but the ineligible remote ones
    everything = DGSSampler(graph, [-1])
    everything.set_masks(DGSMasks(node_prob, feature_mask))
    layer = everything.sample(seeds, rng).layers[0]
    assert layer.num_edges == 190 and np.all(node_prob[layer.src[layer.edge_src]] > 0)
    assert np.array_equal(batch.feature_columns, np.arange(10, 20))  # the top half by the mask
    features = np.ones((n, 20), dtype=np.float32)
    x = batch.input_features(features).numpy()
    remote = batch.remote_input
    assert remote.any() and np.all(x[~remote] == 1)
    assert np.all(x[remote][:, 10:] == 1) and np.all(x[remote][:, :10] == 0)
    assert batch.fetched_values(20) == int(remote.sum()) * 10


def test_cluster_batches_cover_the_local_nodes_once_with_induced_edges():
    graph = SamplingGraph.from_graph(load_graph("cora"))
    train = np.arange(0, graph.num_nodes, 3)
    sampler = ClusterSampler(graph, 2, train, num_clusters=12, clusters_per_batch=3, seed=0)
    batches = list(sampler.epoch(np.random.default_rng(0)))
    assert len(batches) == 4
    every = np.concatenate([b.layers[0].src for b in batches])
    assert np.array_equal(np.sort(every), np.arange(graph.num_nodes))
    edges = set(zip(graph.indices.tolist(), np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr)).tolist()))
    for batch in batches:
        nodes = batch.layers[0].src
        inside = np.isin(graph.indices, nodes) & np.isin(
            np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr)), nodes
        )
        assert batch.layers[0].num_edges == int(inside.sum())
        assert all(
            (int(u), int(v)) in edges for u, v in zip(nodes[batch.layers[0].edge_src], nodes[batch.layers[0].edge_dst])
        )
        assert np.array_equal(np.sort(batch.seeds), np.intersect1d(nodes, train))
        assert not batch.remote_input.any()


@pytest.fixture(scope="module")
def cora_one_part(tmp_path_factory):
    graph = load_graph("cora")
    assignment = np.zeros(graph.num_nodes, dtype=np.int64)
    out = tmp_path_factory.mktemp("one") / "set"
    write_partition_set(
        graph, assignment, 1, out, method="chunk", seed=0, seconds=0.0, metrics=partition_metrics(graph, assignment, 1)
    )
    return graph, load_partition_set(out)


def _full_graph_gradient(model: GNN, graph, pset) -> list[torch.Tensor]:
    """Full-graph training's loss (the trainer's: summed over training nodes, over their count)."""
    job = Job(World.alone(), pset, JobOptions(topology="localhost-cpu:1", plan="p2p"))
    executor = BarrierExecutor(job, job.wire(32))
    train = torch.from_numpy(graph.train_mask)
    logits = executor.forward(model)
    y = torch.from_numpy(graph.labels)
    loss = torch.nn.functional.cross_entropy(logits[train], y[train], reduction="sum") / int(train.sum())
    return torch.autograd.grad(loss, list(model.parameters()))


def _batch_gradient(model: GNN, graph, sampling: SamplingGraph, batch) -> list[torch.Tensor]:
    logits = forward_blocks(model, batch.input_features(graph.features), batch.blocks(sampling))
    loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(graph.labels[batch.seeds]))
    return torch.autograd.grad(loss, list(model.parameters()))


@pytest.mark.parametrize("kind", ["gcn", "sage", "gat"])
@pytest.mark.parametrize("sampler", ["neighbor", "dgs", "cluster"])
def test_one_batch_of_every_training_node_with_all_neighbours_gives_full_graph_gradients(kind, sampler, cora_one_part):
    graph, pset = cora_one_part
    sampling = SamplingGraph.from_partition(pset, 0)
    train = np.flatnonzero(graph.train_mask)
    torch.manual_seed(0)
    model = GNN(kind, graph.num_features, 16, 7, layers=2, heads=2, dropout=0.0)
    if sampler == "neighbor":
        batch = NeighborSampler(sampling, [-1, -1]).sample(train, np.random.default_rng(0))
    elif sampler == "dgs":  # with masks: every node is local on one part, so all neighbours stay
        dgs = DGSSampler(sampling, [-1, -1])
        dgs.set_masks(DGSMasks(np.ones(graph.num_nodes), np.ones(graph.num_features)))
        batch = dgs.sample(train, np.random.default_rng(0))
    else:
        batch = next(ClusterSampler(sampling, 2, train, num_clusters=1).epoch(np.random.default_rng(0)))
    ours = _batch_gradient(model, graph, sampling, batch)
    full = _full_graph_gradient(model, graph, pset)
    for a, b in zip(ours, full):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_partition_knows_local_and_remote(tmp_path):
    graph = load_graph("cora")
    assignment = (np.arange(graph.num_nodes) % 2).astype(np.int64)
    write_partition_set(
        graph,
        assignment,
        2,
        tmp_path / "set",
        method="chunk",
        seed=0,
        seconds=0.0,
        metrics=partition_metrics(graph, assignment, 2),
    )
    sampling = SamplingGraph.from_partition(load_partition_set(tmp_path / "set"), 1)
    assert np.array_equal(sampling.indptr, graph.indptr) and np.array_equal(
        sampling.local_nodes(), np.arange(1, graph.num_nodes, 2)
    )
    batch = NeighborSampler(sampling, [10, 10]).sample(np.array([1, 3, 5]), np.random.default_rng(0))
    assert np.array_equal(batch.remote_input, batch.input_nodes % 2 == 0)


def test_bad_sampler_input_fails_clearly():
    graph = SamplingGraph.from_graph(load_graph("cora"))
    with pytest.raises(SamplingError, match="one per layer"):
        parse_fanouts("10,5", layers=3)
    with pytest.raises(SamplingError, match="integers"):
        parse_fanouts("10,x")
    with pytest.raises(SamplingError, match=">= 1 or -1"):
        NeighborSampler(graph, [0])
    sampler = NeighborSampler(graph, [5])
    with pytest.raises(SamplingError, match="at least one seed"):
        sampler.sample(np.array([], dtype=np.int64), np.random.default_rng(0))
    with pytest.raises(SamplingError, match="distinct"):
        sampler.sample(np.array([1, 1]), np.random.default_rng(0))
    with pytest.raises(SamplingError, match="0..2707"):
        sampler.sample(np.array([5000]), np.random.default_rng(0))
    with pytest.raises(SamplingError, match="N_f"):
        DGSSampler(graph, [5], feature_rate=0.0)
    with pytest.raises(SamplingError, match="epsilon"):
        DGSSampler(graph, [5], epsilon=1.5)
    with pytest.raises(SamplingError, match="--dgs-rule must be one of keep-local, split"):
        DGSSampler(graph, [5], rule="all")
    with pytest.raises(SamplingError, match="clusters"):
        ClusterSampler(graph, 2, np.arange(10), num_clusters=0)
    with pytest.raises(SamplingError, match="layer size"):
        LADIESSampler(graph, [0])
