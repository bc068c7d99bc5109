import json
from pathlib import Path

import numpy as np
import pytest

from commgraph.errors import PartitionError
from commgraph.graph import from_edges, load_graph, nodefile, sbm
from commgraph.partition import (
    MANIFEST,
    METHODS,
    RemoteTracker,
    g3,
    is_partition_set,
    load_partition_set,
    partition_graph,
    partition_metrics,
    write_partition_set,
)
from commgraph.partition import store as store_module
from commgraph.partition.metis import metis_multi_constraint, undirected_adjacency
from commgraph.partition.metrics import remote_pairs


@pytest.fixture(scope="module")
def cora():
    return load_graph("cora")


@pytest.mark.parametrize("method", METHODS)
def test_every_method_assigns_every_node_deterministically(cora, method):
    a, _ = partition_graph(cora, 4, method, seed=3)
    b, _ = partition_graph(cora, 4, method, seed=3)
    assert a.shape == (cora.num_nodes,) and a.min() == 0 and a.max() == 3
    assert np.array_equal(a, b)
    sizes = np.bincount(a, minlength=4)
    if method in ("chunk", "random"):
        assert sizes.max() - sizes.min() <= 1


def test_chunk_is_contiguous(cora):
    a, _ = partition_graph(cora, 3, "chunk")
    assert np.all(np.diff(a) >= 0)


@pytest.mark.parametrize("parts", [4, 8])
def test_g3_balances_compute_and_communication_on_cora(cora, parts):
    g3 = partition_metrics(cora, partition_graph(cora, parts, "g3")[0], parts)
    metis = partition_metrics(cora, partition_graph(cora, parts, "metis")[0], parts)
    assert g3["remote_min_max"] >= 0.95
    assert g3["node_imbalance"] <= 1.05 and g3["edge_imbalance"] <= 1.05
    assert g3["total_remote"] <= 1.10 * metis["total_remote"]
    assert metis["remote_min_max"] < 0.95  # what G3 fixes: METIS leaves communication unbalanced


REAL_GRAPHS = Path(__file__).parents[1] / "benchmarks" / "data"


def _with_isolated_node(graph, at):
    """``graph`` with one edgeless node inserted at id ``at``, every later id shifted by one: what a
    SNAP header's isolated node does to the ids (email-Enron's)."""
    src, dst = graph.edge_list()
    return from_edges(src + (src >= at), dst + (dst >= at), graph.num_nodes + 1)


