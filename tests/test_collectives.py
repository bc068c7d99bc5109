"""Synthesis at cluster scale: the warm-started master, the machine's symmetry, and the all-gather /
reduce-scatter LP (commgraph.plan.colgen, .symmetry, .gather)."""

import json

import numpy as np
import pytest

from commgraph.cli.main import main
from commgraph.errors import PlanError
from commgraph.plan import plan_allreduce, price
from commgraph.plan.allreduce import CostGraph
from commgraph.plan.allreduce.lp import routed_trees
from commgraph.plan.colgen import Column, pack
from commgraph.plan.gather import plan_collective
from commgraph.plan.packing import gather_bound
from commgraph.plan.symmetry import find_symmetry
from commgraph.topology import Device, Link, Topology, load_preset


def _forestcoll_a100(boxes: int) -> Topology:
    """ForestColl's A100 model (benchmarks/allreduce_plan.py): 8 GPUs per box at 300 GB/s to one
    NVSwitch, a 25 GB/s NIC each, NIC g on IB switch g % 2."""
    devices = [Device("ib0", "switch", "fabric"), Device("ib1", "switch", "fabric")]
    links = []
    for box in range(boxes):
        devices.append(Device(f"b{box}.nvswitch", "nvswitch", f"b{box}"))
        for g in range(8):
            devices += [Device(f"b{box}.gpu{g}", "gpu", f"b{box}"), Device(f"b{box}.nic{g}", "nic", f"b{box}")]
            links += [
                Link(f"b{box}.gpu{g}", f"b{box}.nvswitch", "nvswitch", 1, 300.0, 1.0),
                Link(f"b{box}.gpu{g}", f"b{box}.nic{g}", "pcie", 1, 25.0, 1.0),
                Link(f"b{box}.nic{g}", f"ib{g % 2}", "infiniband", 1, 25.0, 1.0),
            ]
    return Topology(f"forestcoll-a100-{boxes}box", devices, links, gpu_forwarding=True)


def test_symmetry_of_a_dgx_a100_cluster():
    topology = load_preset("2xdgx-a100-ib")
    symmetry = find_symmetry(topology, [d.id for d in topology.workers])
    assert len(symmetry.shifts) == 2  # the two servers swap
    names = sorted(tuple(topology.devices[i].id for i in group) for group in symmetry.members)
    assert ("n0.nvswitch0", "n0.nvswitch1", "n0.nvswitch2", "n0.nvswitch3", "n0.nvswitch4", "n0.nvswitch5") in names
    assert ("n1.nic0", "n1.nic1") in names and len(names) == 10  # per server: the planes, 4 pairs of NICs
    index = topology.index
    shifted = symmetry.shifts[1]
    assert topology.devices[shifted[index["n0.gpu3"]]].id == "n1.gpu3"
    assert topology.devices[shifted[index["netswitch"]]].id == "netswitch"
    # a GPU's links to the six planes are one orbit, the same GPU position on both servers too
    link = {(l.a, l.b): k for k, l in enumerate(topology.links)}
    same = {symmetry.classes[2 * link[f"n{s}.gpu3", f"n{s}.nvswitch{p}"]] for s in range(2) for p in range(6)}
    assert len(same) == 1
    gpu3, gpu4 = (symmetry.classes[2 * link[f"n0.gpu{g}", "n0.nvswitch0"]] for g in (3, 4))
    assert gpu3 != gpu4  # GPU positions are not interchanged
    # one path through a plane: its two images, each split evenly over the six planes
    path = (index["n0.gpu0"], index["n0.nvswitch2"], index["n0.gpu1"])
    images = symmetry.expand(path)
    assert len(images) == 12 and sum(share for _, share, _ in images) == pytest.approx(2.0)
    assert {topology.devices[p[0]].id for k, _, p in images if k == 1} == {"n1.gpu0"}


