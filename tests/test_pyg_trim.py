"""``cg.sampled(model, loader, trim=True)``: each layer on the rows the next one reads gives the
seeds the whole-batch model's outputs, for every trimmable conv and with edge attributes; what it
cannot trim is refused when the model is wrapped, a layer called out of order at the call. And the
loader's batches, made a batch ahead in a thread, are the batches made on time; the rows of a
several-part set read by one ``locate``."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from commgraph.errors import BridgeError
from docblocks import python_block


@pytest.fixture
def graph():
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(0)
    n, e = 300, 3000
    return Data(
        x=torch.randn(n, 8, generator=g),
        edge_index=torch.randint(0, n, (2, e), generator=g),
        y=torch.randint(0, 3, (n,), generator=g),
        edge_attr=torch.randn(e, 8, generator=g),
    )


class Stack(torch.nn.Module):
    """Three layers with ReLU between them, as PyG's examples write a GNN."""

    def __init__(self, make):
        super().__init__()
        self.convs = torch.nn.ModuleList(make(a, b) for a, b in [(8, 16), (16, 16), (16, 3)])

    def forward(self, x, edge_index, edge_attr=None):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index) if edge_attr is None else conv(x, edge_index, edge_attr=edge_attr)
            if i < len(self.convs) - 1:
                x = x.relu()
        return x


def convs():
    from torch_geometric import nn

    return {
        "SAGEConv": nn.SAGEConv,
        "GraphConv": nn.GraphConv,
        "GATConv": lambda a, b: nn.GATConv(a, b, heads=2, concat=False),
        "GATv2Conv": lambda a, b: nn.GATv2Conv(a, b),
        "GINConv": lambda a, b: nn.GINConv(torch.nn.Linear(a, b)),
        "TransformerConv": nn.TransformerConv,
        "ResGatedGraphConv": nn.ResGatedGraphConv,
    }


@pytest.mark.parametrize("name", sorted(convs()))
def test_trimmed_layers_give_the_seeds_the_whole_batchs_outputs(alone, graph, name):
    import commgraph.pyg as cg

    loader = cg.NeighborLoader(graph, num_neighbors=[4, 3, 2], batch_size=16, shuffle=True)
    torch.manual_seed(0)
    model = Stack(convs()[name]).eval()
    trimmed = cg.sampled(model, loader, trim=True)
    for batch in loader:
        out = trimmed(batch.x, batch.edge_index)
        assert out.shape == (batch.batch_size, 3)  # the seeds' rows alone
        torch.testing.assert_close(out, model(batch.x, batch.edge_index)[: batch.batch_size], rtol=1e-5, atol=1e-6)


def test_edge_attributes_are_cut_with_their_edges(alone, graph):
    from torch_geometric.nn import GINEConv

    import commgraph.pyg as cg

    loader = cg.NeighborLoader(graph, num_neighbors=[4, 3, 2], batch_size=40)
    torch.manual_seed(0)
    model = Stack(lambda a, b: GINEConv(torch.nn.Linear(a, b), edge_dim=8)).eval()
    trimmed = cg.sampled(model, loader, trim=True)
    for batch in loader:
        whole = model(batch.x, batch.edge_index, batch.edge_attr)[: batch.batch_size]
        torch.testing.assert_close(trimmed(batch.x, batch.edge_index, batch.edge_attr), whole, rtol=1e-5, atol=1e-6)


def test_trimmed_training_steps_equal_the_whole_batchs(alone, graph):
    """The gradients reach the weights through the kept rows alone: two models from one seed, one
    trimmed, take the same Adam steps."""
    import torch.nn.functional as F
    from torch_geometric.nn import SAGEConv

    import commgraph.pyg as cg

    loader = cg.NeighborLoader(graph, num_neighbors=[4, 3, 2], batch_size=32, shuffle=True)
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(Stack(SAGEConv))
    whole, trimmed = models[0], cg.sampled(models[1], loader, trim=True)
    optimizers = [torch.optim.Adam(m.parameters(), lr=0.01) for m in models]
    for batch in loader:
        seeds = batch.y[: batch.batch_size]
        outs = [whole(batch.x, batch.edge_index)[: batch.batch_size], trimmed(batch.x, batch.edge_index)]
        for out, optimizer in zip(outs, optimizers):
            optimizer.zero_grad()
            F.cross_entropy(out, seeds).backward()
            optimizer.step()
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_another_input_runs_the_model_as_it_is(alone, graph):
    from torch_geometric.nn import SAGEConv

    import commgraph.pyg as cg

    loader = cg.NeighborLoader(graph, num_neighbors=[4, 3, 2], batch_size=16)
    model = Stack(SAGEConv).eval()
    trimmed = cg.sampled(model, loader, trim=True)
    assert torch.equal(trimmed(graph.x, graph.edge_index), model(graph.x, graph.edge_index))  # before a batch
    next(iter(loader))
    assert trimmed(graph.x, graph.edge_index).shape[0] == graph.num_nodes  # the whole graph, every row


