"""``--first-layer owner`` (P3): the owners of remote rows compute the first layer's transform and
send hidden-wide rows. Same losses as shipping features on 1, 2 and 4 workers, sampled and
full-graph, with DGS; the bytes it moves; the models it refuses."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from commgraph.cli.main import main
from commgraph.errors import TrainingError
from commgraph.graph import load_graph
from commgraph.nn import GNN, Block
from commgraph.nn.aggregate import TableRows, _balanced_ranges, aggregate_rows, aggregate_table
from commgraph.partition import load_partition_set, partition_graph, partition_metrics, write_partition_set
from commgraph.plan.first_layer import choose_first_layer, evaluation_passes
from commgraph.runtime.features import FeatureStore
from commgraph.sample.dgs import DGSMasks
from commgraph.sample.maskfile import save_masks
from commgraph.train import fetch as fetch_module
from commgraph.train import owner as owner_module
from commgraph.train import streamed as streamed_module
from commgraph.train.fetch import FeatureFetch, InputRows, first_layers_aggregated
from forked import run_commgraph

HIDDEN, FEATURES = 8, 1433
SAMPLED = (
    "--sampler",
    "neighbor",
    "--fanout",
    "5,5",
    "--batch-size",
    "64",
    "--steps-per-epoch",
    "3",
    "--peer-rows",
    "network",
)


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """Cora in 1, 2 and 4 g3 parts."""
    root = tmp_path_factory.mktemp("owner")
    graph = load_graph("cora")
    made = {}
    for parts in (1, 2, 4):
        assignment, _ = partition_graph(graph, parts, "g3", 0)
        made[parts] = root / f"g3-{parts}"
        write_partition_set(
            graph,
            assignment,
            parts,
            made[parts],
            method="g3",
            seed=0,
            seconds=0.0,
            metrics=partition_metrics(graph, assignment, parts),
        )
    return made


def _train(partdir: Path, workers: int, out: Path, *options: str) -> list[dict]:
    job = run_commgraph(
        [
            "train",
            str(partdir),
            "--workers",
            str(workers),
            "--metrics-out",
            str(out),
            "--quiet",
            "--timeout",
            "60",
            "--epochs",
            "2",
            "--hidden",
            str(HIDDEN),
            "--seed",
            "3",
            *options,
        ]
    )
    assert job.returncode == 0, job.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def _both(partdir: Path, workers: int, tmp_path: Path, *options: str) -> tuple[list[dict], list[dict]]:
    """The same job shipping features and with the owners' first layer; their losses agree."""
    features = _train(partdir, workers, tmp_path / "features.jsonl", *options, "--first-layer", "features")
    owner = _train(partdir, workers, tmp_path / "owner.jsonl", *options, "--first-layer", "owner")
    for f, o in zip(features, owner, strict=True):
        assert o["loss"] == pytest.approx(f["loss"], abs=1e-5, rel=0)
        assert o["feature_bytes"] == 0
        assert o["activation_bytes"] == o["activation_grad_bytes"]
        assert f["activation_bytes"] == f["activation_grad_bytes"] == 0
    return features, owner


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [1, 2])
def test_sampled_sage_trains_as_with_fetched_features(sets, tmp_path, workers):
    features, owner = _both(sets[workers], workers, tmp_path, "--model", "sage", *SAMPLED)
    if workers == 1:
        assert all(o["activation_bytes"] == 0 for o in owner)
    else:  # each remote row's neighbour row, and a root row for each remote destination of layer 0
        for f, o in zip(features, owner):
            rows = f["feature_bytes"] // (4 * FEATURES)
            assert rows * 4 * HIDDEN < o["activation_bytes"] < 2 * rows * 4 * HIDDEN
            assert o["total_bytes"] == f["total_bytes"] - f["feature_bytes"] + 2 * o["activation_bytes"]


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sampled_gcn_on_4_workers_sends_one_hidden_row_per_remote_row(sets, tmp_path):
    features, owner = _both(sets[4], 4, tmp_path, "--model", "gcn", *SAMPLED)
    for f, o in zip(features, owner):  # GCN has no root term: exactly one hidden row per feature row
        assert f["feature_bytes"] > 0 and o["activation_bytes"] * FEATURES == f["feature_bytes"] * HIDDEN


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "workers, model, exchange", [(1, "sage", "pipelined"), (2, "sage", "pipelined"), (4, "gcn", "barrier")]
)
def test_full_graph_layer_0_exchanges_hidden_rows_each_step(sets, tmp_path, workers, model, exchange):
    features, owner = _both(sets[workers], workers, tmp_path, "--model", model, "--exchange", exchange)
    for f, o in zip(features, owner):  # layer 0's halo, hidden wide: the rows layer 1's exchange moves
        assert o["activation_bytes"] == f["halo_backward_bytes"] == o["halo_backward_bytes"]
        assert o["halo_forward_bytes"] == f["halo_forward_bytes"]


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_dgs_owners_apply_the_readers_feature_mask(sets, tmp_path):
    """Random masks from the first step: the owner zeroes the columns its reader left out before
    the transform, so the losses still agree, and the rows cost what neighbor's do."""
    pset = load_partition_set(sets[2])
    rng = np.random.default_rng(0)
    nodes = pset.assignment().shape[0]
    path = tmp_path / "masks.npz"
    save_masks(path, pset, [DGSMasks(rng.random(nodes), rng.random(FEATURES)) for _ in range(2)])
    options = ("--model", "sage", *SAMPLED, "--feature-rate", "0.3", "--dgs-masks", str(path), "--explain-cpu", "0")
    features, owner = _both(sets[2], 2, tmp_path, *[o if o != "neighbor" else "dgs" for o in options])
    columns = int(np.ceil(0.3 * FEATURES))
    for f, o in zip(features, owner):
        assert f["dgs_masked_steps"] == f["dgs_steps"] == o["dgs_masked_steps"] > 0
        rows = f["feature_bytes"] // (4 * columns)
        assert rows * 4 * columns == f["feature_bytes"] and rows * 4 * HIDDEN < o["activation_bytes"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "gat"], "--model gat's is not"),
        (["--model", "gin", "--sampler", "neighbor"], "--model gin's is not"),
        (["--model", "commnet"], "--model commnet's is not"),
        (["--exchange", "replicate"], "--exchange replicate has none"),
    ],
)
def test_models_whose_first_layer_is_not_linear_before_aggregation_are_refused(sets, args, message, capsys):
    assert main(["train", str(sets[2]), "--quiet", "--first-layer", "owner", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "--first-layer owner" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_streamed_owned_rows_give_the_built_tables_rows_and_gradients(monkeypatch, model):
    """A host store's rows are transformed chunk by chunk under checkpointing: the same rows, and
    the same weight gradients, as transforming the table at once."""
    torch.manual_seed(0)
    gnn = GNN(model, 12, 4, 3, dropout=0)
    store = FeatureStore.create(np.random.default_rng(1).random((50, 12), dtype=np.float32), torch.device("cpu"))
    rows = torch.randperm(50)[:40]
    monkeypatch.setattr(streamed_module, "CHUNK_BYTES", 4 * 12 * 7)  # chunks of 7 rows
    results = []
    for streamed in (False, True):
        gnn.zero_grad()
        table = owner_module.OwnerInput(store, rows, None, torch.zeros(0, dtype=torch.int64), streamed)
        neighbour, root = table._transformed(gnn)
        total = neighbour.square().sum() + (0 if root is None else root.sum())
        total.backward()
        results.append(
            (
                neighbour.detach(),
                None if root is None else root.detach(),
                [p.grad.clone() for p in gnn.parameters() if p.grad is not None],
            )
        )
    (n1, r1, g1), (n2, r2, g2) = results
    assert torch.allclose(n1, n2, atol=1e-6) and (r1 is None) == (r2 is None) == (model == "gcn")
    assert r1 is None or torch.allclose(r1, r2, atol=1e-6)
    assert len(g1) == len(g2) > 0 and all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g1, g2))


