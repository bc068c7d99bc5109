"""DGS on a typed graph (commgraph.sample.hetero.TypedDGS): at fanout -1 it draws what uniform
sampling draws; at a finite fanout fewer of a batch's rows are remote; masks per node type; the
bridge's ``cg.NeighborLoader(hetero, sampler="dgs")``; and ``--fanout`` per relation, its grammar
and its checks against a graph's relations."""

from __future__ import annotations

import numpy as np
import pytest

from commgraph.errors import BridgeError, SamplingError, TrainingError
from commgraph.graph import load_graph
from commgraph.partition import load_partition_set
from commgraph.partition.typed import make_typed_partition_set
from commgraph.sample.base import Scratch
from commgraph.sample.dgs import DGSMasks
from commgraph.sample.hetero import TypedDGS, TypedRelations, sample_hetero_hops
from commgraph.sample.options import format_fanouts, hop_fanouts, parse_fanouts, relation_fanouts
from commgraph.train import TrainConfig

SPEC = "mag-shaped:scale=0.001,seed=0"


@pytest.fixture(scope="module")
def typed(tmp_path_factory):
    """The relations of a 2-part typed set, each type's owners, and part 0's training papers."""
    folder = tmp_path_factory.mktemp("dgs") / "k2"
    make_typed_partition_set(load_graph(SPEC), 2, folder, seed=0)
    pset = load_partition_set(folder, verify=False)
    relations = TypedRelations.read(pset)
    owner = np.asarray(pset.structure("owner"))
    offsets = relations.offsets
    owners = {t: owner[offsets[i] : offsets[i + 1]] for i, t in enumerate(relations.node_types)}
    return relations, owners, np.flatnonzero(owners["paper"] == 0)


def _hops(typed, fanout, dgs=None, seed=0):
    relations, _, seeds = typed
    fanouts = {r: fanout for r in relations.relations}
    scratch = {t: Scratch() for t in relations.node_types}
    rng = np.random.default_rng(seed)
    return sample_hetero_hops(relations.relations, relations.num_nodes, {"paper": seeds}, fanouts, rng, scratch, dgs)


def _remote_rows(typed, hops) -> tuple[int, int]:
    """A batch's rows another part owns, and all its rows."""
    owners = typed[1]
    remote = sum(int(np.count_nonzero(owners[t][nodes] != 0)) for t, nodes in hops.nodes.items())
    return remote, sum(nodes.shape[0] for nodes in hops.nodes.values())


def test_at_fanout_minus_one_dgs_draws_every_neighbour(typed):
    uniform, dgs = _hops(typed, [-1, -1]), _hops(typed, [-1, -1], TypedDGS(typed[1], 0))
    for t in uniform.nodes:
        assert np.array_equal(uniform.nodes[t], dgs.nodes[t])
    for r in uniform.edges:
        assert np.array_equal(uniform.edges[r], dgs.edges[r]) and np.array_equal(uniform.slots[r], dgs.slots[r])


@pytest.mark.parametrize("rule", ["keep-local", "split"])
def test_at_a_finite_fanout_fewer_rows_are_remote(typed, rule):
    """Part 0's training papers, fanout 4 per relation and hop, epsilon 0.25, over 5 draws: the share of the
    batch's rows that part 1 owns falls against uniform sampling's; with ``split`` no node draws
    more than its fanout over a relation."""
    dgs = TypedDGS(typed[1], 0, epsilon=0.25, rule=rule)
    uniform = np.array([_remote_rows(typed, _hops(typed, [4, 4], seed=s)) for s in range(5)]).sum(0)
    drawn = [_hops(typed, [4, 4], dgs, seed=s) for s in range(5)]
    local = np.array([_remote_rows(typed, h) for h in drawn]).sum(0)
    assert local[0] / local[1] < uniform[0] / uniform[1] - 0.02
    if rule == "split":
        for hops in drawn:
            for edges in hops.edges.values():
                assert np.bincount(edges[1]).max(initial=0) <= 4


def test_a_remote_node_of_mask_zero_is_never_drawn(typed):
    owners = typed[1]
    masks = {t: DGSMasks(np.ones(o.shape[0]), np.zeros(0)) for t, o in owners.items()}
    masks["author"] = DGSMasks((owners["author"] == 0).astype(float), np.zeros(0))  # every remote author: 0
    dgs = TypedDGS(owners, 0)
    dgs.set_masks(masks)
    for fanout in ([-1, -1], [3, 3]):
        authors = _hops(typed, fanout, dgs).nodes["author"]
        assert authors.size and np.all(owners["author"][authors] == 0)


def test_bad_masks_and_options_are_refused(typed):
    owners = typed[1]
    dgs = TypedDGS(owners, 0)
    with pytest.raises(SamplingError, match="every node type once"):
        dgs.set_masks({"paper": DGSMasks(np.ones(owners["paper"].shape[0]), np.zeros(0))})
    masks = {t: DGSMasks(np.ones(o.shape[0]), np.zeros(0)) for t, o in owners.items()}
    masks["field_of_study"] = DGSMasks(np.ones(3), np.zeros(0))
    with pytest.raises(SamplingError, match="'field_of_study'.s node mask has shape"):
        dgs.set_masks(masks)
    with pytest.raises(SamplingError, match="--epsilon"):
        TypedDGS(owners, 0, epsilon=2.0)
    with pytest.raises(SamplingError, match="--dgs-rule"):
        TypedDGS(owners, 0, rule="all")