def test_servers_that_differ_have_no_shift():
    topology = load_preset("2xdgx-a100-ib")
    links = list(topology.links)
    k = next(i for i, l in enumerate(links) if l.a == "n1.gpu0" and l.b.startswith("n1.pcie"))
    links[k] = Link(links[k].a, links[k].b, links[k].kind, links[k].count, 12.0, links[k].latency_us)
    slower = Topology("uneven", list(topology.devices), links)
    symmetry = find_symmetry(slower, [d.id for d in slower.workers])
    assert len(symmetry.shifts) == 1
    plan = plan_allreduce("lp", slower, 1e9)  # still exact: the certificate meets the value
    assert plan.notes["certificate"]["converged"]
    assert plan.notes["certificate"]["lower_bound"] == pytest.approx(plan.notes["optimum"], rel=1e-9)


def test_the_symmetric_lp_equals_the_full_lp():
    """One master row per orbit, the mix expanded over the symmetry: the same optimum as the LP with
    a row per link direction, and the expanded schedule loads the links as the optimum says."""
    graph = CostGraph(load_preset("2xdgx-a100-ib"))
    symmetric, notes = routed_trees(graph)
    full, full_notes = routed_trees(graph, symmetric=False)
    assert notes["synthesis"]["orbits"] < full_notes["synthesis"]["orbits"] / 4
    assert notes["optimum"] == pytest.approx(full_notes["optimum"], rel=1e-9)
    plan = plan_allreduce("lp", graph.topology, 1e9)
    assert plan.notes["normalized_time"] == pytest.approx(plan.notes["optimum"], rel=1e-9)
    assert plan.notes["bandwidth"]["of_bound"] == pytest.approx(1.0, rel=1e-9)  # 140.8 GB/s: the per-host cut


def test_pack_with_groups_and_classes_is_exact_on_a_small_lp():
    """Two groups of columns over three resources, resources 1 and 2 one class: the optimum of
    min z, z >= each resource's load, one column of each group, by hand: 3/4 + 1/4."""
    loads = {
        (0, "a"): np.array([1.0, 1.0, 0.0]),
        (0, "b"): np.array([1.0, 0.0, 1.0]),
        (1, "c"): np.array([0.5, 0.0, 0.0]),
        (1, "d"): np.array([0.0, 0.5, 0.5]),
    }

    def cheapest(prices):
        best = [min((k for k in loads if k[0] == g), key=lambda k: (prices @ loads[k], k)) for g in (0, 1)]
        return [Column(k, loads[k], g) for g, k in enumerate(best)]

    plain = pack(cheapest, 3, groups=2)
    symmetric = pack(cheapest, 3, classes=np.array([0, 1, 1]), groups=2)
    # with s on "a" and t on "c": loads 1 + t/2, s + (1-t)/2, 1 - s + (1-t)/2; t = 0, s = 1/2 gives 1
    # everywhere, and resource 0 never carries less than 1 (the class {1, 2}: mean load 1 - t/2)
    assert plain.value == pytest.approx(1.0) and symmetric.value == pytest.approx(1.0)
    assert plain.converged and plain.lower_bound == pytest.approx(1.0)
    for packing in (plain, symmetric):
        assert sum(w for w, c in packing.columns if c.group == 0) == pytest.approx(1.0)
        assert sum(w for w, c in packing.columns if c.group == 1) == pytest.approx(1.0)


def test_pack_rejects_an_oracle_that_misses_a_group():
    with pytest.raises(PlanError, match="expected one of each of 2"):
        pack(lambda prices: [Column("x", np.ones(2), 0)], 2, groups=2)


def test_allgather_reaches_forestcolls_optimum_on_its_a100_model():
    topology = _forestcoll_a100(2)
    gather = plan_collective("allgather", "lp", topology, 1e9)
    assert gather.notes["bandwidth"]["algbw_gbps"] == pytest.approx(346.6667, rel=1e-5)  # ForestColl's README
    assert gather.notes["certificate"]["converged"]
    assert gather.notes["certificate"]["algbw_gbps_at_most"] == pytest.approx(1040 / 3, rel=1e-9)
    assert gather.notes["bandwidth"]["of_bound"] == pytest.approx(1.0, rel=1e-9)
    scatter = plan_collective("reducescatter", "lp", topology, 1e9)
    assert scatter.notes["bandwidth"]["algbw_gbps"] == pytest.approx(1040 / 3, rel=1e-9)
    out = {(s.src, s.dst): s.route for s in gather.stages[0]}
    back = {(s.src, s.dst): s.route for s in scatter.stages[0]}
    assert {(b, a) for a, b in out} == set(back)  # the same arborescences, backwards
    seconds = price(gather, topology)["modeled_seconds"]
    assert seconds == pytest.approx(1e9 / 346.6667e9, rel=3e-3)  # the steady state and the routes' latency


