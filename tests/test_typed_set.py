"""Typed partition sets (commgraph.partition.typed): a heterogeneous graph's set keeps every
relation's edges, each type's features and the target's labels exactly, each type balanced; the
CLI writes and describes one; docs/heterogeneous.md's block runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from commgraph.errors import PartitionError
from commgraph.graph import load_graph
from commgraph.partition import load_partition_set
from commgraph.partition.typed import make_typed_partition_set
from forked import launch_forked, run_commgraph

PAGE = Path(__file__).parents[1] / "docs" / "heterogeneous.md"
SPEC = "mag-shaped:scale=0.002,seed=0"


@pytest.fixture(scope="module")
def graph():
    return load_graph(SPEC)


@pytest.fixture(scope="module")
def typed_set(graph, tmp_path_factory):
    out = tmp_path_factory.mktemp("typed") / "set"
    make_typed_partition_set(graph, 2, out, seed=0)
    return load_partition_set(out, verify=True)


def test_every_relation_edge_is_stored_once_with_its_relation(graph, typed_set):
    typed = typed_set.manifest["typed"]
    offsets = np.array(typed["offsets"])
    assert typed["node_types"] == graph.node_types and [tuple(r) for r in typed["relations"]] == graph.edge_types
    found = {r: [] for r in range(len(graph.edge_types))}
    for k in range(2):
        part = typed_set.part(k)
        edge_type = np.load(typed_set.path / f"part-{k}/edge_type.npy")
        assert edge_type.dtype == np.int16 and edge_type.shape == part.indices.shape
        local = np.concatenate([part.owned, part.halo])
        dst = np.repeat(np.asarray(part.owned), np.diff(part.indptr))
        src = local[np.asarray(part.indices)]
        for r in found:
            found[r].append(np.stack([src[edge_type == r], dst[edge_type == r]]))
        assert np.bincount(edge_type, minlength=len(found)).tolist() == typed["relation_edges"][k]
    index = {t: i for i, t in enumerate(graph.node_types)}
    for r, (s_t, _, d_t) in enumerate(graph.edge_types):
        src, dst = graph.relations[graph.edge_types[r]].edge_list()
        want = sorted(zip(src + offsets[index[s_t]], dst + offsets[index[d_t]]))
        got = np.concatenate(found[r], axis=1)
        assert sorted(zip(got[0], got[1])) == want


def test_each_type_keeps_its_features_and_the_target_its_labels(graph, typed_set):
    typed = typed_set.manifest["typed"]
    offsets = np.array(typed["offsets"])
    target = graph.node_types.index(graph.target)
    for k in range(2):
        owned = np.asarray(typed_set.part(k).owned)
        for t, name in enumerate(graph.node_types):
            mine = owned[(owned >= offsets[t]) & (owned < offsets[t + 1])] - offsets[t]
            assert mine.size == typed["owned"][k][t]
            if name in graph.features:
                x = np.load(typed_set.path / f"part-{k}/x-{t}.npy")
                np.testing.assert_array_equal(x, graph.features[name][mine])
                assert typed["num_features"][name] == x.shape[1]
            else:
                assert not (typed_set.path / f"part-{k}/x-{t}.npy").exists()
        rows = (owned >= offsets[target]) & (owned < offsets[target + 1])
        labels = np.asarray(typed_set.part(k).labels)
        np.testing.assert_array_equal(labels[rows], graph.labels[owned[rows] - offsets[target]])
        assert np.all(labels[~rows] == -1)
    counts = np.array(typed["owned"])
    assert counts.sum(axis=0).tolist() == [graph.num_nodes[t] for t in graph.node_types]
    assert np.all(counts.max(axis=0) <= 1.2 * counts.mean(axis=0) + 1)  # each type balanced


def test_only_metis_balances_types(graph, tmp_path):
    with pytest.raises(PartitionError, match="use metis"):
        make_typed_partition_set(graph, 2, tmp_path / "r", method="random")
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_the_cli_makes_and_describes_a_typed_set(tmp_path):
    out = tmp_path / "set"
    made = run_commgraph(["partition", "make", SPEC, "--parts", "2", "--out", str(out)])
    assert made.returncode == 0, made.stderr[-2000:]
    info = run_commgraph(["partition", "info", str(out)])
    assert info.returncode == 0, info.stderr[-2000:]
    typed = load_partition_set(out).manifest["typed"]
    row = re.search(r"^paper +([\d,]+)/([\d,]+) +([\d,]+)/([\d,]+)$", info.stdout, re.M)
    cells = [int(cell.replace(",", "")) for cell in row.groups()]
    assert cells == [typed["owned"][0][0], typed["halo"][0][0], typed["owned"][1][0], typed["halo"][1][0]]
    assert re.search(r"^author__writes__paper +[\d,]+ +[\d,]+$", info.stdout, re.M)


def _relation_halo_rows(typed_set, k: int) -> list[int]:
    """The distinct halo rows each relation of part ``k`` reads, counted edge by edge."""
    part = typed_set.part(k)
    edge_type = np.load(typed_set.path / f"part-{k}/edge_type.npy")
    relations = len(typed_set.manifest["typed"]["relations"])
    return [
        len({int(i) for i, r in zip(part.indices, edge_type) if r == rel and i >= part.num_owned})
        for rel in range(relations)
    ]


def test_partition_info_and_plan_allgather_give_bytes_by_type_and_relation(typed_set):
    info = run_commgraph(["partition", "info", str(typed_set.path), "--json"])
    assert info.returncode == 0, info.stderr[-2000:]
    typed = typed_set.manifest["typed"]
    measured = json.loads(info.stdout)["typed_bytes"]
    widths = [typed["num_features"][t] for t in typed["node_types"]]  # paper 128, the others none
    src = [typed["node_types"].index(s) for s, _, _ in typed["relations"]]
    for k, part in enumerate(measured["parts"]):
        edge_bytes = typed_set.part(k).indices.dtype.itemsize + 2  # its column, its int16 relation
        assert part["owned"] == [4 * w * n for w, n in zip(widths, typed["owned"][k])]
        assert part["halo"] == [4 * w * n for w, n in zip(widths, typed["halo"][k])]
        assert part["edges"] == [edge_bytes * n for n in typed["relation_edges"][k]]
        rows = _relation_halo_rows(typed_set, k)
        assert part["relation_halo"] == [4 * widths[t] * n for t, n in zip(src, rows)]
    assert measured["node_types"]["author"] == {"owned": 0, "halo": 0}
    text = run_commgraph(["partition", "info", str(typed_set.path)]).stdout
    assert re.search(r"^paper +[\d.]+ KB/[\d.]+ KB +[\d.]+ KB/[\d.]+ KB$", text, re.M)

    argv = ["plan", "allgather", str(typed_set.path), "--topology", "dgx1-v100", "--feature-dim", "16"]
    plan = run_commgraph([*argv, "--planner", "p2p", "--json"])
    assert plan.returncode == 0, plan.stderr[-2000:]
    result = json.loads(plan.stdout)
    by_type = result["typed"]["by_type"]
    assert list(by_type.values()) == [64 * (a + b) for a, b in zip(*typed["halo"])]  # every type 16 wide
    assert sum(by_type.values()) == result["planners"]["p2p"]["bytes"]  # p2p moves each halo row once
    rows = np.add(_relation_halo_rows(typed_set, 0), _relation_halo_rows(typed_set, 1))
    assert list(result["typed"]["by_relation"].values()) == (64 * rows).tolist()


def test_the_docs_block_runs(tmp_path, monkeypatch):
    section = PAGE.read_text().split("## Partition sets", 1)[1]
    blocks = re.findall(r"^```bash runnable\n(.*?)^```$", section, re.S | re.M)
    monkeypatch.chdir(tmp_path)
    for line in "".join(blocks).splitlines():
        result = run_commgraph(line.split()[1:])
        assert result.returncode == 0, result.stderr[-2000:]
    assert "halo rows per layer by relation" in result.stdout and "author__writes__paper" in result.stdout


class _World:
    size = 2

    def __init__(self, rank):
        self.rank = rank


class _Comm:  # this process alone: the barrier is a no-op
    def barrier(self):
        pass


@pytest.mark.parametrize("rank", [0, 1])
def test_a_typed_set_gives_the_part_the_hetero_data_gives(graph, typed_set, rank, tmp_path):
    """cg.partition(DIR) and cg.partition(hetero_data) of the same graph: the same part, attribute
    for attribute and relation for relation."""
    from commgraph.graph import to_pyg
    from commgraph.pyg.hetero import partition_hetero, partition_typed_set
    from commgraph.pyg.world import Session

    session = Session(_World(rank), _Comm())
    data = to_pyg(graph)
    want = partition_hetero(session, data, "metis", 0, tmp_path / "bridge")
    got = partition_typed_set(session, typed_set)
    assert got.node_types == want.node_types and got.edge_types == want.edge_types
    assert {"x", "y", "train_mask", "n_id", "num_owned"} <= set(want[graph.target].keys())
    assert want[graph.target].num_nodes > want[graph.target].num_owned  # a halo, filled from the peer
    for t in want.node_types:
        assert sorted(got[t].keys()) == sorted(want[t].keys()), t
        for key, value in want[t].items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(got[t][key], value), (t, key)
            else:
                assert got[t][key] == value, (t, key)
    for et in want.edge_types:
        assert torch.equal(got[et].edge_index, want[et].edge_index), et


@pytest.mark.multiproc
@pytest.mark.slow
def test_a_to_hetero_model_trains_the_same_on_both_routes(typed_set, tmp_path, monkeypatch):
    from commgraph.graph import load_graph
    from typed_set_driver import CLASSES, EPOCHS

    assert load_graph(SPEC).num_classes == CLASSES
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    losses = {}
    for route in ("set", "data"):
        out = tmp_path / f"{route}.json"
        argv = [str(out), route, str(typed_set.path)]
        assert launch_forked(argv, 2, module="typed_set_driver", grace=30, threads_per_worker=1) == 0
        losses[route] = json.loads(out.read_text())
    assert len(losses["set"]) == EPOCHS and np.isfinite(losses["set"]).all()
    np.testing.assert_allclose(losses["set"], losses["data"], rtol=1e-6)