def _choose(asked="auto", **changes):
    shape = dict(model="sage", width=500, hidden=16, epochs=1, evaluations=1, sampled=False, replicate=False, workers=8)
    return choose_first_layer(asked, **{**shape, **changes})


def test_auto_takes_the_owners_first_layer_exactly_where_it_moves_fewer_floats_a_row():
    """hidden * (2 training passes + evaluations) against the halo's features once: 16 * 3 = 48 < 500."""
    assert _choose().mode == "owner" and "48" in _choose().reason
    assert _choose(model="gcn", width=49, epochs=1).mode == "owner"  # 48 < 49
    assert _choose(width=48).mode == "features"  # equal: the features, once
    assert _choose(epochs=200, evaluations=200, width=1433).mode == "features"  # the demo: 16 * 600 > 1433
    assert _choose(sampled=True, epochs=200, evaluations=31).mode == "owner"  # sampled: evaluation only, 496
    assert _choose(sampled=True, evaluations=32).mode == "features"  # 512


def test_one_worker_ships_features_unless_it_streams_them_from_host_memory():
    assert _choose(workers=1).mode == "features" and "no halo" in _choose(workers=1).reason
    assert _choose(workers=1, streamed=True).mode == "owner"
    assert _choose(workers=1, streamed=True, model="gat").mode == "features"


def test_auto_ships_features_where_the_owner_cannot_compute_layer_0():
    assert _choose(model="gat").mode == "features" and "not linear" in _choose(model="gat").reason
    assert _choose(model="gin").mode == "features"
    assert _choose(replicate=True).mode == "features" and "replicate" in _choose(replicate=True).reason


