import itertools
from fractions import Fraction

import numpy as np
import pytest
from scipy.optimize import linprog

from commgraph.errors import PartitionError, PlanError, TopologyError
from commgraph.graph import load_graph
from commgraph.partition import load_partition_set, partition_graph, partition_metrics, write_partition_set
from commgraph.plan import CommPlan, plan_allgather, plan_allreduce, plan_broadcast, price
from commgraph.plan.allgather import demands
from commgraph.plan.allreduce import CostGraph, solve_tree_packing
from commgraph.topology import Device, Link, Topology, load_preset


@pytest.fixture(scope="module")
def cora8(tmp_path_factory):
    graph = load_graph("cora")
    out = tmp_path_factory.mktemp("parts") / "cora8"
    assignment, _ = partition_graph(graph, 8, "g3")
    write_partition_set(
        graph, assignment, 8, out, method="g3", seed=0, seconds=0.0, metrics=partition_metrics(graph, assignment, 8)
    )
    return load_partition_set(out)


# -- all-reduce -------------------------------------------------------------------------------------


def test_lp_optimum_is_exactly_7_24_on_dgx1_and_1_3_on_p3_8xlarge():
    dgx1 = plan_allreduce("lp", load_preset("dgx1-v100"), 1e8)
    assert Fraction(dgx1.notes["optimum"]).limit_denominator(1000) == Fraction(7, 24)
    assert dgx1.notes["optimum"] == pytest.approx(7 / 24, abs=1e-9)
    assert dgx1.notes["lower_bound"] == pytest.approx(7 / 24)  # 24 NVLinks: (8-1)/24
    assert dgx1.notes["normalized_time"] == pytest.approx(7 / 24, abs=1e-9)
    p3 = plan_allreduce("lp", load_preset("p3.8xlarge"), 1e8)
    assert p3.notes["optimum"] == pytest.approx(1 / 3, abs=1e-9)
    assert p3.notes["lower_bound"] == pytest.approx(3 / 9)
    for tree in dgx1.notes["trees"]:
        assert len(tree["edges"]) == 7
    assert sum(t["weight"] for t in dgx1.notes["trees"]) == pytest.approx(1.0)


def test_lp_beats_or_matches_every_baseline_on_every_preset():
    for name in ("dgx1-v100", "p3.8xlarge", "p2.16xlarge", "pcie-8gpu-qpi", "dgx-a100", "2xp3.8xlarge-ib"):
        topology = load_preset(name)
        times = {p: plan_allreduce(p, topology, 1e6).notes["normalized_time"] for p in ("ring", "tree", "ps", "lp")}
        assert times["lp"] <= min(times.values()) * (1 + 1e-8), (name, times)


def _all_spanning_trees(n, edges):
    for subset in itertools.combinations(range(len(edges)), n - 1):
        parent = list(range(n))

        def root(x):
            while parent[x] != x:
                x = parent[x]
            return x

        ok = True
        for e in subset:
            a, b = root(edges[e][0]), root(edges[e][1])
            if a == b:
                ok = False
                break
            parent[a] = b
        if ok:
            yield subset


@pytest.mark.parametrize("seed", range(6))
def test_column_generation_matches_brute_force_on_random_small_graphs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 6))
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    chosen = [pairs[i] for i in rng.permutation(len(pairs))[: int(rng.integers(n, len(pairs) + 1))]]
    chain = [(i, i + 1) for i in range(n - 1)]  # keep it connected
    edges = sorted(set(chosen) | set(chain))
    counts = rng.integers(1, 4, len(edges))
    topology = Topology(
        "random",
        [Device(f"gpu{i}", "gpu") for i in range(n)],
        [Link(f"gpu{a}", f"gpu{b}", "nvlink", int(c), 24.22 * int(c), 1.0) for (a, b), c in zip(edges, counts)],
    )
    graph = CostGraph(topology)
    value, _ = solve_tree_packing(graph)
    trees = list(_all_spanning_trees(n, graph.pairs))
    a_ub = np.zeros((len(graph.links), len(trees) + 1))
    for j, tree in enumerate(trees):
        a_ub[:, j] = (graph.usage[list(tree)].sum(axis=0)) * graph.cost
    a_ub[:, -1] = -1
    objective = np.zeros(len(trees) + 1)
    objective[-1] = 1
    brute = linprog(
        objective,
        A_ub=a_ub,
        b_ub=np.zeros(len(graph.links)),
        A_eq=[[1] * len(trees) + [0]],
        b_eq=[1],
        bounds=[(0, None)] * (len(trees) + 1),
        method="highs",
    )
    assert value == pytest.approx(brute.fun, abs=1e-9)
    assert value >= graph.lower_bound() - 1e-12  # Lemma 2.1


