"""Built-in R-GCN (commgraph.nn.rgcn, ``commgraph train --model rgcn``): one layer's exact values on
a tiny graph (and PyG's ``RGCNConv`` on the same weights), losses at 2 and 4 workers equal to one
worker's, the memory estimate's per-type widths, and bad input refused in one line."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.nn import RGCNConv

import commgraph.nn.rgcn as rgcn
from commgraph.cli.train import check_trainable
from commgraph.errors import SamplingError, TrainingError
from commgraph.graph import HeteroGraph, Relation, load_graph
from commgraph.nn.rgcn import RelationBlock, RGCNLayer, embedding_rows, linear_argmax, linear_cross_entropy
from commgraph.partition import load_partition_set
from commgraph.partition.typed import make_typed_partition_set
from commgraph.plan.memory import JobShape, estimate_memory
from commgraph.sample.options import parse_fanouts
from commgraph.train import TrainConfig
from forked import launch_forked, run_commgraph

TESTS = Path(__file__).parent
PAGE = TESTS.parent / "docs" / "heterogeneous.md"
SPEC = "mag-shaped:scale=0.0005,seed=0"
RUN = dict(model="rgcn", epochs=4, dropout=0.0, hidden=8, bases=2, lr=0.05)


@pytest.fixture(scope="module")
def graph():
    return load_graph(SPEC)


@pytest.fixture(scope="module")
def typed_sets(graph, tmp_path_factory):
    root = tmp_path_factory.mktemp("rgcn-sets")
    for parts in (1, 2, 4):
        make_typed_partition_set(graph, parts, root / f"k{parts}", seed=0)
    return root


def _tiny() -> tuple[torch.Tensor, RelationBlock]:
    """Nodes 0, 1 (type a, owned) and 2 (type b, a halo row); relation 0 ``b -> a`` (2 -> 0,
    2 -> 1), relation 1 ``a -> a`` (1 -> 0). Destination rows: relation 0 and 1 both rows 0..1."""
    indptr = np.array([0, 2, 3])
    indices = np.array([1, 2, 2])  # node 0's in-edges: from 1 (relation 1), from 2 (relation 0); node 1's: from 2
    edge_type = np.array([1, 0, 0])
    x = torch.tensor([[1.0, 2.0], [3.0, -1.0], [0.5, 4.0]])
    return x, RelationBlock.from_csr(indptr, indices, edge_type, 3, [(0, 2), (0, 2)])


def test_one_layer_is_the_formula_by_hand():
    x, block = _tiny()
    layer = RGCNLayer(2, 1, num_relations=2, num_bases=1)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[[1.0], [2.0]]]))  # V_1 = [1, 2]^T
        layer.comp.copy_(torch.tensor([[2.0], [-1.0]]))  # W_0 = 2 V_1, W_1 = -V_1
        layer.root.copy_(torch.tensor([[1.0], [1.0]]))
        layer.bias.fill_(0.5)
    out = layer(x, x[:2], block)
    # node 0: root 1 + 2 = 3, bias 0.5; relation 0 mean over {2}: 2 * (0.5 + 8) = 17; relation 1 over {1}: -(3 - 2) = -1
    # node 1: root 3 - 1 = 2, bias 0.5; relation 0 over {2}: 17; relation 1: no edge
    assert out.flatten().tolist() == [3 + 0.5 + 17 - 1, 2 + 0.5 + 17]


def test_layer_and_its_gradients_equal_pyg_rgcnconv_on_the_same_weights():
    torch.manual_seed(0)
    n, relations = 30, 3
    edge_index = torch.randint(0, n, (2, 120))
    edge_type = torch.randint(0, relations, (120,))
    x = torch.randn(n, 5)
    pyg = RGCNConv(5, 4, relations, num_bases=2, aggr="mean")
    ours = RGCNLayer(5, 4, relations, num_bases=2)
    ours.load_state_dict({k: v for k, v in pyg.state_dict().items() if k in ("weight", "comp", "root", "bias")})
    order = torch.argsort(edge_index[1] * n + edge_index[0], stable=True)
    src, dst, kinds = edge_index[0][order], edge_index[1][order], edge_type[order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst.numpy(), minlength=n))])
    block = RelationBlock.from_csr(indptr, src.numpy(), kinds.numpy(), n, [(0, n)] * relations)
    x_ours, x_pyg = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = ours(x_ours, x_ours, block)
    torch.testing.assert_close(out, pyg(x_pyg, edge_index, edge_type), rtol=1e-5, atol=1e-6)
    (out**2).sum().backward()
    (pyg(x_pyg, edge_index, edge_type) ** 2).sum().backward()
    torch.testing.assert_close(x_ours.grad, x_pyg.grad, rtol=1e-5, atol=1e-5)
    for name in ("weight", "comp", "root", "bias"):
        torch.testing.assert_close(getattr(ours, name).grad, getattr(pyg, name).grad, rtol=1e-5, atol=1e-5)


def test_chunked_loss_and_predictions_equal_the_whole_logits(monkeypatch):
    monkeypatch.setattr(rgcn, "EVAL_CHUNK_BYTES", 4 * 4 * 3)  # 3 rows of 4 classes a chunk
    torch.manual_seed(0)
    n, relations, ranges = 30, 3, [(5, 20), (5, 20), (22, 30)]  # rows 0..4, 20, 21: the root term alone
    kinds = torch.randint(0, relations, (120,))
    starts, ends = (torch.tensor([r[i] for r in ranges])[kinds] for i in (0, 1))
    dst = starts + (torch.rand(120) * (ends - starts)).long()
    src = torch.randint(0, n, (120,))
    order = torch.argsort(dst * n + src, stable=True)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst[order].numpy(), minlength=n))])
    block = RelationBlock.from_csr(indptr, src[order].numpy(), kinds[order].numpy(), n, ranges)
    layer = RGCNLayer(5, 4, relations, num_bases=2)
    x = torch.randn(n, 5)
    rows = torch.tensor([0, 3, 4, 6, 7, 8, 9, 10, 14, 19, 20, 25, 26, 29])
    labels = torch.randint(0, 4, (n,))
    chunked_x, whole_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    chunked = linear_cross_entropy(layer.terms(chunked_x, chunked_x, block), rows, labels[rows])
    grads = torch.autograd.grad(chunked, [chunked_x, *layer.parameters()])
    logits = layer(whole_x, whole_x, block)
    whole = torch.nn.functional.cross_entropy(logits[rows], labels[rows], reduction="sum")
    torch.testing.assert_close(chunked, whole)
    for got, want in zip(grads, torch.autograd.grad(whole, [whole_x, *layer.parameters()]), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert torch.equal(linear_argmax(layer.terms(x, x, block)), logits.argmax(dim=1))
    none = linear_cross_entropy(
        layer.terms(whole_x, whole_x, block), rows[:0], labels[:0]
    )  # a part without training rows
    assert none.item() == 0 and not any(g.any() for g in torch.autograd.grad(none, [whole_x, *layer.parameters()]))


def test_embedding_rows_do_not_depend_on_who_draws_them():
    whole = embedding_rows(np.arange(70_000), 3, seed=1, node_type=2)
    some = np.array([5, 65_535, 65_536, 69_999])
    assert torch.equal(embedding_rows(some, 3, seed=1, node_type=2), whole[torch.from_numpy(some)])
    assert not torch.equal(embedding_rows(some, 3, seed=1, node_type=1), whole[torch.from_numpy(some)])


# every training paper a seed of the one step of each epoch, with all its neighbours: the full-graph loss
SAMPLED = dict(RUN, sampler="neighbor", fanouts=(-1, -1), batch_size=100_000)


def _losses(
    partdir: Path, workers: int, out: Path, monkeypatch, runs: dict, field: str = "loss"
) -> dict[str, np.ndarray]:
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "spec.json"
    spec.write_text(json.dumps({"partdir": str(partdir), "out": str(out), "runs": runs}))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    assert launch_forked([str(spec)], workers, grace=30, module="dist_driver") == 0
    return {name: np.load(out / f"{name}.npz")[field] for name in runs}


@pytest.mark.multiproc
@pytest.mark.slow
def test_losses_at_2_and_4_workers_equal_one_workers(typed_sets, tmp_path, monkeypatch):
    """Full-graph (R-GCN and HGT), and sampled at fanout -1 (whose one step an epoch is the
    full-graph step; DGS's draws too): the losses, and the embedding rows each worker owns, trained
    by the gradients its readers sent back."""
    hgt = dict(RUN, model="hgt", heads=2, bases=None)
    runs = {"rgcn": RUN, "sampled": SAMPLED, "dgs": dict(SAMPLED, sampler="dgs"), "hgt": hgt}
    above = dict(SAMPLED, fanouts=(1000, 1000))  # more than any node's neighbours over any relation: all of them
    single = _losses(typed_sets / "k1", 1, tmp_path / "k1", monkeypatch, {**runs, "above": above})
    assert single["rgcn"].shape == (RUN["epochs"],) and single["rgcn"][-1] < single["rgcn"][0]
    np.testing.assert_allclose(single["sampled"], single["rgcn"], rtol=1e-5)
    np.testing.assert_array_equal(single["above"], single["sampled"])
    np.testing.assert_allclose(single["dgs"], single["sampled"], rtol=1e-5)  # DGS at -1 draws every neighbour
    assert single["hgt"][-1] < single["hgt"][0]
    for workers in (2, 4):
        losses = _losses(typed_sets / f"k{workers}", workers, tmp_path / f"k{workers}", monkeypatch, runs)
        for name in runs:
            np.testing.assert_allclose(losses[name], single[name], rtol=1e-5)
    pset = load_partition_set(typed_sets / "k4", verify=False)
    typed = pset.manifest["typed"]
    owned = np.asarray(pset.part(0).owned)
    alone, rank0 = np.load(tmp_path / "k1" / "sampled.npz"), np.load(tmp_path / "k4" / "sampled.npz")
    for t, name in enumerate(typed["node_types"]):
        if typed["num_features"][name]:
            continue
        start, end = typed["offsets"][t : t + 2]
        mine = owned[(owned >= start) & (owned < end)] - start
        key = f"param:input.embeddings.{t}"
        np.testing.assert_allclose(rank0[key], alone[key][mine], rtol=1e-4, atol=1e-5)


@pytest.mark.multiproc
def test_dgs_sends_fewer_input_rows_than_uniform_draws(typed_sets, tmp_path, monkeypatch):
    """Two workers, fanout 3 per relation and hop (one relation's fanout named apart), epsilon
    0.3: the owner-computed input rows the workers send each other (``activation_bytes``, hidden
    wide, one per remote input row of a batch) are fewer with DGS's draws."""
    relations = load_partition_set(typed_sets / "k2", verify=False).manifest["typed"]["relations"]
    fanout = ";".join(f"{'__'.join(r)}={'2,2' if r[1] == 'cites' else '3,3'}" for r in relations)
    draws = dict(RUN, epochs=2, sampler="neighbor", fanouts=parse_fanouts(fanout), batch_size=64)
    runs = {"neighbor": draws, "dgs": dict(draws, sampler="dgs", epsilon=0.3)}
    sent = _losses(typed_sets / "k2", 2, tmp_path / "k2", monkeypatch, runs, "activation_bytes")
    assert 0 < sent["dgs"].sum() < 0.9 * sent["neighbor"].sum()


@pytest.mark.multiproc
def test_a_worker_whose_batches_run_out_still_serves_its_rows(graph, tmp_path, monkeypatch):
    """Three training papers, a seed a step: the worker with fewer has steps without a batch, in
    which it still answers the others' requests and their gradients (a missed exchange would hang
    the job)."""
    train = np.zeros_like(graph.train_mask)
    train[:3] = True
    few = dataclasses.replace(graph, train_mask=train)
    make_typed_partition_set(few, 2, tmp_path / "set", seed=0)
    pset = load_partition_set(tmp_path / "set", verify=False)
    assert sorted(int(np.count_nonzero(pset.part(k).train_mask)) for k in range(2)) in ([0, 3], [1, 2])
    run = dict(SAMPLED, fanouts=(3, 3), batch_size=1, epochs=2)
    losses = _losses(tmp_path / "set", 2, tmp_path / "out", monkeypatch, {"idle": run})["idle"]
    assert losses.shape == (2,) and np.isfinite(losses).all()


def test_memory_estimate_reads_each_types_width(typed_sets):
    pset = load_partition_set(typed_sets / "k2", verify=False)
    typed = pset.manifest["typed"]
    estimate = estimate_memory(pset, JobShape(2, 2, 16, 2, model="rgcn"))
    paper, author = typed["node_types"].index("paper"), typed["node_types"].index("author")
    owned = typed["owned"]
    assert estimate.worker["features"] == max(4 * 128 * o[paper] for o in owned)  # papers alone have features
    assert estimate.worker["embeddings"] == max(16 * 16 * sum(o) - 16 * 16 * o[paper] for o in owned)
    assert estimate.worker["embeddings"] >= 16 * 16 * owned[0][author]


def test_sampled_memory_estimate_holds_a_batch_and_the_relations(typed_sets):
    pset = load_partition_set(typed_sets / "k2", verify=False)
    full = estimate_memory(pset, JobShape(2, 2, 16, 2, model="rgcn"))
    sampled = estimate_memory(pset, JobShape(2, 2, 16, 2, "neighbor", 64, (5, 5), model="rgcn"))
    nodes, edges = pset.manifest["typed"]["offsets"][-1], pset.manifest["graph"]["num_edges"]
    assert sampled.worker["structure"] == full.worker["structure"] + 16 * edges + 16 * nodes
    assert 0 < sampled.worker["evaluation"] < full.worker["tables"]  # the full-graph pass without autograd
    assert 0 < sampled.worker["tables"]
    more = estimate_memory(pset, JobShape(2, 2, 16, 2, "neighbor", 256, (10, 10), model="rgcn"))
    assert more.worker["tables"] > sampled.worker["tables"]


def test_bad_bases_are_refused():
    with pytest.raises(TrainingError, match="^bases is rgcn's"):
        TrainConfig.build(model="rgcn", bases=0)
    with pytest.raises(TrainingError, match="^bases is rgcn's"):
        TrainConfig.build(model="sage", bases=2)
    with pytest.raises(TrainingError, match="--bases >= 1"):
        RGCNLayer(4, 4, 3, num_bases=0)


def test_what_rgcn_does_not_do_is_refused():
    with pytest.raises(TrainingError, match="drop sampler ladies"):
        TrainConfig.build(model="rgcn", sampler="ladies")
    with pytest.raises(TrainingError, match="drop structure partitioned"):
        TrainConfig.build(model="rgcn", sampler="neighbor", structure="partitioned")
    with pytest.raises(SamplingError, match="give one per layer"):
        TrainConfig.build(model="rgcn", sampler="neighbor", fanouts=(25, 20, 10))
    with pytest.raises(TrainingError, match="drop exchange replicate"):
        TrainConfig.build(model="rgcn", exchange="replicate")


def test_graphs_rgcn_cannot_train_and_models_that_cannot_train_a_typed_graph_are_refused(graph):
    unlabelled = HeteroGraph(
        {"user": 3, "item": 2}, {("user", "rates", "item"): Relation.from_edges([0, 1], [1, 0], 2)}
    )
    with pytest.raises(TrainingError, match="no labelled target node type"):
        check_trainable("rgcn", "users", unlabelled)
    with pytest.raises(TrainingError, match="train it with --model rgcn"):
        check_trainable("sage", SPEC, graph)
    with pytest.raises(TrainingError, match="has one node type"):
        check_trainable("rgcn", "cora", load_graph("cora"))


@pytest.mark.multiproc
def test_the_docs_block_runs(tmp_path, monkeypatch):
    """docs/heterogeneous.md's "Train R-GCN": its commands run as written, and the model learns,
    full-graph and sampled (the DGS block too, a plain ``bash`` block so that test_docs's page
    run stays within its time)."""
    section = PAGE.read_text().split("## Train R-GCN", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```bash(?: runnable)?\n(.*?)^```$", section, re.S | re.M)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    results = [run_commgraph(line.split()[1:]) for line in "".join(blocks).splitlines()]
    assert all(result.returncode == 0 for result in results), results[-1].stderr[-2000:]
    assert "memory estimate" in results[0].stdout
    for trained in results[1:]:  # full-graph, then sampled
        accuracy = float(re.search(r"test accuracy ([\d.]+)", trained.stdout).group(1))
        assert accuracy > 0.3  # 349 classes: chance is 0.003