def test_an_asked_first_layer_is_kept_and_an_unknown_one_refused():
    assert _choose("features").mode == "features" and _choose("owner", width=8).mode == "owner"
    with pytest.raises(TrainingError, match="unknown --first-layer 'p3'"):
        _choose("p3")


def test_evaluation_passes_count_every_nth_epoch_and_the_last():
    assert evaluation_passes(200, 1) == 200
    assert evaluation_passes(10, 3) == 4  # 3, 6, 9 and 10
    assert evaluation_passes(9, 3) == 3
    assert evaluation_passes(2, 5) == 1


def _csr_block(rng, num_src: int, num_dst: int, dst_start: int) -> Block:
    """A block whose destination 3 has no in-edge and whose first edge is repeated."""
    counts = rng.integers(1, 6, size=num_dst)
    counts[3] = 0
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = rng.integers(0, num_src, size=int(indptr[-1]))
    indices[1] = indices[0]  # a repeated edge, counted twice by the mean
    degree = torch.from_numpy(rng.integers(0, 8, size=num_src).astype(np.float32))
    return Block.from_csr(num_src, indptr, indices, degree, dst_start=dst_start)


@pytest.mark.parametrize("layers", [1, 3])
@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_a_widening_first_layer_aggregated_chunk_by_chunk_gives_the_layers_rows_and_gradients(
    monkeypatch, model, layers
):
    """Layer 0 wider than its input: the input rows, read 10 entries at a time and added into their
    destinations' aggregates, then transformed, and (with a second layer) layer 0's output made 7
    destinations at a time and added into layer 1's aggregates, give the rows and the weight
    gradients of the layers on the whole table, dropout included (the same seed draws the same
    masks); destinations without in-edges, repeated edges and destination rows that do not start
    at row 0 included."""
    rng = np.random.default_rng(4)
    features, hidden, num_src = 6, 9, 60
    gnn = GNN(model, features, hidden, hidden, layers=layers, dropout=0.5)
    gnn.train()
    assert gnn.first_aggregates and not gnn.first_narrows
    blocks = [_csr_block(rng, num_src, 20, 5), _csr_block(rng, 20, 8, 3)][:layers]
    table = rng.random((num_src, features), dtype=np.float32)
    fetch = FeatureFetch.__new__(FeatureFetch)
    fetch.owned, fetch.device = np.arange(num_src), torch.device("cpu")
    fetch.store = FeatureStore.create(table, fetch.device)
    own = np.zeros(num_src, np.int8)
    rows = InputRows(fetch, np.arange(num_src), own, own.astype(np.int64), own, None, None, fetch.device)
    monkeypatch.setattr(fetch_module, "INPUT_CHUNK_BYTES", 4 * hidden * 7)  # layer 0's output: 7 rows at a time
    assert rows.chunk_rows == 10  # the input rows: 10 entries at a time
    weights = torch.from_numpy(rng.standard_normal((blocks[-1].num_dst, hidden)).astype(np.float32))
    threads = torch.get_num_threads()  # the chunks' additions run on one thread, then give the others back
    results = []
    for aggregated in (False, True):
        gnn.zero_grad()
        torch.manual_seed(0)
        if aggregated:
            out, done = first_layers_aggregated(gnn, rows, blocks)
            assert done == min(layers, 2)
        else:
            out = torch.from_numpy(table)
            for index, block in enumerate(blocks):
                out = gnn.layer(index, out, block)
        (out * weights).sum().backward()
        results.append((out.detach(), [p.grad.clone() for p in gnn.parameters() if p.grad is not None]))
    (reference, expected), (got, grads) = results
    assert got.shape == reference.shape and reference.abs().sum() > 0 and torch.allclose(got, reference, atol=1e-6)
    assert len(grads) == len(expected) > 0 and all(torch.allclose(a, b, atol=1e-5) for a, b in zip(grads, expected))
    assert torch.get_num_threads() == threads