def test_switch_topology_reproduces_the_papers_15_14_8_utilisation_on_p2_16xlarge():
    plan = plan_allreduce("lp", load_preset("p2.16xlarge"), 1e8)
    assert plan.notes["lower_bound"] is None
    assert plan.notes["optimum"] == pytest.approx(plan.notes["normalized_time"], abs=1e-9)
    classes = {"intra-card": [], "card-central": [], "central-central": []}
    for link, share in plan.notes["link_utilisation"].items():
        a, b = link.split("-")
        key = (
            "central-central"
            if "pcie_c" in a and "pcie_c" in b
            else "intra-card"
            if "gpu" in a or "gpu" in b
            else "card-central"
        )
        classes[key].append(share)
    ratio = [15 * np.mean(classes[k]) for k in ("intra-card", "card-central", "central-central")]
    assert ratio == pytest.approx([15, 14, 8], abs=1e-6)  # intra-card links are the bottleneck


def test_allreduce_bad_input():
    with pytest.raises(PlanError, match="unknown all-reduce planner"):
        plan_allreduce("magic", load_preset("dgx1-v100"), 1e6)
    with pytest.raises(PlanError, match="needs 2"):
        plan_allreduce("lp", load_preset("localhost-cpu:1"), 1e6)
    with pytest.raises(PlanError, match="must be > 0"):
        plan_allreduce("ring", load_preset("dgx1-v100"), 0)


# -- all-gather -------------------------------------------------------------------------------------


def _delivered(plan: CommPlan, pset, devices):
    """Replay a plan: every send must carry rows its source holds; return what each device holds."""
    holds = {d: set() for d in devices}
    for k, device in enumerate(devices):
        holds[device] |= set(np.asarray(pset.part(k).owned).tolist())
    for stage in plan.stages:
        arriving = []
        for send in stage:
            ids = set(send.ids.tolist())
            assert ids <= holds.setdefault(send.src, set())  # host memory holds only what was staged
            arriving.append((send.dst, ids))
        for dst, ids in arriving:
            holds.setdefault(dst, set()).update(ids)
    return holds


@pytest.mark.parametrize("planner", ["p2p", "swap", "spst"])
def test_every_halo_row_arrives(cora8, planner):
    topology = load_preset("dgx1-v100")
    devices = [g.id for g in topology.gpus]
    plan = plan_allgather(planner, cora8, topology, 512)
    holds = _delivered(plan, cora8, devices)
    for k, device in enumerate(devices):
        assert set(np.asarray(cora8.part(k).halo).tolist()) <= holds[device]


def test_spst_relays_only_rows_the_relay_already_holds(cora8):
    topology = load_preset("dgx1-v100")
    devices = [g.id for g in topology.gpus]
    plan = plan_allgather("spst", cora8, topology, 512)
    holds = {d: set(np.asarray(cora8.part(k).owned).tolist()) for k, d in enumerate(devices)}
    for stage in plan.stages:
        for send in stage:
            assert set(send.ids.tolist()) <= holds[send.src]
        for send in stage:
            holds[send.dst] |= set(send.ids.tolist())


def test_spst_halves_p2p_on_dgx1_and_is_never_worse(cora8):
    dgx1 = load_preset("dgx1-v100")
    spst = price(plan_allgather("spst", cora8, dgx1, 512), dgx1)["modeled_seconds"]
    p2p = price(plan_allgather("p2p", cora8, dgx1, 512), dgx1)["modeled_seconds"]
    assert spst <= 0.5 * p2p
    for name in ("pcie-8gpu-qpi", "dgx-a100", "hgx-h100", "2xp3.8xlarge-ib", "localhost-cpu:8", "p2.16xlarge"):
        topology = load_preset(name)
        for row_bytes in (64, 4096):
            a = price(plan_allgather("spst", cora8, topology, row_bytes), topology)["modeled_seconds"]
            b = price(plan_allgather("p2p", cora8, topology, row_bytes), topology)["modeled_seconds"]
            assert a <= b * (1 + 1e-9), (name, row_bytes, a, b)


