"""``commgraph.pyg.NeighborLoader``: PyG's batch layout on Cora in a one-process world, its
argument checks, and a 2-rank job (``pyg_loader_driver``) whose ranks split the seeds, make the
same number of batches and train a DistributedDataParallel GraphSAGE in step."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from commgraph.errors import BridgeError
from docblocks import python_block

TESTS = Path(__file__).parent


@pytest.fixture(scope="module")
def cora():
    from commgraph.graph import load_graph
    from commgraph.graph.pyg import to_pyg

    return to_pyg(load_graph("cora"))


@pytest.fixture
def one_thread():
    """torch on one thread: Cora's small layers gain nothing from two, and on a busy 2-core machine
    the training test took 15-60 s with them against 3 s without."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def in_edges(data) -> set[tuple[int, int]]:
    src, dst = data.edge_index.tolist()
    return set(zip(src, dst))


def check_layout(data, batch, num_neighbors: list[int]) -> None:
    """``batch`` as PyG lays one out: seeds first, rows of ``data``, real edges toward the seeds,
    each hop's targets with at most its fanout (all their in-neighbours with -1)."""
    n_id, size = batch.n_id, batch.batch_size
    assert n_id.unique().shape[0] == n_id.shape[0]
    assert torch.equal(batch.x, data.x[n_id]) and torch.equal(batch.y, data.y[n_id])
    assert torch.equal(batch.train_mask, data.train_mask[n_id])
    graph = in_edges(data)
    src, dst = batch.edge_index
    assert all((int(u), int(v)) in graph for u, v in zip(n_id[src], n_id[dst]))
    assert torch.equal(data.edge_index[:, batch.e_id], n_id[batch.edge_index])
    # hop h's edges (num_sampled_edges[h] of them, in hop order) go into the nodes hop h-1 added,
    # [bounds[h], bounds[h + 1]), from nodes added by hop h at the latest
    bounds = np.cumsum([0, *batch.num_sampled_nodes]).tolist()
    assert batch.num_sampled_nodes[0] == size and bounds[-1] == n_id.shape[0]
    assert len(batch.num_sampled_edges) == len(num_neighbors) and sum(batch.num_sampled_edges) == src.shape[0]
    degree = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    first = 0
    for h, fanout in enumerate(num_neighbors):
        last = first + batch.num_sampled_edges[h]
        into, out_of = dst[first:last], src[first:last]
        assert bool(((into >= bounds[h]) & (into < bounds[h + 1])).all()) and bool((out_of < bounds[h + 2]).all())
        counts = torch.bincount(into - bounds[h], minlength=bounds[h + 1] - bounds[h])
        wanted = degree[n_id[bounds[h] : bounds[h + 1]]]
        assert torch.equal(counts, wanted if fanout == -1 else wanted.clamp(max=fanout))
        added, at = np.unique(out_of[out_of >= bounds[h + 1]].numpy(), return_index=True)
        assert added[np.argsort(at)].tolist() == list(range(bounds[h + 1], bounds[h + 2]))  # in order of first draw
        first = last


def test_batches_have_pygs_layout(alone, cora):
    import commgraph.pyg as cg

    loader = cg.NeighborLoader(cora, num_neighbors=[5, 3], batch_size=64, input_nodes=cora.train_mask, shuffle=True)
    batches = list(loader)
    assert len(loader) == len(batches) == 3  # Cora's 140 training nodes
    seeds = torch.cat([b.n_id[: b.batch_size] for b in batches])
    assert torch.equal(seeds.sort().values, cora.train_mask.nonzero().view(-1))
    for batch in batches:
        check_layout(cora, batch, [5, 3])
        assert torch.equal(cora.train_mask.nonzero().view(-1)[batch.input_id], batch.n_id[: batch.batch_size])
    again = torch.cat([b.n_id[: b.batch_size] for b in loader])
    assert not torch.equal(seeds, again)  # a new order each epoch


