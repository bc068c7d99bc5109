"""``commgraph.pyg.NeighborLoader`` rows through the feature fetch: the owner-computed first layer
(``first_layer="owner"`` with ``cg.sampled``) trains as the fetched features do and sends a hidden
row per network row; a job across emulated machines reads its machine's rows from their files,
fetches the other machine's, and trains as one machine does (``pyg_fetch_driver``)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch

from commgraph.errors import BridgeError
from docblocks import python_block

TESTS = Path(__file__).parent
FEATURES, HIDDEN = 1433, 8  # Cora's width; pyg_fetch_driver's hidden width


def _ranks(tmp_path: Path, monkeypatch, workers: int, *argv: str) -> list[dict]:
    from forked import launch_forked

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    code = launch_forked([str(tmp_path), *argv], workers, grace=60, module="pyg_fetch_driver", threads_per_worker=1)
    assert code == 0
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(workers)]


@pytest.mark.multiproc
@pytest.mark.slow
def test_owners_first_layer_trains_as_fetched_features_and_sends_hidden_rows(tmp_path, monkeypatch):
    """2 ranks, every remote row over the network, fanout -1, dropout 0: the losses of GCN and
    GraphSAGE with the owners' first layer equal the fetched features' within 1e-5 at every step;
    GCN's owners send one hidden row per feature row the other run fetched (no root term),
    GraphSAGE's one per row and a root row for each remote destination of layer 0, and their
    gradients come back, the same bytes. A batch's x changed before the first layer is refused."""
    ranks = _ranks(tmp_path, monkeypatch, 2, "owner")
    for result in ranks:
        for model in ("gcn", "sage"):
            features, owner = result[f"{model}/features"], result[f"{model}/owner"]
            assert len(features["losses"]) == len(owner["losses"]) >= 4
            assert owner["losses"] == pytest.approx(features["losses"], rel=1e-5, abs=1e-6)
            assert owner["losses"][-1] < owner["losses"][0]
            fetched = features["bytes"]["features"]
            assert fetched > 0 and owner["bytes"].get("features", 0) == 0
            assert features["bytes"].get("activations", 0) == 0
            rows = fetched // (4 * FEATURES)
            assert rows * 4 * FEATURES == fetched
            if model == "gcn":
                assert owner["bytes"]["activations"] == rows * 4 * HIDDEN
            else:
                assert rows * 4 * HIDDEN < owner["bytes"]["activations"] < 2 * rows * 4 * HIDDEN
    assert ranks[0]["gcn/owner"]["losses"] == pytest.approx(ranks[1]["gcn/owner"]["losses"], abs=0)
    assert all("did not reach the model's first MessagePassing layer" in r["refused"] for r in ranks)
    for run in ("gcn/owner", "sage/owner"):  # each row's gradient goes back to the rank that sent it
        sent = [sum(r[run]["bytes"][label] for r in ranks) for label in ("activations", "activation_grads")]
        assert sent[0] == sent[1] > 0


@pytest.mark.multiproc
@pytest.mark.slow
def test_two_machines_of_two_train_like_one_machine_of_four(tmp_path, monkeypatch):
    """4 ranks from a set: on one machine every row is read from the set's mapped files; as 2
    machines of 2 (torchrun's GROUP_RANK), the peer's rows are read from its files and the other
    machine's rows fetched from their owners. Every batch's x, y and masks are the graph's rows
    either way, and the losses are the same; y and the 3 masks cross machines as 16 bytes a row,
    asked by the features' request."""
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
    one = _ranks(tmp_path / "one", monkeypatch, 4, "machines", "1")
    two = _ranks(tmp_path / "two", monkeypatch, 4, "machines", "2")
    for a, b in zip(one, two):
        assert not a["machine"] and b["machine"]
        assert all(a["exact"]) and all(b["exact"]) and len(a["exact"]) == len(b["exact"]) > 0
        assert b["losses"] == pytest.approx(a["losses"], rel=1e-6, abs=1e-7)
        assert a["bytes"] == {}  # no row went through the fetch
        assert b["bytes"]["features"] > 0 and b["bytes"]["local"] > 0 and b["bytes"]["requests"] > 0
        assert b["bytes"]["labels"] * 4 * FEATURES == b["bytes"]["features"] * 16
        assert b["traffic"] == sum(v for label, v in b["bytes"].items() if label != "local")  # the same counts, typed
        assert a["structure"] == "replicated" and b["structure"] == "partitioned"  # the default for machines
    assert {r["global"] for r in two} == {sum(r["traffic"] for r in two)} and one[0]["global"] == 0