@pytest.mark.parametrize("graph", ["cora with an isolated node", "French transmission grid"])
def test_g3_stays_within_1_10x_of_metis_on_real_graphs(cora, graph):
    """One isolated node in the middle of Cora's ids moved a single start of g3 from 1.03x to 1.12x
    METIS's volume at 8 parts (as the header's isolated node did on a held-out SNAP graph, 1.10x to
    1.20x); a sparse grid is another shape. Node and degree balance hold either way."""
    g = (
        _with_isolated_node(cora, cora.num_nodes // 2)
        if graph.startswith("cora")
        else load_graph(REAL_GRAPHS / "rte6515.txt.gz")
    )
    g3 = partition_metrics(g, partition_graph(g, 8, "g3")[0], 8)
    metis = partition_metrics(g, partition_graph(g, 8, "metis")[0], 8)
    assert g3["total_remote"] <= 1.10 * metis["total_remote"]
    assert g3["node_imbalance"] <= 1.05 and g3["edge_imbalance"] <= 1.05


def test_g3_reports_its_stages(cora):
    """Stage lines as they happen; what stage 1 left and stage 2 fixed, in the details."""
    lines = []
    assignment, details = partition_graph(cora, 4, "g3", log=lines.append)
    assert [line.split(":")[0] for line in lines] == [
        f"g3 stage {stage} (start {start} of {g3.STARTS})" for start in range(1, g3.STARTS + 1) for stage in (1, 1, 2)
    ]
    assert details["stage1_remote_min_max"] < 0.95 <= partition_metrics(cora, assignment, 4)["remote_min_max"]
    assert details["stage1_total_remote"] > 0 and details["kept_swaps"] > 0
    assert details["stage1_seconds"] >= 0 and details["stage2_seconds"] >= 0


def test_metrics_by_hand():
    # path 0-1-2-3 split {0,1} {2,3}: each part needs one remote node, one undirected edge cut
    g = from_edges([0, 1, 2], [1, 2, 3])
    m = partition_metrics(g, np.array([0, 0, 1, 1]), 2)
    assert [p["num_remote"] for p in m["parts"]] == [1, 1]
    assert [p["num_edges"] for p in m["parts"]] == [3, 3]
    assert m["edge_cut"] == 2 and m["total_remote"] == 2 and m["remote_min_max"] == 1.0


def test_incremental_tracking_matches_a_full_recount():
    g = sbm(nodes=600, classes=3, features=2, degree=8, seed=2)
    rng = np.random.default_rng(0)
    parts = 5
    tracker = RemoteTracker(g, rng.integers(0, parts, g.num_nodes), parts)
    for _ in range(400):
        tracker.move(int(rng.integers(g.num_nodes)), int(rng.integers(parts)))
        recount = np.bincount(remote_pairs(g, tracker.assignment)[0], minlength=parts)
        assert np.array_equal(tracker.remote, recount)
    counts = np.zeros((parts, g.num_nodes), dtype=np.int64)
    src, dst = g.edge_list()
    np.add.at(counts, (tracker.assignment[dst], src), 1)
    assert np.array_equal(tracker.count, counts)


def test_directed_graph_with_self_loops_tracks_exactly():
    rng = np.random.default_rng(1)
    g = from_edges(rng.integers(0, 80, 400), rng.integers(0, 80, 400), 80, symmetrize=False, self_loops=True)
    tracker = RemoteTracker(g, rng.integers(0, 3, 80), 3)
    for _ in range(200):
        tracker.move(int(rng.integers(80)), int(rng.integers(3)))
    assert np.array_equal(tracker.remote, np.bincount(remote_pairs(g, tracker.assignment)[0], minlength=3))


def test_volume_refinement_lowers_the_exact_volume_within_the_limits():
    """From METIS's edge-cut partition (what g3 starts from on large graphs), every move must lower
    the total remote count, the counters must still match a full recount, and both caps hold."""
    g = load_graph("rmat:nodes=4000,edges=32000,seed=1")
    weights = np.stack([np.ones(g.num_nodes, dtype=np.int64), g.in_degrees()], axis=1)
    parts = 4
    start = metis_multi_constraint(undirected_adjacency(g), weights, parts, 0, 1.04, volume=False)
    tracker = RemoteTracker(g, start, parts)
    before = int(tracker.remote.sum())
    moves = tracker.refine(passes=50)
    after = partition_metrics(g, tracker.assignment, parts)
    assert moves > 0 and after["total_remote"] < before
    assert np.array_equal(tracker.remote, [p["num_remote"] for p in after["parts"]])
    assert after["node_imbalance"] <= 1.05 and after["edge_imbalance"] <= 1.05
    assert tracker.refine(passes=50) == 0  # converged: no single move within the caps helps


def test_g3_on_a_large_graph_refines_an_edge_cut_partition(monkeypatch):
    """The large-graph path (edge-cut stage 1 + refinement), forced on a small graph."""
    g = load_graph("rmat:nodes=20000,edges=160000,seed=0,a=0.5,b=0.1,c=0.1")
    small = partition_graph(g, 4, "g3")
    monkeypatch.setattr(g3, "SMALL_GRAPH_EDGES", 0)
    assignment, details = partition_graph(g, 4, "g3")
    m = partition_metrics(g, assignment, 4)
    assert details["refine_moves"] > 0 and small[1]["refine_moves"] == 0
    assert m["remote_min_max"] >= 0.95 and m["node_imbalance"] <= 1.05 and m["edge_imbalance"] <= 1.05
    assert m["total_remote"] <= 1.05 * partition_metrics(g, small[0], 4)["total_remote"]
    assert np.array_equal(partition_graph(g, 4, "g3")[0], assignment)


def test_isolated_nodes_and_several_components_partition_fine():
    g = from_edges([0, 1, 3, 4, 6], [1, 2, 4, 5, 7], 12)  # 3 paths and 4 isolated nodes
    assert g.stats()["isolated_nodes"] == 4 and g.stats()["components"] == 7
    for method in METHODS:
        a, _ = partition_graph(g, 3, method)
        assert set(np.unique(a)) == {0, 1, 2}


@pytest.mark.parametrize(
    "parts, method, message",
    [
        (0, "g3", ">= 1"),
        (-2, "metis", ">= 1"),
        (3000, "g3", "cannot split 2708 nodes into 3000"),
        (4, "kmeans", "unknown method 'kmeans'"),
    ],
)
def test_bad_requests(cora, parts, method, message):
    with pytest.raises(PartitionError, match=message):
        partition_graph(cora, parts, method)


def write(graph, parts, out, method="g3", force=False):
    a, details = partition_graph(graph, parts, method)
    metrics = partition_metrics(graph, a, parts)
    return a, write_partition_set(
        graph, a, parts, out, method=method, seed=0, seconds=0.0, metrics=metrics, force=force
    )


def test_partition_set_round_trip_and_halo_exchange_equals_global_aggregation(cora, tmp_path):
    parts = 4
    assignment, _ = write(cora, parts, tmp_path / "p")
    pset = load_partition_set(tmp_path / "p", cora)
    assert np.array_equal(pset.assignment(), assignment)
    # a mean aggregation computed part by part, with halo rows received from their owners,
    # equals the one computed on the whole graph
    x = cora.features
    src, dst = cora.edge_list()
    expected = np.zeros_like(x)
    np.add.at(expected, dst, x[src])
    expected /= np.maximum(cora.in_degrees(), 1)[:, None]
    loaded = [pset.part(k) for k in range(parts)]
    for part in loaded:
        local_x = np.zeros((part.num_owned + part.num_halo, x.shape[1]), dtype=x.dtype)
        local_x[: part.num_owned] = part.features
        for peer in range(parts):
            if peer != part.index:  # what the peer sends, in the order this part expects it
                sent = loaded[peer].features[loaded[peer].send_to(part.index)]
                local_x[part.num_owned :][part.recv_from(peer)] = sent
        rows = np.repeat(np.arange(part.num_owned), np.diff(part.indptr))
        agg = np.zeros((part.num_owned, x.shape[1]), dtype=x.dtype)
        np.add.at(agg, rows, local_x[part.indices])
        agg /= np.maximum(part.degree[: part.num_owned], 1)[:, None]
        assert np.allclose(agg, expected[part.owned], atol=1e-6)
        assert np.array_equal(part.labels, cora.labels[part.owned])
        assert np.array_equal(part.halo_owner, assignment[part.halo])
        assert np.all(part.halo_owner != part.index)
    assert sum(p.num_owned for p in loaded) == cora.num_nodes
    assert sum(p.num_halo for p in loaded) == pset.manifest["metrics"]["total_remote"]


@pytest.mark.parametrize("dtype", [np.float32, np.int64, bool])
def test_per_node_data_is_written_in_chunks_as_np_save_writes_it(tmp_path, monkeypatch, dtype):
    monkeypatch.setattr(nodefile, "CHUNK_BYTES", 100)  # several chunks and a short last one
    values = (np.random.default_rng(0).standard_normal((50, 3)) > 0).astype(dtype)
    rows = np.array([4, 0, 49, 7, 7, 12, 30, 2, 11])
    for array in (values, values[:, 0]):  # a table, and one value per node
        digest = store_module._save_rows(tmp_path / "chunked.npy", array, rows)
        np.save(tmp_path / "whole.npy", array[rows])
        assert (tmp_path / "chunked.npy").read_bytes() == (tmp_path / "whole.npy").read_bytes()
        assert digest == store_module._sha256(tmp_path / "whole.npy")


def test_partition_set_refuses_mismatches_and_damage(cora, tmp_path):
    write(cora, 2, tmp_path / "p", method="chunk")
    with pytest.raises(PartitionError, match="already exists; pass --force"):
        write(cora, 2, tmp_path / "p", method="chunk")
    write(cora, 3, tmp_path / "p", method="chunk", force=True)
    assert load_partition_set(tmp_path / "p").num_parts == 3
    assert [p.name for p in tmp_path.iterdir()] == ["p"]  # no temporary or old directories left
    other = sbm(nodes=100, classes=2, features=3)
    with pytest.raises(PartitionError, match="was made from graph 'cora'.*re-partition"):
        load_partition_set(tmp_path / "p", other)
    (tmp_path / "p" / "part-1" / "owned.npy").write_bytes(b"garbage")
    damaged = load_partition_set(tmp_path / "p")  # a part's files are checked when it is first read
    damaged.part(0)
    with pytest.raises(PartitionError, match="owned.npy does not match its checksum"):
        damaged.part(1)
    with pytest.raises(PartitionError, match="owned.npy does not match its checksum"):
        load_partition_set(tmp_path / "p").verify_all()
    assert is_partition_set(tmp_path / "p") and not is_partition_set(tmp_path)
    assert not is_partition_set(tmp_path / "p" / MANIFEST) and not is_partition_set(tmp_path / "missing")
    with pytest.raises(PartitionError, match="not a partition set"):
        load_partition_set(tmp_path)
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    manifest["format_version"] = 99
    (tmp_path / "p" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PartitionError, match="format 99"):
        load_partition_set(tmp_path / "p")


def test_failed_write_leaves_nothing(cora, tmp_path, monkeypatch):
    import commgraph.partition.store as store

    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(store, "_sha256", explode)
    with pytest.raises(RuntimeError):
        write(cora, 2, tmp_path / "p", method="chunk")
    assert list(tmp_path.iterdir()) == []


def test_the_whole_structure_is_stored_once_in_its_narrowest_types(cora, tmp_path):
    """``structure/``: the graph's own in-edge CSR with int32 sources, loop-free degrees and int8
    owners, memory-mapped read-only (what every sampling worker of a machine shares)."""
    from commgraph.graph.core import loop_free_in_degrees

    assignment, _ = write(cora, 3, tmp_path / "p")
    pset = load_partition_set(tmp_path / "p", cora)
    indptr, indices = pset.in_edges()
    assert indices.dtype == np.int32 and pset.assignment().dtype == np.int8
    assert isinstance(indices, np.memmap) and not indices.flags.writeable
    assert np.array_equal(indptr, cora.indptr) and np.array_equal(indices, cora.indices)
    assert np.array_equal(pset.structure("degree"), loop_free_in_degrees(cora.indptr, cora.indices))
    assert np.array_equal(pset.assignment(), assignment)
    (tmp_path / "p" / "structure" / "indices.npy").write_bytes(b"damaged")
    with pytest.raises(PartitionError, match="structure/indices.npy does not match its checksum"):
        load_partition_set(tmp_path / "p").in_edges()


@pytest.mark.parametrize("parts, dtype", [(2, np.int8), (128, np.int8), (129, np.int16), (40000, np.int32)])
def test_owner_ids_take_the_narrowest_type_that_holds_them(parts, dtype):
    assert store_module.owner_dtype(parts) == np.dtype(dtype)


@pytest.mark.parametrize("owned_size", [0, 50, 70_000])  # 70,000: searched in ascending order
def test_owned_positions_are_where_each_owned_id_lies(monkeypatch, owned_size):
    """A range of owned ids (a subtraction), scattered owned ids (a search; over the sorted ids when
    there are many) and repeated, unordered queries: each position holds the asked id."""
    rng = np.random.default_rng(3)
    contiguous = np.arange(40, 40 + owned_size, dtype=np.int32)
    scattered = np.sort(rng.choice(10 * max(owned_size, 1), size=owned_size, replace=False))
    for owned in (contiguous, scattered):
        ids = owned[rng.integers(0, owned_size, size=3 * owned_size)] if owned_size else owned[:0]
        positions = store_module.owned_positions(owned, ids)
        assert positions.dtype == np.int64 and positions.shape == ids.shape
        assert np.array_equal(owned[positions], ids)
        assert np.array_equal(positions, np.searchsorted(owned, ids))
