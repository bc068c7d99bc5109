"""The PyG bridge's full-graph path (``commgraph.pyg``): a user's own model, each kind of
``MessagePassing`` layer, trains across 2 and 4 ranks exactly as the one-process PyG script
(losses at every epoch within 1e-5 relative), and bad input is refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import commgraph.pyg as cg
from commgraph.errors import BridgeError
from commgraph.runtime.traffic import Traffic
from forked import launch_forked
from pyg_driver import MODELS, cora, train_plain


@pytest.fixture(scope="module")
def plain() -> dict[str, list[float]]:
    return {kind: train_plain(kind) for kind in MODELS}


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.parametrize("workers", [2, 4])
def test_every_layer_kind_trains_as_one_process(workers, plain, tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    out = tmp_path / "losses.json"
    assert launch_forked([str(out)], workers, module="pyg_driver", grace=30, threads_per_worker=1) == 0
    runs = json.loads(out.read_text())
    for kind in MODELS:
        np.testing.assert_allclose(runs[kind]["losses"], plain[kind], rtol=1e-5, err_msg=kind)
        assert runs[kind]["bytes"]["halo_backward"] > 0  # halo rows moved, and their gradients came back
        # the model's traffic: its byte counts as named counters, summed over the ranks in one all-reduce
        assert _traffic(runs[kind]["traffic"]) == Traffic.from_counts(runs[kind]["bytes"])
        every = [
            Traffic.from_counts(counts).layers(len(runs[kind]["global"]["halo_forward"]))
            for counts in runs[kind]["every"]
        ]
        assert _traffic(runs[kind]["global"]) == sum(every, Traffic()) and len(every) == workers


def _traffic(data: dict) -> Traffic:
    """A :class:`Traffic` from its JSON form (``halo_forward`` a list)."""
    return Traffic(**{**data, "halo_forward": tuple(data["halo_forward"])})


def test_part_layout_of_one_rank_is_the_whole_graph(bridge_alone, tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    data = cora()
    part = cg.partition(data)
    assert part.num_owned == data.num_nodes and torch.equal(part.n_id, torch.arange(data.num_nodes))
    assert torch.equal(part.x, data.x) and torch.equal(part.train_mask, data.train_mask)
    ours = set(map(tuple, part.edge_index.t().tolist()))
    assert ours == set(map(tuple, data.edge_index.t().tolist()))
    # each edge carries its own attribute
    src, dst = part.edge_index
    np.testing.assert_array_equal(part.edge_attr[:, 0], (((src * 7 + dst * 3) % 5).float() / 5 + 0.1))


def test_full_graph_refuses_a_model_without_message_passing(bridge_alone, tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    part = cg.partition(cora())
    with pytest.raises(BridgeError, match="no MessagePassing layer.*DistributedDataParallel"):
        cg.full_graph(torch.nn.Linear(4, 4), part)


def test_full_graph_refuses_a_decoder_the_model_does_not_have(bridge_alone, tmp_path, monkeypatch):
    from pyg_driver import Net

    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    part = cg.partition(cora())
    with pytest.raises(BridgeError, match="Net has no method 'decode' .*scores node pairs"):
        cg.full_graph(Net("sage", part.num_features, 7), part, decoder="decode")


def test_full_graph_refuses_data_that_is_not_a_part(bridge_alone):
    from pyg_driver import Net

    with pytest.raises(BridgeError, match="cg.partition"):
        cg.full_graph(Net("gcn", 1433, 7), cora())


def test_partition_refuses_edge_ids_out_of_range(bridge_alone):
    data = cora()
    data.edge_index[1, 5] = data.num_nodes + 3
    with pytest.raises(BridgeError, match=f"node id {data.num_nodes + 3} but the graph has {data.num_nodes} nodes"):
        cg.partition(data)


def test_partition_refuses_a_set_of_another_size(bridge_alone, tmp_path):
    from commgraph.graph import load_graph
    from commgraph.partition import make_partition_set

    make_partition_set(load_graph("cora"), 2, tmp_path / "set", method="chunk", seed=0)
    with pytest.raises(BridgeError, match="has 2 parts but the job has 1 ranks"):
        cg.partition(str(tmp_path / "set"))


def test_calls_before_init_say_what_to_call():
    with pytest.raises(BridgeError, match=r"cg.init\(\)"):
        cg.rank()


def test_global_mean_is_the_mean_with_the_one_process_gradient(bridge_alone):
    values = torch.tensor([1.0, 2.0, 6.0], requires_grad=True)
    mean = cg.global_mean(values)
    assert mean.item() == 3.0
    mean.backward()
    np.testing.assert_allclose(values.grad, [1 / 3] * 3)
    assert cg.global_mean(torch.tensor([True, False, True, True])).item() == 0.75


def test_unified_on_a_cpu_rank_is_the_tensor_itself(bridge_alone):
    x = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    table = cg.unified(x)
    assert table is x
    assert torch.equal(table[torch.tensor([3, 1])], x[[3, 1]])
    with pytest.raises(BridgeError, match="2-D tensor"):
        cg.unified(torch.zeros(5))


@pytest.mark.gpu(reason="a unified tensor is read by a CUDA GPU")
def test_unified_rows_arrive_on_the_gpu_exactly(bridge_alone):
    x = torch.randn(1000, 37)
    table = cg.unified(x, device="cuda")
    index = torch.tensor([999, 0, 5, 5, 512])
    rows = table[index.cuda()]
    assert rows.device.type == "cuda" and torch.equal(rows.cpu(), x[index])
    assert torch.equal(table[torch.arange(1000) % 7 == 0].cpu(), x[::7])


@pytest.mark.gpu(reason="the bridge's model and part are moved to a CUDA GPU")
@pytest.mark.parametrize("kind", MODELS)
def test_a_part_on_the_gpu_trains_as_the_cpu_script(bridge_alone, plain, kind, tmp_path, monkeypatch):
    import torch.nn.functional as F

    from pyg_driver import EPOCHS, Net

    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    part = cg.partition(cora()).to("cuda")
    torch.manual_seed(0)
    model = cg.full_graph(Net(kind, part.num_features, 7), part).to("cuda")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(EPOCHS):
        optimizer.zero_grad()
        out = model(part)
        assert out.device.type == "cuda"
        loss = F.cross_entropy(out[part.train_mask], part.y[part.train_mask])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    np.testing.assert_allclose(losses, plain[kind], rtol=1e-4, err_msg=kind)


def test_a_layer_given_other_rows_than_the_parts_is_refused(bridge_alone, tmp_path, monkeypatch):
    from pyg_driver import Net

    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    part = cg.partition(cora())
    model = cg.full_graph(Net("sage", part.num_features, 7), part)
    with pytest.raises(BridgeError, match=r"x of shape \[10, 1433\], but this rank's part has 2708 rows"):
        model.module.conv1(part.x[:10], part.edge_index)