def test_the_bridges_hetero_loader_samples_with_dgs(bridge_alone, tmp_path, monkeypatch):
    """At fanout -1 DGS's batches are the neighbour sampler's; with two ranks' owners (rank 0's
    ranges) its draws at fanout 2 hold fewer rank-1 rows."""
    import commgraph.pyg as cg
    from commgraph.pyg.hetero_loader import range_owners
    from pyg_hetero_loader_driver import make_data

    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path))
    data = make_data()
    made = {
        name: list(cg.NeighborLoader(data, num_neighbors=[-1, -1], input_nodes="paper", batch_size=40, sampler=name))
        for name in ("neighbor", "dgs")
    }
    for uniform, dgs in zip(made["neighbor"], made["dgs"], strict=True):
        for t in data.node_types:
            assert np.array_equal(uniform[t].n_id, dgs[t].n_id)
        for r in data.edge_types:
            assert np.array_equal(uniform[r].e_id, dgs[r].e_id)
    loader = cg.NeighborLoader(data, num_neighbors=[2, 2], input_nodes="paper", sampler="dgs", epsilon=0.2)
    owners = range_owners(loader.num_nodes, 2)
    assert owners["paper"].tolist() == [0] * 60 + [1] * 60
    dgs = TypedDGS(owners, 0, epsilon=0.2)
    seeds = {"paper": np.arange(60)}
    counts = []
    for draw in (None, dgs):
        rows = 0
        for s in range(10):
            hops = sample_hetero_hops(
                loader.relations,
                loader.num_nodes,
                seeds,
                loader.num_neighbors,
                np.random.default_rng(s),
                {t: Scratch() for t in loader.num_nodes},
                draw,
            )
            rows += sum(int(np.count_nonzero(owners[t][n] != 0)) for t, n in hops.nodes.items())
        counts.append(rows)
    assert counts[1] < counts[0]
    with pytest.raises(SamplingError, match="--dgs-rule"):
        cg.NeighborLoader(data, num_neighbors=[2], input_nodes="paper", sampler="dgs", dgs_rule="all")
    with pytest.raises(BridgeError, match="set_masks is DGS's"):
        cg.NeighborLoader(data, num_neighbors=[2], input_nodes="paper").set_masks({})


# -- --fanout per relation ---------------------------------------------------------------------------

WRITES, CITES = ("author", "writes", "paper"), ("paper", "cites", "paper")


def test_the_per_relation_grammar():
    assert parse_fanouts("author__writes__paper=10,5; paper__cites__paper=-1,2;", 2) == {
        "author__writes__paper": (10, 5),
        "paper__cites__paper": (-1, 2),
    }
    assert parse_fanouts("10,5", 2) == (10, 5)
    text = "author__writes__paper=10,5;paper__cites__paper=-1,2"
    assert format_fanouts(parse_fanouts(text)) == text and format_fanouts((10, 5)) == "10,5"
    assert hop_fanouts({WRITES: [10, 5], CITES: [-1, 2]}) == (-1, 4)
    assert hop_fanouts((10, 5)) == (10, 5)
    for text, message in [
        ("writes=10,5", "SRC__REL__DST=K,K"),
        ("author__writes__paper=", "SRC__REL__DST=K,K"),
        ("author__writes__paper=10,5;author__writes__paper=1,1", "names relation author__writes__paper twice"),
        ("author__writes__paper=10,x", "integers separated by commas"),
        ("author__writes__paper=10,5,1", r"layers 2.*\(relation author__writes__paper\)"),
    ]:
        with pytest.raises(SamplingError, match=message):
            parse_fanouts(text, 2)
    with pytest.raises(SamplingError, match=r"lists of \[1, 2\] hops"):
        parse_fanouts("author__writes__paper=10;paper__cites__paper=1,1")


def test_a_relation_missed_or_unknown_is_refused_by_name():
    relations = [WRITES, CITES, ("paper", "rev_writes", "author")]
    given = {WRITES: [10, 5]}
    with pytest.raises(SamplingError, match="no fanouts for relations paper__cites__paper, paper__rev_writes__author"):
        relation_fanouts(given, relations)
    with pytest.raises(SamplingError, match="names relation paper__cited_by__paper but the graph has none such"):
        relation_fanouts({**given, ("paper", "cited_by", "paper"): [1, 1]}, relations)
    both = relation_fanouts({r: [3, 2] for r in reversed(relations)}, relations)
    assert list(both) == relations and relation_fanouts([3, 2], relations) == {r: [3, 2] for r in relations}


def test_per_relation_fanouts_are_rgcns_alone_and_dgs_takes_no_explainer():
    per_relation = "author__writes__paper=10,5;paper__cites__paper=15,10"
    config = TrainConfig.build(model="rgcn", sampler="dgs", fanouts=parse_fanouts(per_relation), epsilon=0.05)
    assert config.sampling.fanouts == {"author__writes__paper": (10, 5), "paper__cites__paper": (15, 10)}
    with pytest.raises(SamplingError, match="per relation are for a heterogeneous graph"):
        TrainConfig.build(model="sage", sampler="neighbor", fanouts=parse_fanouts(per_relation))
    for option in ({"explain_cpu": 1.0}, {"dgs_masks_out": "masks.npz"}, {"feature_rate": 0.5}):
        with pytest.raises(TrainingError, match="drop "):
            TrainConfig.build(model="rgcn", sampler="dgs", **option)
