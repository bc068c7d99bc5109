"""Heterogeneous graphs through the PyG bridge, full-graph (``commgraph.pyg.hetero``): a
``to_hetero(GraphSAGE)`` and an R-GCN-style ``HeteroConv`` train across 2 and 4 ranks exactly as the
one-process PyG script (losses at every epoch within 1e-5 relative), each node type's halo bytes
are recorded, the part's layout is each type's owned rows then halo rows, and bad input is refused
in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import commgraph.pyg as cg
from commgraph.errors import BridgeError, PartitionError
from forked import launch_forked
from hetero_driver import EPOCHS, HIDDEN, MODELS, Sage, train_plain, typed_graph


@pytest.fixture(scope="module")
def plain() -> dict[str, list[float]]:
    return {kind: train_plain(kind) for kind in MODELS}


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.parametrize("workers", [2, 4])
def test_hetero_models_train_as_one_process(workers, plain, tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    out = tmp_path / "losses.json"
    assert launch_forked([str(out)], workers, module="hetero_driver", grace=30, threads_per_worker=1) == 0
    runs = json.loads(out.read_text())
    for kind in MODELS:
        np.testing.assert_allclose(runs[kind]["losses"], plain[kind], rtol=1e-5, err_msg=kind)
        sent, rows = runs[kind]["bytes"], runs[kind]["sent"]
        # the first layer reads the part's own x; the second refreshes each type's hidden rows once
        # per forward (papers feed two relations, one exchange), HIDDEN float32 columns a row
        for t in ("paper", "author"):
            assert rows[t] > 0 and sent[f"halo_forward:{t}"] == EPOCHS * rows[t] * HIDDEN * 4, (t, sent)
        assert sent["halo_backward:paper"] > 0 and sent["halo_backward:author"] > 0, sent


def test_a_plan_restricted_to_a_type_keeps_its_rows_only():
    from commgraph.plan import CommPlan, Send

    plan = CommPlan("allgather", "p2p", "t", row_bytes=8)
    plan.stages = [[Send("gpu0", "gpu1", 24.0, np.array([1, 5, 7])), Send("gpu1", "gpu0", 8.0, np.array([2]))]]
    within = plan.rows_within(4, 8)
    assert [(s.src, s.dst, s.nbytes, s.ids.tolist()) for s in within.stages[0]] == [("gpu0", "gpu1", 16.0, [5, 7])]
    assert plan.stages[0][0].ids.tolist() == [1, 5, 7]  # the plan itself unchanged


def test_part_of_one_rank_is_the_whole_graph(bridge_alone, tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    data = typed_graph()
    part = cg.partition(data)
    assert part.metadata() == data.metadata()
    for t in data.node_types:
        assert part[t].num_owned == data[t].num_nodes
        assert torch.equal(part[t].n_id, torch.arange(data[t].num_nodes)) and torch.equal(part[t].x, data[t].x)
    for et in data.edge_types:
        assert torch.equal(part[et].edge_index, data[et].edge_index)


def test_part_layout_on_a_rank_of_two(tmp_path, monkeypatch, capsys):
    """Rank 0's part of a 2-way METIS cut, checked against the set: per type its owned nodes
    (ascending) then halo nodes, edges exactly the in-edges of owned destinations, masks false on
    the halo, and each type balanced across the parts."""
    from commgraph.cli.main import main
    from commgraph.pyg.data import handle_of
    from commgraph.pyg.hetero import partition_hetero
    from commgraph.pyg.world import Session

    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))

    class _World:  # rank 0 of 2, its barrier a no-op: the set is made by this process alone
        size, rank = 2, 0

    class _Comm:
        def barrier(self):
            pass

    data = typed_graph()
    part = partition_hetero(Session(_World(), _Comm()), data, "metis", 0, tmp_path / "set")
    layout = handle_of(part).types
    assignment = np.asarray(handle_of(part).pset.assignment())
    for t in data.node_types:
        low, high = layout.bounds(t)
        n_id, owned = part[t].n_id.numpy(), part[t].num_owned
        assert np.array_equal(n_id[:owned], np.flatnonzero(assignment[low:high] == 0))
        assert (assignment[n_id[owned:] + low] == 1).all()
        # each type split evenly (METIS's one constraint per type, within 3%)
        assert abs(owned - (high - low) / 2) <= 0.03 * (high - low)
    assert not part["paper"].train_mask[part["paper"].num_owned :].any()
    for et in data.edge_types:
        src, _, dst = et
        whole = data[et].edge_index
        mine = assignment[whole[1].numpy() + layout.bounds(dst)[0]] == 0
        got = torch.stack([part[src].n_id[part[et].edge_index[0]], part[dst].n_id[part[et].edge_index[1]]])
        assert torch.equal(got, whole[:, torch.from_numpy(mine)])
        assert (part[et].edge_index[1] < part[dst].num_owned).all()
    # the set records each type's nodes and halo per part, and `partition info` prints them
    owned = [part[t].num_owned for t in data.node_types]
    remote = [part[t].num_nodes - part[t].num_owned for t in data.node_types]
    first = handle_of(part).pset.manifest["metrics"]["parts"][0]
    assert (first["type_nodes"], first["type_remote"]) == (owned, remote)
    assert main(["partition", "info", str(tmp_path / "set")]) == 0
    out = capsys.readouterr().out
    assert "by node type (nodes, remote)" in out and f"{owned}, {remote}" in out


def test_partition_refuses_an_edge_index_out_of_its_types_range(bridge_alone):
    data = typed_graph()
    data["author", "writes", "paper"].edge_index[0, 3] = 90  # authors are 0..89
    with pytest.raises(BridgeError, match=r"'author' id 90 but 'author' has 90 nodes \(ids 0..89\)"):
        cg.partition(data)


def test_typed_balance_is_metis_only():
    from commgraph.graph import load_graph
    from commgraph.partition import partition_graph

    graph = load_graph("cora")
    with pytest.raises(PartitionError, match="built for method 'metis', not 'g3'"):
        partition_graph(graph, 2, "g3", node_type=np.zeros(graph.num_nodes, dtype=np.int64))


def test_full_graph_refuses_a_hetero_model_without_message_passing(bridge_alone, tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    part = cg.partition(typed_graph())
    with pytest.raises(BridgeError, match="no MessagePassing layer"):
        cg.full_graph(torch.nn.Linear(4, 4), part)


def test_full_graph_refuses_a_layer_of_no_relation(bridge_alone, tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    part = cg.partition(typed_graph())
    with pytest.raises(BridgeError, match="'conv1' is for no relation.*to_hetero"):
        cg.full_graph(Sage(), part)  # the homogeneous model, not to_hetero'd


def test_full_graph_refuses_rows_that_are_not_the_parts(bridge_alone, tmp_path, monkeypatch):
    from torch_geometric.nn import to_hetero

    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    part = cg.partition(typed_graph())
    net = cg.full_graph(to_hetero(Sage(), part.metadata()), part)
    x = {**part.x_dict, "author": part["author"].x[:10]}
    with pytest.raises(
        BridgeError, match=r"'author' rows of shape \[10, 8\], but this rank's part has 90 'author' rows"
    ):
        net(x, part.edge_index_dict)