@pytest.mark.parametrize("tables", [1, 2, 3])
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("mean", [False, True])
def test_the_compiled_table_sum_equals_the_chunked_one_bit_for_bit(tmp_path, mean, weighted, threads, tables):
    """Rows read straight from 1, 2 or 3 host tables (one of them a read-only memory map) by the
    compiled kernel, on 1 or 3 threads, give layer 0's aggregates and destination rows bit for bit
    as the chunked reads do (2 entries at a time), for rows read in a scattered order from tables
    that interleave, destinations without entries and repeated entries included."""
    rng = np.random.default_rng(7)
    block = _csr_block(rng, 40, 25, 4)
    adjacency = block.adj_t(gcn_norm=weighted)
    assert bool((adjacency.values() != 1).any()) == weighted
    heights = [100, 30, 60][:tables]
    parts = [rng.standard_normal((height, 5)).astype(np.float32) for height in heights]
    np.save(tmp_path / "last.npy", parts[-1])
    parts[-1] = np.load(tmp_path / "last.npy", mmap_mode="r")
    index = rng.integers(0, tables, size=40).astype(np.int8)
    rows = np.array([rng.integers(0, heights[t]) for t in index], dtype=np.int64)
    source = TableRows(tuple(parts), index, rows) if tables > 1 else TableRows.one(parts[0], rows)
    whole = np.concatenate(parts)  # position p's row, where the tables lie end to end
    at = np.concatenate([[0], np.cumsum(heights)[:-1]])[index] + rows
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        fused = aggregate_table(source, adjacency, mean, dst_start=4)
    finally:
        torch.set_num_threads(previous)
    chunked = aggregate_rows(lambda p: torch.from_numpy(whole[at[p]]), adjacency, mean, 2, dst_start=4)
    assert fused.rows.abs().sum() > 0
    assert torch.equal(fused.rows, chunked.rows) and torch.equal(fused.x_dst, chunked.x_dst)
    assert torch.equal(fused.x_dst, torch.from_numpy(whole[at[4:29]]))


def _mixed_rows(pset, num_rows: int, rng) -> InputRows:
    """Worker 0's input rows of ``num_rows`` nodes drawn from every part of ``pset``: its own from
    its feature store, the others' MAPPED from their parts' files."""
    owner = np.empty(sum(pset.part(k).owned.shape[0] for k in range(pset.num_parts)), np.int64)
    for k in range(pset.num_parts):
        owner[pset.part(k).owned] = k
    fetch = FeatureFetch.__new__(FeatureFetch)
    fetch.job, fetch.device = SimpleNamespace(pset=pset), torch.device("cpu")
    fetch.owned = np.asarray(pset.part(0).owned)
    fetch.store = FeatureStore.create(np.asarray(pset.part(0).features), fetch.device)
    inputs = rng.permutation(owner.shape[0])[:num_rows]
    mapped = np.flatnonzero(owner[inputs] != 0)
    source, slot = np.full(num_rows, fetch_module.OWN, np.int8), np.zeros(num_rows, np.int64)
    source[mapped], slot[mapped] = fetch_module.MAPPED, np.arange(mapped.shape[0])
    return InputRows(fetch, inputs, source, slot, owner[inputs[mapped]], None, None, fetch.device)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("mean", [False, True])
def test_own_and_mapped_rows_are_summed_straight_from_their_tables_as_read_through_take(tmp_path, mean, weighted):
    """A worker's input rows that lie in its store and in two peers' mapped feature files are
    summed from the three tables by the compiled kernel, bit for bit as read a chunk of entries at
    a time through ``take``, its time counted in ``gather_seconds``; a row from the network, a
    column cut or a float16 file takes the chunked path."""
    rng = np.random.default_rng(5)
    graph = load_graph("sbm:nodes=300,classes=3,features=6,degree=6,seed=0")
    assignment, _ = partition_graph(graph, 3, "chunk", 0)
    pset = write_partition_set(graph, assignment, 3, tmp_path / "f32", method="chunk", seed=0, seconds=0.0, metrics={})
    rows = _mixed_rows(pset, 60, rng)
    direct = rows._table_rows()
    assert direct is not None and len(direct.tables) == 3
    adjacency = _csr_block(rng, 60, 25, 4).adj_t(gcn_norm=weighted)
    fused = rows.aggregate(adjacency, mean, 4)
    assert rows.fetch.gather_seconds > 0
    chunked = aggregate_rows(rows.take, adjacency, mean, 2, dst_start=4)
    assert fused.rows.abs().sum() > 0
    assert torch.equal(fused.rows, chunked.rows) and torch.equal(fused.x_dst, chunked.x_dst)
    network = replace(rows, source=np.where(rows.source == fetch_module.MAPPED, fetch_module.NETWORK, rows.source))
    assert network._table_rows() is None and replace(rows, cut=np.arange(3))._table_rows() is None
    half = write_partition_set(
        graph, assignment, 3, tmp_path / "f16", method="chunk", seed=0, seconds=0.0, metrics={}, feature_dtype="float16"
    )
    assert _mixed_rows(half, 60, rng)._table_rows() is None


def test_balanced_ranges_cover_every_destination_once():
    """Threads' destination ranges cover 0..num_dst - 1 once, in order, each about a share of the
    entries; no more ranges than destinations."""
    crow = np.array([0, 10, 10, 12, 30, 31, 40])
    assert _balanced_ranges(crow, 2) == [(0, 4), (4, 6)]
    assert _balanced_ranges(crow, 1) == [(0, 6)]
    assert _balanced_ranges(np.array([0]), 2) == [(0, 0)]
    assert _balanced_ranges(np.array([0, 5]), 4) == [(0, 1)]
