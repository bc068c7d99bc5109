"""Models on a partition's blocks compute exactly what PyG computes on the whole graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.nn import GATConv, GCNConv

from commgraph.errors import TrainingError
from commgraph.graph import from_edges, load_graph
from commgraph.nn import GNN, Block
from commgraph.nn import model as model_module
from commgraph.nn.dropout import dropout, relu_dropout
from commgraph.partition import load_partition_set, partition_metrics, write_partition_set
from commgraph.runtime import World
from commgraph.runtime.job import Job, JobOptions
from commgraph.train import schedule
from commgraph.train.executor import BarrierExecutor, ReplicateExecutor, row_block


@pytest.fixture(scope="module", params=["cora", "cora with self loops"])
def cora_whole(request, tmp_path_factory):
    graph = load_graph("cora")
    if request.param != "cora":  # a loop on every third node: GCN and GAT must keep one, not add another
        src, dst = graph.edge_list()
        loops = np.arange(0, graph.num_nodes, 3)
        graph = from_edges(
            np.concatenate([src, loops]),
            np.concatenate([dst, loops]),
            graph.num_nodes,
            symmetrize=False,
            self_loops=True,
            features=graph.features,
        )
        assert graph.stats()["self_loops"] == loops.shape[0]
    assignment = np.zeros(graph.num_nodes, dtype=np.int64)
    out = tmp_path_factory.mktemp("one") / "set"
    write_partition_set(
        graph, assignment, 1, out, method="chunk", seed=0, seconds=0.0, metrics=partition_metrics(graph, assignment, 1)
    )
    return graph, load_partition_set(out)


def _reference(model: GNN, x: torch.Tensor, edge_index: torch.Tensor) -> tuple[torch.Tensor, list]:
    """The same weights applied by PyG's own layers (or by the formula) to the whole graph, and
    per layer the module holding the weights used (a copy for GCN and GAT)."""
    h, used = model.encode(x), []
    for index, layer in enumerate(model.convs):
        if model.kind == "gcn":
            conv = GCNConv(layer.conv.in_channels, layer.conv.out_channels)  # its own normalisation
            conv.load_state_dict(layer.conv.state_dict())
            out = conv(h, edge_index)
            used.append(conv)
        elif model.kind == "gat":
            conv = GATConv(
                layer.conv.in_channels, layer.conv.out_channels, heads=layer.conv.heads, concat=layer.conv.concat
            )  # adds self loops itself
            conv.load_state_dict(layer.conv.state_dict())
            out = conv(h, edge_index)
            used.append(conv)
        elif model.kind == "commnet":
            n = h.shape[0]
            adjacency = torch.zeros(n, n)
            adjacency[edge_index[1], edge_index[0]] = 1
            mean = adjacency @ h / adjacency.sum(1, keepdim=True).clamp(min=1)
            out = torch.tanh(layer.self_map(h) + layer.comm_map(mean))
            used.append(layer)
        else:
            out = layer.conv(h, edge_index)
            used.append(layer.conv)
        if index < model.num_layers - 1 and model.kind != "commnet":
            out = torch.nn.functional.elu(out) if model.kind == "gat" else torch.relu(out)
        h = out
    return model.decode(h), used


@pytest.mark.parametrize("executor_class", [BarrierExecutor, ReplicateExecutor])
@pytest.mark.parametrize("kind", ["gcn", "sage", "gat", "gin", "commnet"])
def test_block_model_equals_pyg_on_the_whole_graph(kind, executor_class, cora_whole):
    graph, pset = cora_whole
    torch.manual_seed(0)
    model = GNN(kind, graph.features.shape[1], 8, 7, layers=2, heads=2, dropout=0.0).eval()
    job = Job(World.alone(), pset, JobOptions(topology="localhost-cpu:1", plan="p2p"))
    # one part: the plan moves nothing
    executor = ReplicateExecutor(job, 2) if executor_class is ReplicateExecutor else executor_class(job, job.wire(32))
    edge_index = torch.from_numpy(
        np.stack([graph.indices, np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))]).astype(np.int64)
    )
    ours = executor.forward(model)
    theirs, used = _reference(model, torch.from_numpy(graph.features), edge_index)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    # and the same gradients: the sparse aggregation's backward is the edge list's
    weight = torch.randn(ours.shape, generator=torch.Generator().manual_seed(1))
    mine = [layer if kind == "commnet" else layer.conv for layer in model.convs]
    grads = [
        torch.autograd.grad((out * weight).sum(), [p for m in modules for p in m.parameters()])
        for out, modules in ((ours, mine), (theirs, used))
    ]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_bad_model_options():
    with pytest.raises(TrainingError, match="unknown model 'gnn'"):
        GNN("gnn", 4, 4, 2)
    with pytest.raises(TrainingError, match="need layers >= 1"):
        GNN("gcn", 4, 4, 2, layers=0)


def test_priority_order_puts_boundary_nodes_first_in_bfs_order():
    # a path 0-1-2-3-4-5 owned, node 5 also hears from halo row 6; node 0 is sent to a peer
    edges = [(a, b) for a in range(5) for b in (a + 1,)] + [(b, a) for a in range(5) for b in (a + 1,)]
    edges.append((6, 5))
    dst = np.array([d for _, d in edges])
    src = np.array([s for s, _ in edges])
    order_by_dst = np.argsort(dst, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=6))])
    indices = src[order_by_dst]
    order, boundary = schedule.priority_order(indptr, indices, 6, np.array([0]))
    assert boundary == 2 and set(order[:2].tolist()) == {0, 5}
    assert sorted(order.tolist()) == list(range(6))
    interior = order[2:].tolist()
    assert interior in ([1, 2, 3, 4], [4, 3, 2, 1])  # BFS along the path
    assert schedule.bins(boundary, 6, 3).tolist() == [0, 2, 5, 6]  # boundary and interior apart
    assert schedule.bins(boundary, 6, 100).tolist() == [0, 2, 6]


def test_relabel_renumbers_owned_rows_and_columns_and_bins_are_ranges():
    indptr = np.array([0, 2, 3, 5])
    indices = np.array([1, 3, 0, 0, 4])  # rows 0..2 owned, 3..4 halo
    new_indptr, new_indices = schedule.relabel(indptr, indices, 3, np.array([2, 0, 1]))
    assert new_indptr.tolist() == [0, 2, 4, 5]
    assert new_indices.tolist() == [1, 4, 2, 3, 1]  # old row 2 first; owned columns renumbered, halo kept
    block = row_block(new_indptr, new_indices, 1, 3, 5, torch.ones(5), "cpu")
    assert block.dst_start == 1 and block.num_dst == 2 and block.edge_index is None
    assert block.csr[0].dtype == torch.int32 and block.csr[1].dtype == torch.int32  # held once, narrow
    assert block.edges().tolist() == [[2, 3, 1], [0, 0, 1]]


def test_bin_size_from_memory_halves_it():
    assert schedule.bin_size_for_memory(1 << 30, [16, 16], mean_degree=2.0) == (1 << 29) // (4 * 16 * 4)


def test_dropout_keeps_one_minus_p_scaled_and_passes_gradients_through_the_mask():
    x = torch.full((1000, 1000), 2.0, requires_grad=True)
    torch.manual_seed(5)
    out = dropout(x, 0.3, training=True)
    kept = out != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.005  # 1e6 draws: the std is 0.00046
    assert torch.equal(out[kept], torch.full((int(kept.sum()),), 2.0 / 0.7))
    out.sum().backward()
    assert torch.equal(x.grad, kept.float() / 0.7)
    torch.manual_seed(5)
    assert torch.equal(dropout(x, 0.3, training=True), out)  # the seed decides the mask
    assert dropout(x, 0.3, training=False) is x and dropout(x, 0.0, training=True) is x


@pytest.mark.parametrize("kind", ["gcn", "sage", "gat"])
def test_evaluation_in_chunks_of_destinations_equals_the_whole_pass(kind, cora_whole, monkeypatch):
    """An evaluation computes a layer in chunks of destinations (bounded scratch); chunks of about
    50 rows give the whole pass's logits."""
    graph, pset = cora_whole
    torch.manual_seed(0)
    model = GNN(kind, graph.features.shape[1], 8, 7, layers=3, heads=2, dropout=0.5).eval()
    job = Job(World.alone(), pset, JobOptions(topology="localhost-cpu:1", plan="p2p"))
    executor = BarrierExecutor(job, job.wire(32))
    with torch.no_grad():
        whole = executor.forward(model)
        chunks = []
        monkeypatch.setattr(model_module, "EVAL_CHUNK_BYTES", 4 * graph.features.shape[1] * 50)
        monkeypatch.setattr(Block, "rows", _spy(Block.rows, chunks))
        chunked = executor.forward(model)
    assert len(chunks) >= graph.num_nodes // 50  # layer 0 (1,433 wide) in chunks of at most 50 destinations
    assert max(end - start for start, end in chunks) <= 50
    torch.testing.assert_close(chunked, whole, atol=1e-5, rtol=1e-5)
    # training (autograd on) computes a block whole
    chunks.clear()
    model.train()
    executor.forward(model)
    assert chunks == []


def _spy(method, calls: list):
    def spied(block, start, end):
        calls.append((start, end))
        return method(block, start, end)

    return spied


def test_relu_dropout_gives_the_compositions_values_and_gradients_bit_for_bit():
    x = torch.randn(300, 200, generator=torch.Generator().manual_seed(1)).requires_grad_()
    grad = torch.randn(300, 200, generator=torch.Generator().manual_seed(2))
    torch.manual_seed(7)
    fused = relu_dropout(x, 0.4, training=True)
    (fused_grad,) = torch.autograd.grad(fused, x, grad)
    torch.manual_seed(7)
    composed = dropout(torch.relu(x), 0.4, training=True)
    (composed_grad,) = torch.autograd.grad(composed, x, grad)
    assert torch.equal(fused, composed) and torch.equal(fused_grad, composed_grad)
    assert 0 < int((fused != 0).sum()) < int((x > 0).sum())  # some positive entries dropped, some kept
    assert torch.equal(relu_dropout(x, 0.4, training=False), torch.relu(x))