def test_what_cannot_be_trimmed_is_refused_when_wrapped(alone, graph):
    from torch_geometric.nn import GCNConv, SAGEConv

    import commgraph.pyg as cg

    loader = cg.NeighborLoader(graph, num_neighbors=[4, 3, 2], batch_size=16)
    with pytest.raises(BridgeError, match=r"convs.0 \(GCNConv\).*reads its sources' degrees.*trim=False"):
        cg.sampled(Stack(GCNConv), loader, trim=True)
    two = cg.NeighborLoader(graph, num_neighbors=[4, 3], batch_size=16)
    with pytest.raises(BridgeError, match="the model has 3, the loader draws 2 hops"):
        cg.sampled(Stack(SAGEConv), two, trim=True)
    owner = cg.NeighborLoader(graph, num_neighbors=[4, 3, 2], batch_size=16, first_layer="owner")
    with pytest.raises(BridgeError, match="first_layer='owner'"):
        cg.sampled(Stack(SAGEConv), owner, trim=True)


class OutOfOrder(torch.nn.Module):
    """Two convs called other than once each on the previous one's output: ``repeat`` calls the
    first twice, else the second reads the batch's ``x`` again."""

    def __init__(self, repeat: bool):
        from torch_geometric.nn import SAGEConv

        super().__init__()
        self.repeat, self.first, self.second = repeat, SAGEConv(8, 8), SAGEConv(8, 3)

    def forward(self, x, edge_index):
        h = self.first(x, edge_index).relu()
        if self.repeat:
            return self.second(self.first(h, edge_index).relu(), edge_index)
        return self.second(x, edge_index)


@pytest.mark.parametrize(
    "repeat, message",
    [
        (True, r"SAGEConv was call 3 of a MessagePassing layer in one forward, on a batch of 2 hops"),
        (False, r"layer 1 \(SAGEConv\) got x of \d+ rows where the batch's \d+ within 1 hops were expected"),
    ],
)
def test_a_layer_called_out_of_order_is_named_at_the_call(alone, graph, repeat, message):
    import commgraph.pyg as cg

    loader = cg.NeighborLoader(graph, num_neighbors=[4, 3], batch_size=16)
    model = cg.sampled(OutOfOrder(repeat), loader, trim=True)
    batch = next(iter(loader))
    with pytest.raises(BridgeError, match=message):
        model(batch.x, batch.edge_index)
    assert model.trim.counts is None  # the failed call left no trim running


def test_batches_made_ahead_are_the_batches_made_on_time(alone, graph, monkeypatch):
    import commgraph.pyg as cg
    from commgraph.pyg.loader import NeighborLoader

    def epochs(loader):
        return [[(b.n_id.clone(), b.edge_index.clone(), b.x.clone()) for b in loader] for _ in range(2)]

    ahead = epochs(cg.NeighborLoader(graph, num_neighbors=[4, 3], batch_size=32, shuffle=True, seed=3))
    monkeypatch.setattr(NeighborLoader, "_local_batches", lambda self: False)
    on_time = epochs(cg.NeighborLoader(graph, num_neighbors=[4, 3], batch_size=32, shuffle=True, seed=3))
    assert len(ahead[0]) == len(on_time[0]) == 10
    for a_epoch, b_epoch in zip(ahead, on_time):
        for a, b in zip(a_epoch, b_epoch):
            assert all(torch.equal(u, v) for u, v in zip(a, b))