def test_replicate_counts_the_l_hop_halo(cora8):
    topology = load_preset("dgx1-v100")
    one = plan_allgather("replicate", cora8, topology, 512, layers=1)
    assert one.stages == []
    assert one.notes["total_duplicated_nodes"] == sum(cora8.part(k).num_halo for k in range(8))
    two = plan_allgather("replicate", cora8, topology, 512, layers=2)
    assert two.notes["total_duplicated_nodes"] > one.notes["total_duplicated_nodes"]
    assert two.notes["extra_memory_bytes"] == 512 * two.notes["total_duplicated_nodes"]


def test_p2p_bytes_equal_total_remote(cora8):
    plan = plan_allgather("p2p", cora8, load_preset("dgx1-v100"), 100)
    assert plan.total_bytes == 100 * cora8.manifest["metrics"]["total_remote"]
    assert sum(ids.size for ids in demands(cora8).values()) == cora8.manifest["metrics"]["total_remote"]


@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_plan_files_round_trip(cora8, tmp_path, suffix):
    plan = plan_allgather("spst", cora8, load_preset("dgx1-v100"), 512)
    plan.save(tmp_path / f"plan{suffix}")
    assert CommPlan.load(tmp_path / f"plan{suffix}").same_as(plan)
    reduce = plan_allreduce("lp", load_preset("p3.8xlarge"), 1e6)
    reduce.save(tmp_path / f"reduce{suffix}")
    again = CommPlan.load(tmp_path / f"reduce{suffix}")
    assert again.same_as(reduce)


def test_allgather_bad_input(cora8, tmp_path):
    with pytest.raises(PlanError, match="8 parts but topology 'p3.8xlarge' has only 4"):
        plan_allgather("p2p", cora8, load_preset("p3.8xlarge"), 512)
    chain = Topology(
        "chain",
        [Device(f"gpu{i}", "gpu") for i in range(8)],
        [Link(f"gpu{i}", f"gpu{i + 1}", "nvlink", 1, 24.22, 1.0) for i in range(7)],
    )
    with pytest.raises(TopologyError, match="no route from 'gpu0' to 'gpu2'"):
        plan_allgather("p2p", cora8, chain, 512)
    with pytest.raises(PlanError, match="lists 2 devices for 8 parts"):
        plan_allgather("p2p", cora8, load_preset("dgx1-v100"), 512, devices=["gpu0", "gpu1"])
    with pytest.raises(PartitionError, match="not a partition set"):
        load_partition_set(tmp_path)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(PlanError, match="not a readable plan"):
        CommPlan.load(tmp_path / "bad.json")


def test_broadcast_packs_six_arborescences_per_root_on_dgx1():
    topology = load_preset("dgx1-v100")
    for root in ("gpu0", "gpu5"):
        plan = plan_broadcast(topology, root, 1e8)
        assert plan.notes["optimum"] == pytest.approx(1 / 6, abs=1e-9)  # 6 NVLinks leave every GPU
        for arborescence in plan.notes["arborescences"]:
            arcs = arborescence["arcs"]
            assert len(arcs) == 7 and all(b != root for _, b in arcs)
            assert {b for _, b in arcs} == {g.id for g in topology.gpus} - {root}
    assert plan_broadcast(load_preset("p3.8xlarge"), "gpu0", 1e8).notes["optimum"] == pytest.approx(1 / 4)
    with pytest.raises(PlanError, match="root 'gpu9' is not a worker"):
        plan_broadcast(topology, "gpu9", 1e8)


def test_transfer_method_crossover_comes_from_the_fitted_table():
    from commgraph.plan.methods import METHODS

    zero, copy = METHODS["zero_copy"], METHODS["copy"]
    pcie = 11.13
    sizes = np.array([4, 16, 64, 256, 1024]) * 1024.0
    faster = [zero.seconds(s, pcie, 0.0) < copy.seconds(s, pcie, 0.0) for s in sizes]
    assert faster == [True, True, True, False, False]  # zero-copy wins up to 64 KB, copies from 256 KB