@pytest.mark.multiproc
@pytest.mark.slow
def test_partitioned_structure_makes_the_whole_structures_batches(tmp_path, monkeypatch):
    """2 machines of 2 ranks, fanouts -1 and 4 with the same seed: hops drawn from each machine's
    parts (the default across machines), other machines' nodes at their owners, give every batch's
    n_id, edge_index and x, and every loss, of the run on the set's whole structure/; no rank maps
    the whole CSR (the hops through the other machine's nodes are its sampling bytes), and every
    batch's x, y and masks are the graph's rows. Under a memory budget, each rank's rows read
    through the feature cache (read ahead a batch), the batches and losses are the same bit for bit,
    and the cache both served and missed rows."""
    ranks = _ranks(tmp_path, monkeypatch, 4, "structure", "2")
    for result in ranks:
        for fanout in (-1, 4):
            whole, parts = result[f"{fanout}/replicated"], result[f"{fanout}/None"]
            assert parts["structure"] == "partitioned" and whole["structure"] == "replicated"
            assert parts["mapped"] == ["degree", "owner"] and "indices" in whole["mapped"]
            assert len(parts["batches"]) == len(whole["batches"]) > 0
            assert parts["batches"] == whole["batches"]
            assert parts["losses"] == whole["losses"]
            assert all(parts["exact"]) and all(whole["exact"])
            assert parts["bytes"]["labels"] == whole["bytes"]["labels"] > 0
            assert parts["bytes"]["sampling"] > 0 and "sampling" not in whole["bytes"]  # hops asked of owners
        capped, plain = result["4/budget"], result["4/None"]  # a part's rows through the feature cache
        assert capped["losses"] == plain["losses"] and capped["batches"] == plain["batches"]
        assert capped["cache"]["hits"] > 0 and capped["cache"]["misses"] > 0 and plain["cache"] is None


def test_one_rank_owner_loader_runs_the_model_as_it_is(bridge_alone, tmp_path, monkeypatch):
    """One process has no network rows: the wrapped model's outputs are the model's own."""
    from torch_geometric.nn import GraphSAGE

    import commgraph.pyg as cg
    from commgraph.graph import load_graph
    from commgraph.graph.pyg import to_pyg
    from commgraph.runtime.traffic import Traffic

    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path))
    data = to_pyg(load_graph("cora"))
    loader = cg.NeighborLoader(
        data, num_neighbors=[3, 3], batch_size=16, input_nodes=data.val_mask, first_layer="owner"
    )
    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, HIDDEN, 2, 7)
    wrapped = cg.sampled(model, loader)
    batch = next(iter(loader))
    torch.testing.assert_close(wrapped(batch.x, batch.edge_index), model(batch.x, batch.edge_index))
    assert loader.bytes == {} and loader.traffic == loader.global_traffic() == Traffic()