def test_made_ahead_keeps_two_alive_raises_in_the_caller_and_ends_its_thread():
    from commgraph.pyg.batching import made_ahead

    started = []

    def items():
        for i in range(5):
            started.append(i)
            yield i

    seen = []
    for item in made_ahead(items(), "test-ahead"):
        seen.append(item)
        assert len(started) <= item + 2  # the one in use and the next, no more
    assert seen == [0, 1, 2, 3, 4]

    def failing():
        yield 0
        raise ValueError("bad batch")

    with pytest.raises(ValueError, match="bad batch"):
        list(made_ahead(failing(), "test-ahead"))
    stopped = made_ahead(items(), "test-ahead")
    next(stopped)
    stopped.close()
    assert not any(t.name == "test-ahead" for t in threading.enumerate())


def test_rows_of_several_parts_are_read_by_one_locate(tmp_path):
    from commgraph.graph import Graph
    from commgraph.partition.store import write_partition_set

    n = 40
    indptr = np.arange(n + 1, dtype=np.int64)
    indices = (np.arange(n) + 1) % n
    features = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    graph = Graph(indptr, indices, features=features, name="ring")
    assignment = np.arange(n) % 3
    pset = write_partition_set(graph, assignment, 3, tmp_path / "set", method="random", seed=0, seconds=0.0, metrics={})
    ids = np.array([7, 0, 39, 7, 12, 5])
    places = pset.locate(ids)
    assert [held.part for held in places.parts] == [0, 1, 2]
    assert np.array_equal(pset.rows("features", ids, places), features[ids])
    assert np.array_equal(pset.rows("degree", ids, places), np.ones(ids.shape[0]))
    one = pset.locate(np.array([3, 9, 0]))  # all of part 0: read in one go
    assert [held.pick for held in one.parts] == [None]
    assert np.array_equal(pset.rows("features", np.array([3, 9, 0]), one), features[[3, 9, 0]])
    assert pset.rows("features", np.zeros(0, np.int64)).shape == (0, 3)


def test_the_pages_trimmed_block_trains_pygs_graphsage(alone):
    """docs/pyg.md's "Trimmed layers" block on Cora's part: PyG's ``GraphSAGE`` in DDP (a group of
    one), called as PyG's examples call it, gives the seeds' rows alone and learns."""
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    from torch_geometric.nn import GraphSAGE

    import commgraph.pyg as cg
    from commgraph.graph import load_graph
    from commgraph.graph.pyg import to_pyg

    block = python_block("pyg.md", "### Trimmed layers")
    names = {"cg": cg, "DDP": DistributedDataParallel, "GraphSAGE": GraphSAGE}
    names["part"] = cg.partition(to_pyg(load_graph("cora")))
    torch.manual_seed(0)
    exec(compile(block, "pyg.md", "exec"), names)
    model, loader = names["model"], names["loader"]
    assert model.module.trim is not None
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(3):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)
            assert out.shape[0] == batch.batch_size
            loss = F.cross_entropy(out[: batch.batch_size], batch.y[: batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
    assert losses[-1] < losses[0]


def test_a_link_batchs_endpoints_get_the_whole_batchs_outputs(alone, graph):
    """``cg.LinkNeighborLoader`` batches lead ``n_id`` with the label edges' endpoints: trimmed, the
    output is their rows, which ``edge_label_index`` indexes."""
    from torch_geometric.nn import SAGEConv

    import commgraph.pyg as cg

    loader = cg.LinkNeighborLoader(
        graph,
        num_neighbors=[3, 2],
        edge_label_index=graph.edge_index[:, :200],
        batch_size=32,
        neg_sampling_ratio=1.0,
        shuffle=True,
    )
    torch.manual_seed(0)
    model = Stack(SAGEConv)
    model.convs = model.convs[:2]
    model.eval()
    trimmed = cg.sampled(model, loader, trim=True)
    for batch in loader:
        out = trimmed(batch.x, batch.edge_index)
        assert out.shape[0] == batch.num_sampled_nodes[0]
        assert int(batch.edge_label_index.max()) < out.shape[0]
        whole = model(batch.x, batch.edge_index)[: out.shape[0]]
        torch.testing.assert_close(out, whole, rtol=1e-5, atol=1e-6)