def test_trim_to_layer_gives_the_same_seed_rows(alone, cora):
    """PyG's ``trim_to_layer`` (``num_sampled_nodes_per_hop``) reads the hop counts: it holds only
    when nodes and edges are laid out hop after hop."""
    from torch_geometric.nn import GraphSAGE

    import commgraph.pyg as cg

    torch.manual_seed(0)
    model = GraphSAGE(cora.num_features, 16, 2, 7).eval()
    for batch in cg.NeighborLoader(cora, num_neighbors=[6, 4], batch_size=500, shuffle=True):
        whole = model(batch.x, batch.edge_index)[: batch.batch_size]
        trimmed = model(
            batch.x,
            batch.edge_index,
            num_sampled_nodes_per_hop=batch.num_sampled_nodes,
            num_sampled_edges_per_hop=batch.num_sampled_edges,
        )[: batch.batch_size]
        torch.testing.assert_close(trimmed, whole, rtol=1e-4, atol=1e-5)


def test_pygs_graphsage_loop_learns_cora(alone, cora, one_thread):
    """PyG's sampled GraphSAGE loop, its loaders made by cg.NeighborLoader, the model in DDP (a group
    of one): Cora's test accuracy about 0.80 (0.796 measured)."""
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    from torch_geometric.nn import GraphSAGE

    import commgraph.pyg as cg

    torch.manual_seed(0)
    loader = cg.NeighborLoader(cora, num_neighbors=[10, 5], batch_size=32, input_nodes=cora.train_mask, shuffle=True)
    model = DistributedDataParallel(GraphSAGE(cora.num_features, 64, 2, 7, dropout=0.5))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(30):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            F.cross_entropy(out, batch.y[: batch.batch_size]).backward()
            optimizer.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for batch in cg.NeighborLoader(cora, num_neighbors=[-1, -1], batch_size=512, input_nodes=cora.test_mask):
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            correct += int((out.argmax(1) == batch.y[: batch.batch_size]).sum())
    assert correct / int(cora.test_mask.sum()) > 0.75


def test_all_neighbours_and_layerwise_inference(alone, cora):
    import commgraph.pyg as cg

    loader = cg.NeighborLoader(cora, num_neighbors=[-1], batch_size=1000)
    batches = list(loader)
    assert len(batches) == 3
    assert torch.equal(torch.cat([b.n_id[: b.batch_size] for b in batches]), torch.arange(cora.num_nodes))
    for batch in batches:
        check_layout(cora, batch, [-1])
    assert sum(b.edge_index.shape[1] for b in batches) == cora.edge_index.shape[1]


def test_reddit_examples_inference_loop_runs_unchanged(alone, cora):
    """PyG's examples/reddit.py: ``subgraph_loader`` over a copy of ``data`` without ``x`` and
    ``y``, one layer at a time over every node, gives the full-graph forward pass."""
    import copy

    from torch_geometric.nn import SAGEConv

    import commgraph.pyg as cg

    torch.manual_seed(0)
    convs = [SAGEConv(cora.num_features, 16), SAGEConv(16, 7)]
    subgraph_loader = cg.NeighborLoader(copy.copy(cora), input_nodes=None, num_neighbors=[-1], batch_size=512)
    del subgraph_loader.data.x, subgraph_loader.data.y
    subgraph_loader.data.n_id = torch.arange(cora.num_nodes)
    x_all = cora.x
    with torch.no_grad():
        for i, conv in enumerate(convs):
            xs = []
            for batch in subgraph_loader:
                assert "x" not in batch and "y" not in batch
                x = conv(x_all[batch.n_id], batch.edge_index)
                xs.append((x.relu() if i == 0 else x)[: batch.batch_size])
            x_all = torch.cat(xs, dim=0)
        whole = convs[1](convs[0](cora.x, cora.edge_index).relu(), cora.edge_index)
    torch.testing.assert_close(x_all, whole, rtol=1e-4, atol=1e-5)


def test_input_nodes_as_ids_keep_their_order(alone, cora):
    import commgraph.pyg as cg

    ids = torch.tensor([7, 3, 2000, 11])
    batch = next(iter(cg.NeighborLoader(cora, num_neighbors=[2, 2], batch_size=10, input_nodes=ids)))
    assert torch.equal(batch.n_id[:4], ids) and batch.batch_size == 4
    assert torch.equal(batch.input_id, torch.arange(4))
    check_layout(cora, batch, [2, 2])