@pytest.mark.parametrize(
    ("layer", "message"),
    [
        ("GATConv(8, 4)", "got GATConv"),
        ("SAGEConv(8, 4, aggr='max')", "aggr='max'"),
        ("SAGEConv(8, 4, project=True)", "use first_layer='features'"),
        ("GCNConv(-1, 4)", "not made yet"),
    ],
)
def test_first_layers_the_owners_cannot_compute_are_refused(bridge_alone, tmp_path, monkeypatch, layer, message):
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv  # noqa: F401 (the parameters name them)

    import commgraph.pyg as cg
    from commgraph.graph import load_graph
    from commgraph.graph.pyg import to_pyg

    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path))
    data = to_pyg(load_graph("cora"))
    loader = cg.NeighborLoader(data, num_neighbors=[3], batch_size=16, first_layer="owner")
    model = torch.nn.Sequential()
    model.conv = eval(layer)
    with pytest.raises(BridgeError, match=re.escape(message)) as caught:
        cg.sampled(model, loader)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [({"first_layer": "p3"}, "first_layer must be one of features, owner"), ({"peer_rows": "nfs"}, "peer_rows")],
)
def test_bad_fetch_options_are_refused(bridge_alone, options, message):
    import commgraph.pyg as cg
    from commgraph.graph import load_graph
    from commgraph.graph.pyg import to_pyg

    with pytest.raises(BridgeError, match=message):
        cg.NeighborLoader(to_pyg(load_graph("cora")), **options)


def test_a_model_without_message_passing_is_refused(bridge_alone, tmp_path, monkeypatch):
    import commgraph.pyg as cg
    from commgraph.graph import load_graph
    from commgraph.graph.pyg import to_pyg

    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path))
    loader = cg.NeighborLoader(to_pyg(load_graph("cora")), num_neighbors=[3], first_layer="owner")
    with pytest.raises(BridgeError, match="has no MessagePassing layer"):
        cg.sampled(torch.nn.Linear(3, 3), loader)


def test_the_pages_owner_block_trains(bridge_alone, tmp_path, monkeypatch):
    """docs/pyg.md's "The owners' first layer" block, on Cora's part in a one-process world: the
    loader and the wrapped model it makes train (the loss falls over three epochs)."""
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    from torch_geometric.nn import GraphSAGE

    import commgraph.pyg as cg
    from commgraph.graph import load_graph
    from commgraph.graph.pyg import to_pyg

    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path))
    block = python_block("pyg.md", "### The owners' first layer")
    names = {"cg": cg, "DDP": DistributedDataParallel, "GraphSAGE": GraphSAGE}
    names["part"] = cg.partition(to_pyg(load_graph("cora")))
    torch.manual_seed(0)
    exec(compile(block, "pyg.md", "exec"), names)
    model, loader = names["model"], names["loader"]
    assert loader.first_layer == "owner" and isinstance(model.module, cg.SampledModel)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(3):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            loss = F.cross_entropy(out, batch.y[: batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
    assert losses[-1] < losses[0]


@pytest.mark.parametrize(
    "layer",
    [
        "GCNConv(6, 4)",
        "SAGEConv(6, 4)",
        "SAGEConv(6, 4, aggr='sum', root_weight=False)",
        "GraphConv(6, 4, aggr='mean')",
    ],
)
def test_a_layer_on_its_transformed_rows_gives_its_output(layer):
    """What the owners send, fed to the layer with its maps set to the identity (biases kept), gives
    the layer's own output; its maps are back after the call."""
    from torch_geometric.nn import GCNConv, GraphConv, SAGEConv  # noqa: F401 (the parameters name them)

    from commgraph.pyg.first_layer import LinearFirstLayer
    from commgraph.pyg.full import Swaps

    torch.manual_seed(0)
    conv = eval(layer)
    x, edge_index = torch.randn(20, 6), torch.randint(0, 20, (2, 60))
    first, swaps = LinearFirstLayer.of(conv), Swaps()
    neighbour, root = first.neighbour_rows(x), first.root_rows(x)
    assert neighbour.shape == (20, 4) and (root is None) == (layer.startswith("GCN") or "root_weight" in layer)
    first.identity_maps(swaps)
    out = conv(neighbour if root is None else (neighbour, root), edge_index)
    swaps.undo()
    torch.testing.assert_close(out, conv(x, edge_index), rtol=1e-5, atol=1e-6)
    assert type(getattr(conv, first.neighbour)).__name__ == "Linear"
