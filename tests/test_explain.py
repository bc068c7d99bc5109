"""DGS's explainer: the explanation graph, PyG's GNNExplainer's masks, and the CPU thread that
publishes them without making training wait."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from commgraph.errors import SamplingError
from commgraph.graph import load_graph
from commgraph.nn import GNN
from commgraph.partition import load_partition_set, partition_metrics, write_partition_set
from commgraph.partition.methods import partition_graph
from commgraph.sample import DGSSampler, NeighborSampler, SamplingGraph
from commgraph.sample.explain import (
    DGSExplainer,
    ExplainerOptions,
    ExplanationGraph,
    ExplanationPlan,
    OnlineExplainer,
    WorkerExplainer,
)


@pytest.fixture(scope="module")
def cora_part(tmp_path_factory):
    graph = load_graph("cora")
    assignment, _ = partition_graph(graph, 4, "metis", seed=0)
    out = tmp_path_factory.mktemp("four") / "set"
    write_partition_set(
        graph, assignment, 4, out, method="metis", seed=0, seconds=0.0, metrics=partition_metrics(graph, assignment, 4)
    )
    pset = load_partition_set(out)
    sampling = SamplingGraph.from_partition(pset, 1)
    return graph, sampling, ExplanationGraph.build(sampling, lambda ids: pset.rows("features", ids), layers=2)


def test_explanation_graph_pools_the_local_nodes_and_links_every_remote_node(cora_part):
    graph, sampling, explanation = cora_part
    owned = sampling.local_nodes()
    # the remote nodes of the 2-hop in-neighbourhood of the owned nodes
    reach = NeighborSampler(sampling, [-1, -1]).sample(owned, np.random.default_rng(0)).input_nodes
    expected = np.sort(reach[sampling.owner[reach] != 1])
    assert np.array_equal(np.sort(explanation.remote), expected) and expected.size > 0
    m = expected.shape[0]
    torch.testing.assert_close(explanation.x[0], torch.from_numpy(graph.features[owned].mean(0)))
    torch.testing.assert_close(explanation.x[1:], torch.from_numpy(graph.features[explanation.remote]))
    edges = set(map(tuple, explanation.edge_index.t().tolist()))
    assert edges == {(0, 0)} | {(i, 0) for i in range(1, m + 1)} | {(0, i) for i in range(1, m + 1)}
    assert explanation.edge_index.shape[1] == 2 * m + 1


def test_a_large_neighbourhood_is_explained_on_a_bounded_sample(cora_part):
    """Above ``nodes`` reached nodes the star links a uniform sample of the remote nodes, the
    others are left unexplained (and take the explained ones' mean probability), and the class
    is predicted on ``num_targets`` owned nodes drawn with the training fanouts."""
    graph, sampling, whole = cora_part
    plan = ExplanationPlan.draw(sampling, 2, [3, 2], nodes=50, num_targets=4)
    every = np.sort(np.concatenate([plan.remote, plan.unexplained]))
    assert np.array_equal(every, np.sort(whole.remote))  # the same reach, split in two
    assert plan.remote.shape == (50,) and np.all(np.diff(plan.remote) > 0)
    assert plan.unexplained.shape[0] == whole.remote.shape[0] - 50
    seeds = plan.targets.seeds
    assert seeds.shape == (4,) and np.all(sampling.owner[seeds] == 1)
    assert plan.targets.num_sampled_edges <= 4 * 3 + 4 * 3 * 2  # at most the fanouts' draws
    again = ExplanationPlan.draw(sampling, 2, [3, 2], nodes=50, num_targets=4)
    assert np.array_equal(again.remote, plan.remote) and np.array_equal(again.targets.seeds, seeds)
    rows = lambda ids: graph.features[ids]  # noqa: E731
    pooled = torch.from_numpy(graph.features[plan.owned].mean(0))
    explanation = ExplanationGraph.from_plan(sampling, plan, rows, pooled)
    assert explanation.x.shape == (51, graph.num_features)
    torch.testing.assert_close(explanation.x[1:], torch.from_numpy(graph.features[plan.remote]))
    torch.manual_seed(0)
    model = GNN("sage", graph.num_features, 16, 7, dropout=0.0)
    masks = (
        DGSExplainer(sampling, explanation, model, ExplainerOptions(epochs=3, loss_threshold=0.0))
        .explain(model.state_dict())
        .masks
    )
    explained = masks.node_prob[plan.remote]
    assert np.all(explained > 0) and np.unique(explained).shape[0] > 1
    np.testing.assert_allclose(masks.node_prob[plan.unexplained], explained.mean(), rtol=1e-6)
    outside = np.ones(graph.num_nodes, dtype=bool)
    outside[every] = False
    assert np.all(masks.node_prob[outside] == 0)


@pytest.mark.slow
def test_one_explainer_learns_node_and_feature_masks_and_honours_epochs_and_threshold(cora_part):
    graph, sampling, explanation = cora_part
    torch.manual_seed(0)
    model = GNN("sage", graph.num_features, 16, 7, dropout=0.0)
    explainer = DGSExplainer(sampling, explanation, model, ExplainerOptions(epochs=5, loss_threshold=0.0))
    result = explainer.explain(model.state_dict(), iteration=7)
    masks = result.masks
    assert masks.iteration == 7 and result.epochs == 5 and result.seconds > 0 and result.cpu_seconds > 0
    assert masks.node_prob.shape == (graph.num_nodes,) and masks.feature_mask.shape == (graph.num_features,)
    remote = np.zeros(graph.num_nodes, dtype=bool)
    remote[explanation.remote] = True
    assert np.all(masks.node_prob[~remote] == 0)
    assert np.all((masks.node_prob[remote] > 0) & (masks.node_prob[remote] < 1))
    assert np.all((masks.feature_mask >= 0) & (masks.feature_mask <= 1))
    assert np.unique(masks.node_prob[remote]).shape[0] > 1  # learnt, not constant
    assert np.unique(masks.feature_mask).shape[0] > 1
    # the same snapshot gives the same masks; more epochs move them further from the start
    again = explainer.explain(model.state_dict(), iteration=7).masks
    assert np.array_equal(again.node_prob, masks.node_prob) and np.array_equal(again.feature_mask, masks.feature_mask)
    longer = DGSExplainer(sampling, explanation, model, ExplainerOptions(epochs=20, loss_threshold=0.0))
    assert longer.explain(model.state_dict(), iteration=7).loss < result.loss
    # the loss threshold L stops GNNExplainer at the first epoch whose loss is at most L
    early = DGSExplainer(sampling, explanation, model, ExplainerOptions(epochs=50, loss_threshold=1e9))
    assert early.explain(model.state_dict()).epochs == 1
    # and the masks drive DGS's sampler
    dgs = DGSSampler(sampling, [5, 5])
    dgs.set_masks(masks)
    batch = dgs.sample(sampling.local_nodes()[:64], np.random.default_rng(0))
    assert batch.feature_columns.shape[0] == int(np.ceil(0.85 * graph.num_features))


class _HeldExplainer(DGSExplainer):
    """Explains only once the file ``release`` exists (the explainer process imports this class)."""

    release: Path

    def explain(self, state, iteration=0):
        deadline = time.monotonic() + 60
        while not self.release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return super().explain(state, iteration)


class _BrokenExplainer(DGSExplainer):
    def explain(self, state, iteration=0):
        raise RuntimeError("out of memory")


def _wait_for(condition, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.multiproc
def test_online_explainer_explains_the_lowest_loss_snapshot_and_never_blocks(cora_part, tmp_path):
    graph, sampling, explanation = cora_part
    torch.manual_seed(0)
    model = GNN("sage", graph.num_features, 16, 7, dropout=0.0)
    explainer = _HeldExplainer(sampling, explanation, model, ExplainerOptions(period=3, epochs=3, loss_threshold=0.0))
    explainer.release = tmp_path / "release"
    dgs = DGSSampler(sampling, [5, 5])
    online = OnlineExplainer(explainer, dgs.set_masks)
    losses = [5.0, 2.0, 3.0, 4.0, 1.0, 6.0, 9.0, 8.0, 7.0]
    started = time.perf_counter()
    for iteration, loss in enumerate(losses, start=1):
        with torch.no_grad():
            model.convs[0].conv.lin_l.weight.add_(1.0)  # a different model at every iteration
        online.observe(model, loss, iteration)
    assert time.perf_counter() - started < 5  # the explanation is held up, training is not
    assert online.skipped == 2 and dgs.masks is None  # windows 2 and 3 came while window 1 was busy
    if sys.platform == "linux":  # the explainer takes only the cycles training leaves
        _wait_for(lambda: os.sched_getscheduler(online._process.pid) == os.SCHED_IDLE)
        assert os.sched_getscheduler(0) != os.SCHED_IDLE
    explainer.release.touch()
    _wait_for(lambda: dgs.masks is not None)
    assert dgs.masks.iteration == 2 and len(online.rounds) == 1  # window 1's lowest loss
    online.close()
    assert not online._process.is_alive()


def test_the_worker_explainer_explains_each_window_s_lowest_loss_snapshot_at_once(cora_part):
    graph, sampling, explanation = cora_part
    torch.manual_seed(0)
    model = GNN("sage", graph.num_features, 16, 7, dropout=0.0)
    explainer = DGSExplainer(sampling, explanation, model, ExplainerOptions(period=3, epochs=2, loss_threshold=0.0))
    dgs = DGSSampler(sampling, [5, 5])
    inline = WorkerExplainer(explainer, dgs.set_masks)
    assert inline.wait_for_masks(model, 0, timeout=1.0) > 0 and dgs.masks.iteration == 0
    for iteration, loss in enumerate([5.0, 2.0, 3.0, 4.0, 1.0, 6.0], start=1):
        inline.observe(model, loss, iteration)
        if iteration == 3:  # window 1 ends: explained before the next step, its lowest loss at step 2
            assert dgs.masks.iteration == 2 and len(inline.rounds) == 2
    assert dgs.masks.iteration == 5 and len(inline.rounds) == 3 and inline.skipped == 0
    assert inline.wait_for_masks(model, 6, timeout=1.0) < 0.5 and len(inline.rounds) == 3  # masks exist: no wait
    broken = WorkerExplainer(_BrokenExplainer(sampling, explanation, model, ExplainerOptions(period=1)), dgs.set_masks)
    with pytest.raises(SamplingError, match="explainer failed in the worker.*out of memory"):
        broken.observe(model, 1.0, 1)


@pytest.mark.multiproc
def test_explainer_errors_reach_training(cora_part):
    graph, sampling, explanation = cora_part
    model = GNN("sage", graph.num_features, 16, 7)
    online = OnlineExplainer(
        _BrokenExplainer(sampling, explanation, model, ExplainerOptions(period=1, epochs=1)), lambda masks: None
    )
    online.observe(model, 1.0, 1)
    _wait_for(lambda: online._error is not None)
    with pytest.raises(SamplingError, match="explainer failed.*out of memory"):
        online.observe(model, 1.0, 2)
    with pytest.raises(SamplingError, match="explainer failed.*out of memory"):
        online.close()
    with pytest.raises(SamplingError, match=r"period \(T_ex\) must be >= 1"):
        ExplainerOptions(period=0)
    with pytest.raises(SamplingError, match="loss_threshold must be >= 0"):
        ExplainerOptions(loss_threshold=-1)