def test_edge_attributes_follow_e_id(alone, cora):
    import commgraph.pyg as cg

    data = cora.clone()
    data.edge_attr = torch.randn(data.edge_index.shape[1], 3)
    batch = next(iter(cg.NeighborLoader(data, num_neighbors=[4, 4], batch_size=50, shuffle=True)))
    assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
    check_layout(data, batch, [4, 4])


def test_data_positions_follow_the_sets_csr_order():
    from commgraph.pyg.hops import data_positions

    # edges 2->0, 1->0, 2->0 again, 0->1: the CSR holds 1->0, 2->0, 0->1
    edge_index = torch.tensor([[2, 1, 2, 0], [0, 0, 0, 1]])
    assert data_positions(edge_index).tolist() == [1, 0, 3]


def test_a_part_and_a_set_path_read_rows_from_the_set(alone, cora):
    import commgraph.pyg as cg
    from commgraph.pyg.data import handle_of

    part = cg.partition(cora)
    for source in (part, str(handle_of(part).pset.path)):
        batch = next(iter(cg.NeighborLoader(source, num_neighbors=[4], batch_size=32, input_nodes=cora.val_mask)))
        assert torch.equal(batch.x, cora.x[batch.n_id]) and torch.equal(batch.y, cora.y[batch.n_id])
        assert torch.equal(batch.val_mask, cora.val_mask[batch.n_id])
    mine = cg.NeighborLoader(part, num_neighbors=[4], input_nodes=part.n_id[part.train_mask])
    assert torch.equal(torch.from_numpy(mine.seeds), cora.train_mask.nonzero().view(-1))


def test_a_part_sampled_from_its_parts_gives_the_whole_structures_batches(alone, cora):
    """One process, structure="partitioned": the hops come from the part's own in-edges (no
    structure/ CSR mapped) and every batch equals the whole structure's, for the same seed."""
    import commgraph.pyg as cg

    part = cg.partition(cora)
    batches = {}
    for structure in ("replicated", "partitioned"):
        loader = cg.NeighborLoader(part, num_neighbors=[5, 3], batch_size=64, shuffle=True, structure=structure)
        batches[structure] = [(b.n_id, b.edge_index, b.x, b.y) for b in loader]
    assert len(batches["partitioned"]) == len(batches["replicated"]) == 43
    for ours, whole in zip(batches["partitioned"], batches["replicated"]):
        assert all(torch.equal(a, b) for a, b in zip(ours, whole))