def test_hybrid_picks_methods_by_size_and_is_never_worse_than_one_method(cora8, tmp_path):
    """Small rows go zero-copy, large ones by copy where copying is cheaper (Cora's METIS parts:
    whether it is depends on the messages' sizes, so on the partition); hybrid is never worse."""
    topology = load_preset("dgx1-v100")
    graph = load_graph("cora")
    assignment, _ = partition_graph(graph, 8, "metis")
    metis = write_partition_set(
        graph,
        assignment,
        8,
        tmp_path / "metis",
        method="metis",
        seed=0,
        seconds=0.0,
        metrics=partition_metrics(graph, assignment, 8),
    )
    small = plan_allgather("hybrid", metis, topology, 64)
    large = plan_allgather("hybrid", metis, topology, 2**20)
    assert small.notes["messages_by_method"]["zero_copy"] == small.num_sends
    assert large.notes["messages_by_method"]["copy"] == large.num_sends
    for row_bytes in (64, 16384, 65536, 2**20):
        plan = plan_allgather("hybrid", cora8, topology, row_bytes)
        seconds = price(plan, topology)["modeled_seconds"]
        assert (
            seconds <= min(plan.notes["modeled_seconds_all_zero_copy"], plan.notes["modeled_seconds_all_copy"]) + 1e-12
        )
        assert {s.method for s in plan.stages[0]} <= {"zero_copy", "copy"}


# -- all-reduce through switches ------------------------------------------------------------------


def test_k_parallel_switch_planes_give_k_times_one_planes_throughput(switch_planes):
    _planes = switch_planes
    one = plan_allreduce("lp", _planes(4, 1), 1e9).notes["bandwidth"]["algbw_gbps"]
    assert one == pytest.approx(40.0 * 4 / (2 * 3), rel=1e-9)  # per-GPU bandwidth / (2(n-1)/n)
    for k in (2, 3, 4):
        plan = plan_allreduce("lp", _planes(4, k), 1e9)
        assert plan.notes["bandwidth"]["algbw_gbps"] == pytest.approx(k * one, rel=1e-9)
        assert plan.notes["certificate"]["converged"]
        assert plan.notes["certificate"]["algbw_gbps_at_most"] == pytest.approx(k * one, rel=1e-9)
        assert price(plan, _planes(4, k))["modeled_seconds"] == pytest.approx(1 / (k * one), rel=1e-3)
        planes_used = {s.route[1] for s in plan.stages[0]}
        assert planes_used == {f"sw{s}" for s in range(k)}  # every plane carries bytes
        ring = plan_allreduce("ring", _planes(4, k), 1e9).notes["bandwidth"]
        assert ring["busbw_gbps"] == pytest.approx(k * 40.0, rel=1e-9)  # NCCL's rings: the whole per-GPU rate
        assert plan_allreduce("ring1", _planes(4, k), 1e9).notes["bandwidth"]["busbw_gbps"] == pytest.approx(40.0)


def _two_leaves(per_leaf: int, gpu_gbps: float, spine_gbps: float) -> Topology:
    """Two leaf switches of ``per_leaf`` GPUs (one host each) joined by one spine link."""
    devices = [Device(f"h{h}.gpu{g}", "gpu", f"h{h}") for h in range(2) for g in range(per_leaf)]
    devices += [Device(f"h{h}.leaf", "switch", f"h{h}") for h in range(2)]
    links = [Link(f"h{h}.gpu{g}", f"h{h}.leaf", "pcie", 1, gpu_gbps, 1.0) for h in range(2) for g in range(per_leaf)]
    return Topology("two-leaves", devices, links + [Link("h0.leaf", "h1.leaf", "ethernet", 1, spine_gbps, 1.0)])