def test_gather_bound_per_gpu_and_per_host():
    # per GPU: 12 x 20 GB/s of NVLink + 24 of PCIe, n / (n - 1) of it: 264 x 8 / 7
    assert gather_bound(load_preset("dgx-a100"), [f"gpu{g}" for g in range(8)]).algbw_gbps == pytest.approx(264 * 8 / 7)
    # 4 boxes of ForestColl's model: a box takes the other 24 of 32 shards over 8 NICs of 25 GB/s
    topology = _forestcoll_a100(4)
    bound = gather_bound(topology, [d.id for d in topology.workers])
    assert bound.algbw_gbps == pytest.approx(200 * 32 / 24) and "host" in bound.partition


def test_ring_allgather_is_the_rings_half_and_bad_input():
    topology = load_preset("dgx-a100")
    ring = plan_collective("allgather", "ring", topology, 1e9)
    reduce = plan_allreduce("ring", topology, 1e9)
    assert ring.total_bytes == pytest.approx(reduce.total_bytes / 2)
    assert ring.notes["bandwidth"]["algbw_gbps"] == pytest.approx(2 * reduce.notes["bandwidth"]["algbw_gbps"])
    with pytest.raises(PlanError, match="unknown collective 'alltoall'"):
        plan_collective("alltoall", "lp", topology, 1e9)
    with pytest.raises(PlanError, match="unknown allgather planner 'tree'"):
        plan_collective("allgather", "tree", topology, 1e9)
    with pytest.raises(PlanError, match="must be > 0"):
        plan_collective("reducescatter", "lp", topology, -1)


def test_cli_plans_an_allgather(capsys):
    code = main(
        [
            "plan",
            "allreduce",
            "--topology",
            "dgx-a100",
            "--collective",
            "allgather",
            "--planner",
            "lp",
            "--bytes",
            "1e9",
            "--json",
        ]
    )
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["collective"] == "allgather"
    assert result["planners"]["lp"]["bandwidth"]["algbw_gbps"] == pytest.approx(264 * 8 / 7)
    code = main(["plan", "allreduce", "--topology", "dgx-a100", "--collective", "reducescatter"])
    out = capsys.readouterr().out
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:3]] == ["ring", "lp"]
    assert "throughput bound (all-gather cut, per-GPU): 301.71 GB/s" in out
    code = main(["plan", "allreduce", "--topology", "dgx-a100", "--collective", "allgather", "--planner", "ps"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown allgather planner 'ps'; choose one of ring, lp" in err and len(err.splitlines()) == 1


def test_min_arborescence_matches_networkx():
    import networkx as nx

    from commgraph.plan.gather import min_arborescence

    rng = np.random.default_rng(3)
    for trial in range(60):
        n = int(rng.integers(2, 10))
        cost = rng.random((n, n)) if trial % 2 else rng.integers(1, 4, (n, n)).astype(float)  # ties too
        root = int(rng.integers(n))
        parent = min_arborescence(cost, root)
        assert parent[root] == -1
        for node in range(n):  # every node reaches the root
            seen = set()
            while node != root:
                assert node not in seen
                seen.add(node)
                node = parent[node]
        digraph = nx.DiGraph()
        digraph.add_weighted_edges_from((a, b, cost[a, b]) for a in range(n) for b in range(n) if a != b and b != root)
        best = sum(d["weight"] for *_, d in nx.minimum_spanning_arborescence(digraph).edges(data=True))
        assert sum(cost[parent[v], v] for v in range(n) if v != root) == pytest.approx(best, abs=1e-12)