def _sage_losses(loader, features: int) -> list[float]:
    """One epoch of PyG's GraphSAGE loop on ``loader``'s batches, from the same weights: each loss."""
    import torch.nn.functional as F
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(0)
    model = GraphSAGE(features, 16, 2, 7, dropout=0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for batch in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(batch.x, batch.edge_index)[: batch.batch_size], batch.y[: batch.batch_size])
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def test_features_under_a_budget_train_as_uncapped_bit_for_bit(alone, cora, one_thread, monkeypatch):
    """A part's loader under a memory budget (from commgraph run's variable) reads x from the part's
    file through the feature cache, a quarter of the rows resident and the next batch read ahead:
    every loss is the uncapped loader's, and the cache both served and missed rows."""
    import commgraph.pyg as cg

    part = cg.partition(cora)
    options = dict(num_neighbors=[5, 5], batch_size=16, input_nodes=cora.train_mask, shuffle=True)
    plain = _sage_losses(cg.NeighborLoader(part, **options), cora.num_features)
    minimum = cg.NeighborLoader(part, **options, memory_budget=10**13).estimate.minimum_bytes
    table = 4 * cora.num_features * cora.num_nodes
    monkeypatch.setenv("COMMGRAPH_MEMORY_BUDGET", str(minimum + table // 2))  # CACHE_SHARE 0.5: a quarter cached
    capped = cg.NeighborLoader(part, **options)
    assert capped.fetch.store.cache.hot.shape[0] == cora.num_nodes // 4
    assert _sage_losses(capped, cora.num_features) == plain and len(plain) == 9
    counts = capped.cache
    assert counts.hits > 0 and counts.misses > 0 and counts.missed_bytes == 4 * cora.num_features * counts.misses
    with pytest.raises(BridgeError, match=r"below this loader's minimum of 0\.\d\d GB .*: raise it to at least"):
        cg.NeighborLoader(part, **options, memory_budget=minimum - 1)


def test_the_pages_structure_and_budget_blocks_make_the_plain_loaders_batches(alone, cora, capsys):
    """docs/pyg.md's blocks of "Jobs across machines" and "Under a memory budget", on Cora's part in
    a one-process world: each loader yields the batches of the loader without the option."""

    import commgraph.pyg as cg

    part = cg.partition(cora)
    for heading, check in (
        ("### Jobs across machines", lambda loader: loader.structure == "partitioned"),
        ("### Under a memory budget", lambda loader: loader.fetch.store.placement == "disk"),
    ):
        block = python_block("pyg.md", heading)
        names = {"cg": cg, "part": part}
        exec(compile(block, "pyg.md", "exec"), names)
        loader = names["loader"]
        plain = cg.NeighborLoader(
            part, num_neighbors=[15, 10], batch_size=1024, input_nodes=part.n_id[part.train_mask], shuffle=True
        )
        assert check(loader)
        for ours, theirs in zip(loader, plain, strict=True):
            assert torch.equal(ours.n_id, theirs.n_id) and torch.equal(ours.x, theirs.x)
    assert "rows of highest degree" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_neighbors": []}, "non-empty list"),
        ({"num_neighbors": [10, 0]}, "each >= 1 or -1"),
        ({"num_neighbors": [10, 2.5]}, "list of ints"),
        ({"num_neighbors": 10}, "list of ints"),
        ({"batch_size": 0}, "batch_size"),
        ({"input_nodes": torch.ones(5, dtype=torch.bool)}, "mask over every node"),
        ({"input_nodes": torch.tensor([1.0, 2.0])}, "bool mask or 1-D integer"),
        ({"input_nodes": torch.tensor([1, 2708])}, "holds node id 2708"),
        ({"input_nodes": torch.tensor([-1])}, "holds node id -1"),
        ({"input_nodes": torch.tensor([4, 4])}, "more than once"),
        ({"sampler": "ladies"}, "sampler must be"),
        ({"sampler": "dsg"}, "sampler must be one of neighbor, dgs; got 'dsg'"),
        ({"dgs_masks": "masks.npz"}, "pass sampler='dgs'"),
        ({"drop_lats": True}, "no option 'drop_lats'"),
        ({"structure": "shared"}, "structure must be one of replicated, partitioned; got 'shared'"),
        ({"structure": "partitioned", "sampler": "dgs"}, "draws with sampler='neighbor'"),
        ({"structure": "partitioned"}, "every rank holds this whole Data: pass cg.partition"),
        ({"memory_budget": "8X"}, "memory_budget: bad size '8X'"),
        ({"memory_budget": 0}, "memory_budget must be bytes"),
        ({"memory_budget": "8G"}, "memory_budget reads a partition set's features"),
    ],
)
def test_bad_arguments_say_what_to_fix(alone, cora, options, message):
    import commgraph.pyg as cg

    with pytest.raises(BridgeError, match=message) as caught:
        cg.NeighborLoader(cora, **options)
    assert "\n" not in str(caught.value)


def test_not_a_graph_is_refused(alone):
    import commgraph.pyg as cg

    with pytest.raises(BridgeError, match="takes a torch_geometric Data"):
        cg.NeighborLoader(np.zeros(3))


@pytest.mark.multiproc
def test_two_ranks_split_the_seeds_and_train_in_step(tmp_path, monkeypatch):
    from forked import launch_forked

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    assert launch_forked([str(tmp_path)], 2, grace=30, module="pyg_loader_driver", threads_per_worker=1) == 0
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    seeds = [set(r["seeds"]) for r in ranks]
    assert not seeds[0] & seeds[1]
    assert seeds[0] | seeds[1] == set(ranks[0]["input_nodes"])
    assert all(len(r["seeds"]) == len(set(r["seeds"])) for r in ranks)  # no seed twice in a rank's own batches
    assert ranks[0]["batches"] == ranks[1]["batches"] == ranks[0]["len"] == ranks[1]["len"]
    assert ranks[0]["own_batches"] != ranks[1]["own_batches"]  # the parts own different numbers of seeds
    assert ranks[0]["parameters"] == pytest.approx(ranks[1]["parameters"], abs=0)
    assert ranks[0]["parameters"] != pytest.approx(ranks[0]["initial"])
    assert [b[0] for b in ranks[0]["few"]] == [2, 2, 1]
    assert [b[:3] for b in ranks[1]["few"]] == [[0, 0, 0]] * 3  # rank 1 owns none of them: empty batches
    assert all(b[3] for r in ranks for b in r["few"])
    assert ranks[0]["inference"] == ranks[1]["inference"]  # every rank infers every node, in id order
    assert sum(ranks[0]["inference"], []) == list(range(2708))