@pytest.mark.parametrize("spine, optimum, partition", [(10.0, 10.0, "per-host"), (100.0, 24.0, "per-GPU")])
def test_lp_reaches_the_closed_form_optimum_on_switch_trees(spine, optimum, partition):
    """Six GPUs of 40 GB/s behind two leaves: the optimum is min(6 x 40 / (2 x 5), spine) GB/s of
    algorithm bandwidth (per-GPU and per-host partition bounds, both reached)."""
    plan = plan_allreduce("lp", _two_leaves(3, 40.0, spine), 1e9)
    band = plan.notes["bandwidth"]
    assert band["bound"]["algbw_gbps"] == pytest.approx(optimum) and band["bound"]["partition"].startswith(partition)
    assert band["algbw_gbps"] == pytest.approx(optimum, rel=1e-9)
    assert plan.notes["certificate"]["algbw_gbps_at_most"] == pytest.approx(optimum, rel=1e-9)


def _rail_split(forwarding: bool) -> Topology:
    """2 servers x 2 GPUs on an NVSwitch, each GPU with its own NIC; NIC g of every server on rail switch g."""
    devices, links = [], []
    for h in range(2):
        devices.append(Device(f"n{h}.nvswitch", "nvswitch", f"node{h}"))
        for g in range(2):
            devices += [Device(f"n{h}.gpu{g}", "gpu", f"node{h}"), Device(f"n{h}.nic{g}", "nic", f"node{h}")]
            links += [
                Link(f"n{h}.gpu{g}", f"n{h}.nvswitch", "nvswitch", 12, 240.0, 1.0),
                Link(f"n{h}.gpu{g}", f"n{h}.nic{g}", "pcie", 1, 24.0, 1.5),
                Link(f"n{h}.nic{g}", f"rail{g}", "infiniband", 1, 25.0, 2.0),
            ]
    devices += [Device(f"rail{g}", "switch", "network") for g in range(2)]
    return Topology("rails", devices, links, gpu_forwarding=forwarding)


def test_rail_split_routes_through_a_gpu_and_plans():
    from commgraph.plan.choose import check_allreduce

    closed = _rail_split(False)
    with pytest.raises(TopologyError, match="no route from 'n0.gpu0' to 'n1.gpu1'.*gpu_forwarding"):
        plan_allreduce("lp", closed, 1e9)
    with pytest.raises(TopologyError, match="no route from 'n0.gpu0' to 'n1.gpu1'"):  # the launcher's check
        check_allreduce("native", closed, [d.id for d in closed.gpus])
    pxn = _rail_split(True)
    assert any("gpu" in h.dst for h in pxn.route("n0.gpu0", "n1.gpu1")[:-1])  # the default route forwards too
    plan = plan_allreduce("lp", pxn, 1e9)
    band = plan.notes["bandwidth"]
    assert band["of_bound"] >= 0.99
    # every tree crosses between the servers once each way, through the GPUs' PCIe links to their NICs: 2 x 24 GB/s
    assert band["algbw_gbps"] == pytest.approx(48.0, rel=1e-6) and band["bound"]["partition"] == "per-host cut"
    assert not [s.route for s in plan.stages[0] if any("gpu" in d for d in s.route[1:-1])]  # same-rail tree edges
    ring = plan_allreduce("ring", pxn, 1e9)  # NCCL's rings hop n0.gpu1 -> n1.gpu0, across the rails
    assert [s.route for s in ring.stages[0] if any("gpu" in d for d in s.route[1:-1])]  # PXN: through a GPU
    assert price(ring, pxn)["modeled_seconds"] > price(plan, pxn)["modeled_seconds"]
    assert Topology.from_dict(pxn.to_dict()).gpu_forwarding


def test_every_public_member_of_plan_is_documented_with_its_arguments_and_result():
    """``commgraph.plan`` and ``commgraph.plan.multipath`` export nothing undocumented: a class has a
    docstring, a function one with ``Args:`` and ``Returns:``."""
    import inspect

    import commgraph.plan
    import commgraph.plan.multipath

    bare = []
    for module in (commgraph.plan, commgraph.plan.multipath):
        for name in module.__all__:
            member = getattr(module, name)
            doc = inspect.getdoc(member) if inspect.isclass(member) or inspect.isfunction(member) else "data"
            if not doc or (inspect.isfunction(member) and not ("Args:" in doc and "Returns:" in doc)):
                bare.append(f"{module.__name__}.{name}")
    assert bare == []