def test_dgs_draws_as_neighbor_until_it_has_masks_then_keeps_every_local_neighbour(alone, cora):
    """One rank owns every node: without masks DGS's batches are the uniform sampler's; with masks
    every in-neighbour is local, and ``keep-local`` keeps them all (DGS's rule: locals cost no
    communication), so each hop is the full neighbourhood, and no column is cut."""
    import commgraph.pyg as cg
    from commgraph.sample.dgs import DGSMasks

    options = {"num_neighbors": [3, 2], "batch_size": 50, "input_nodes": cora.train_mask, "shuffle": True}
    uniform = list(cg.NeighborLoader(cora, **options))
    loader = cg.NeighborLoader(cora, sampler="dgs", feature_rate=0.1, **options)
    for plain, dgs in zip(uniform, loader, strict=True):
        assert torch.equal(plain.n_id, dgs.n_id) and torch.equal(plain.edge_index, dgs.edge_index)
    loader.set_masks(DGSMasks(np.zeros(cora.num_nodes), np.arange(cora.num_features, dtype=np.float64)))
    for batch in loader:
        check_layout(cora, batch, [-1, -1])


def test_dgs_options_are_checked(alone, cora):
    import commgraph.pyg as cg
    from commgraph.errors import SamplingError

    with pytest.raises(SamplingError, match="feature-rate"):
        cg.NeighborLoader(cora, sampler="dgs", feature_rate=0)
    with pytest.raises(BridgeError, match="make the loader with sampler='dgs'"):
        cg.NeighborLoader(cora).set_masks(None)


@pytest.mark.multiproc
def test_dgs_loader_at_two_ranks_samples_by_the_masks_and_trains(tmp_path, monkeypatch):
    """``pyg_loader_dgs_driver``: each rank's batches are PyG batches of its own seeds, with real
    edges, no remote node its node mask rules out (but seeds), remote rows cut to DGS's columns;
    the loss falls and the ranks' models stay equal."""
    from forked import launch_forked

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    assert launch_forked([str(tmp_path)], 2, grace=60, module="pyg_loader_dgs_driver", threads_per_worker=1) == 0
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    from commgraph.graph import load_graph
    from commgraph.graph.pyg import to_pyg

    data = to_pyg(load_graph("cora"))
    graph, owner = in_edges(data), np.asarray(ranks[0]["owner"])
    train = set(data.train_mask.nonzero().view(-1).tolist())
    assert set(ranks[0]["seeds"]) | set(ranks[1]["seeds"]) == train
    for rank, result in enumerate(ranks):
        assert set(result["seeds"]) == {v for v in train if owner[v] == rank}  # each rank its own seeds
        ruled_out = np.asarray(result["node_prob"]) == 0
        drawn = 0
        for batch in result["batches"]:
            n_id, size = np.asarray(batch["n_id"]), batch["batch_size"]
            assert np.unique(n_id).shape[0] == n_id.shape[0] and batch["local_max"] < n_id.shape[0]
            assert set(n_id[:size].tolist()) <= set(result["seeds"])  # seeds first
            assert all(edge in graph for edge in zip(*batch["edges"]))
            added = n_id[size:]
            assert not (ruled_out[added] & (owner[added] != rank)).any()
            drawn += int((owner[added] != rank).sum())
            assert batch["rows_ok"]
        assert drawn > 0  # remote nodes were drawn, through their masks
        assert result["losses"][-1] < 0.5 * result["losses"][0]
    assert ranks[0]["losses"] == pytest.approx(ranks[1]["losses"], abs=1e-6)
    assert ranks[0]["parameters"] == pytest.approx(ranks[1]["parameters"], abs=0)
