import json
from dataclasses import replace

import numpy as np
import pytest

from commgraph.errors import SimulationError
from commgraph.sim import Compute, Transfer, read_dag, simulate
from commgraph.sim.dag import check_dag
from commgraph.sim.floor import dag_floor
from commgraph.topology import Device, Link, Topology, load_preset

GB = 1e9


def line(bandwidth=10.0, latency_us=0.0):
    """Two GPUs on one 10 GB/s link, no latency: analytic answers are exact."""
    return Topology(
        "line", [Device("a", "gpu"), Device("b", "gpu")], [Link("a", "b", "pcie", 1, bandwidth, latency_us)]
    )


def test_one_flow_alone_gets_full_bandwidth_plus_latency():
    result = simulate(line(latency_us=5.0), [Transfer("x", "a", "b", 2 * GB)])
    assert result.finish[0] == pytest.approx(0.2 + 5e-6, rel=1e-12)
    assert result.busy_seconds[0] == pytest.approx(0.2) and result.bytes_moved[0] == pytest.approx(2 * GB)
    assert result.busy_seconds[1] == 0  # the reverse direction is a separate resource


@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_k_flows_on_one_link_share_it_equally(k):
    result = simulate(line(), [Transfer(f"x{i}", "a", "b", GB) for i in range(k)])
    assert np.allclose(result.finish, k * 0.1, rtol=1e-12)


def test_opposite_directions_do_not_share():
    result = simulate(line(), [Transfer("ab", "a", "b", GB), Transfer("ba", "b", "a", GB)])
    assert np.allclose(result.finish, 0.1, rtol=1e-12)


def test_max_min_fairness_on_a_parking_lot():
    # a -> b -> c, links 10 and 4 GB/s: the long flow is capped at 2 by the second link,
    # the short flow on the first link takes the remaining 8.
    t = Topology(
        "lot",
        [Device("a", "gpu"), Device("s", "switch"), Device("c", "gpu"), Device("d", "gpu")],
        [
            Link("a", "s", "pcie", 1, 10.0, 0.0),
            Link("s", "c", "pcie", 1, 4.0, 0.0),
            Link("s", "d", "pcie", 1, 100.0, 0.0),
        ],
    )
    tasks = [
        Transfer("long1", "a", "c", 2 * GB),
        Transfer("long2", "d", "c", 2 * GB),
        Transfer("short", "a", "d", 8 * GB),
    ]
    result = simulate(t, tasks)
    # long flows get 2 GB/s each (4 / 2) for 1 s; short gets 10 - 2 = 8 GB/s for 1 s
    assert np.allclose(result.finish, [1.0, 1.0, 1.0], rtol=1e-12)


def test_priorities_preempt():
    tasks = [Transfer("low", "a", "b", GB, priority=1), Transfer("high", "a", "b", GB, priority=0)]
    result = simulate(line(), tasks)
    assert result.finish[1] == pytest.approx(0.1, rel=1e-12)  # high goes first at full speed
    assert result.finish[0] == pytest.approx(0.2, rel=1e-12)  # low waits, then finishes
    assert result.start[0] == 0.0


def test_dependencies_and_device_serialisation():
    tasks = [
        Compute("c1", "a", 0.5),
        Compute("c2", "a", 0.25),  # same device: waits for c1
        Transfer("x", "a", "b", GB, deps=("c1",)),
        Compute("c3", "b", 0.1, deps=("x", "c2")),
    ]
    result = simulate(line(), tasks)
    assert result.start.tolist() == pytest.approx([0.0, 0.5, 0.5, 0.75])
    assert result.finish.tolist() == pytest.approx([0.5, 0.75, 0.6, 0.85])
    assert result.makespan == pytest.approx(0.85)


def test_qpi_sharing_matches_dgcl_table_3_shape():
    t = load_preset("pcie-8gpu-qpi")
    qpi = next(l for l in t.links if l.kind == "qpi").bandwidth_gbps
    for k in (1, 2, 3):
        tasks = [Transfer(f"x{i}", f"gpu{i}", f"gpu{4 + i}", GB) for i in range(k)]
        result = simulate(t, tasks)
        latency = sum(t.links[h.link].latency_us for h in t.route("gpu0", "gpu4")) * 1e-6
        per_gpu = GB / (result.finish - latency) / 1e9
        assert np.allclose(per_gpu, qpi / k, rtol=1e-9)  # 1, 1/2, 1/3 of the QPI link


def test_incremental_and_full_reallocation_agree():
    t = load_preset("fattree:k=4,server=p3.8xlarge")
    rng = np.random.default_rng(0)
    gpus = [g.id for g in t.gpus]
    tasks = [
        Transfer(f"x{i}", gpus[s], gpus[(s + 1 + d) % len(gpus)], float(rng.integers(1, 50)) * 1e6, priority=int(i % 3))
        for i, (s, d) in enumerate(zip(rng.integers(0, len(gpus), 300), rng.integers(0, len(gpus) - 1, 300)))
    ]
    fast = simulate(t, tasks, incremental=True)
    slow = simulate(t, tasks, incremental=False)
    assert np.allclose(fast.finish, slow.finish, rtol=1e-9)


def test_explicit_route_through_a_gpu():
    t = load_preset("dgx1-v100")
    direct = simulate(t, [Transfer("x", "gpu0", "gpu5", GB)])
    relayed = simulate(t, [Transfer("x", "gpu0", "gpu5", GB, route=("gpu0", "gpu4", "gpu5"))])
    assert relayed.makespan < direct.makespan  # NVLink relay beats PCIe + QPI
    assert relayed.finish[0] == pytest.approx(GB / 24.22e9 + 2e-6, rel=1e-9)  # NV1 is the bottleneck


@pytest.mark.parametrize(
    "tasks, message",
    [
        ([Transfer("x", "a", "zz", 1.0)], "unknown device 'zz'"),
        ([Compute("c", "zz", 1.0)], "unknown device 'zz'"),
        ([Transfer("x", "a", "b", -1.0)], "bytes must be a finite number >= 0, got -1.0"),
        ([Transfer("x", "a", "b", float("inf"))], "bytes must be a finite number >= 0, got inf"),
        ([Compute("c", "a", float("nan"))], "seconds must be a finite number >= 0, got nan"),
        ([Transfer("x", "a", "b", 1.0), Transfer("x", "a", "b", 1.0)], "duplicate task id 'x'"),
        ([Transfer("x", "a", "b", 1.0, deps=("y",))], "unknown task 'y'"),
        ([Transfer("x", "a", "b", 1.0, deps=("y",)), Compute("y", "a", 1.0, deps=("x",))], "cycle"),
        ([Transfer("x", "a", "b", 1.0, route=("b", "a"))], "route must start at 'a'"),
    ],
)
def test_bad_dags(tasks, message):
    with pytest.raises(SimulationError, match=message):
        simulate(line(), tasks)


def test_zero_byte_transfer_costs_latency_only():
    result = simulate(line(latency_us=3.0), [Transfer("x", "a", "b", 0.0), Transfer("self", "a", "a", GB)])
    assert result.finish.tolist() == pytest.approx([3e-6, 0.0])


def test_read_dag_json(tmp_path):
    path = tmp_path / "dag.json"
    path.write_text(
        json.dumps(
            {
                "tasks": [
                    {"id": "c", "type": "compute", "device": "a", "seconds": 0.1},
                    {"id": "x", "type": "transfer", "src": "a", "dst": "b", "bytes": 1e9, "deps": ["c"], "priority": 2},
                ]
            }
        )
    )
    tasks = read_dag(path)
    assert tasks[1] == Transfer("x", "a", "b", 1e9, 2, None, ("c",))
    assert simulate(line(), tasks).makespan == pytest.approx(0.2)
    path.write_text('{"tasks": [{"id": "x", "type": "teleport"}]}')
    with pytest.raises(SimulationError, match="type must be 'transfer' or 'compute'"):
        read_dag(path)
    path.write_text('{"tasks": [{"id": "x", "type": "compute", "device": "a"}]}')
    with pytest.raises(SimulationError, match="missing field 'seconds'"):
        read_dag(path)
    path.write_text("{oops")
    with pytest.raises(SimulationError, match="not valid JSON"):
        read_dag(path)


def test_rate_cap_and_overhead():
    tasks = [Transfer("slow", "a", "b", GB, max_rate=2.5e9, overhead_s=1e-3), Transfer("fast", "a", "b", GB)]
    result = simulate(line(), tasks)
    # max-min: the capped flow takes 2.5 GB/s, the other the remaining 7.5 until it finishes
    assert result.finish[1] == pytest.approx(GB / 7.5e9, rel=1e-9)
    assert result.finish[0] == pytest.approx(0.4 + 1e-3, rel=1e-9)
    assert result.bytes_moved[0] == pytest.approx(2 * GB)
    with pytest.raises(SimulationError, match="max_rate > 0"):
        simulate(line(), [Transfer("x", "a", "b", GB, max_rate=0.0)])


def random_case(seed):
    """A random network (GPUs on two switches, one with a forwarding limit; random bandwidths,
    latencies and per-message overheads) and a random DAG of computations and transfers with
    priorities, overheads and rate caps; a device with two cores."""
    rng = np.random.default_rng(seed)
    gpus = [f"g{i}" for i in range(6)]
    devices = [Device(g, "gpu") for g in gpus] + [Device("s0", "switch"), Device("s1", "switch", forward_gbps=15.0)]
    links = [
        Link(
            g,
            f"s{i % 2}",
            "pcie",
            1,
            float(rng.choice([4.0, 10.0, 25.0])),
            float(rng.choice([0.0, 2.0])),
            float(rng.choice([0.0, 0.0, 5.0])),
        )
        for i, g in enumerate(gpus)
    ]
    links.append(Link("s0", "s1", "ethernet", 1, 12.0, 1.0))
    tasks = []
    for i in range(int(rng.integers(30, 60))):
        deps = tuple(f"t{j}" for j in rng.choice(i, size=min(i, int(rng.integers(0, 3))), replace=False))
        if rng.random() < 0.3:
            tasks.append(Compute(f"t{i}", str(rng.choice(gpus)), float(rng.integers(0, 5)) * 1e-3, deps))
            continue
        src, dst = rng.choice(gpus, size=2, replace=False)
        tasks.append(
            Transfer(
                f"t{i}",
                str(src),
                str(dst),
                float(rng.integers(0, 40)) * 1e6,
                int(rng.integers(0, 3)),
                deps=deps,
                overhead_s=float(rng.choice([0.0, 1e-5])),
                max_rate=float(rng.choice([2e9, 1e12])) if rng.random() < 0.3 else None,
            )
        )
    return Topology("random", devices, links), tasks, {"g0": 2}


@pytest.mark.parametrize("seed", range(12))
def test_incremental_matches_full_recomputation_on_random_dags(seed):
    topology, tasks, cores = random_case(seed)
    fast = simulate(topology, tasks, incremental=True, cores=cores)
    slow = simulate(topology, tasks, incremental=False, cores=cores)
    assert np.isfinite(fast.finish).all() and fast.makespan > 0
    for field in ("start", "finish", "busy_seconds", "bytes_moved"):
        assert np.allclose(getattr(fast, field), getattr(slow, field), rtol=1e-9, atol=1e-15), field


def test_timeline_lists_each_utilisation_change_once():
    # x alone is capped at 4 GB/s; y joins at 0.1 s and takes the other 6; x ends at 0.25 s and y
    # takes all 10 (the link stays full: no point); y ends at 0.28 s.
    tasks = [
        Transfer("x", "a", "b", 1 * GB, max_rate=4 * GB),
        Compute("c", "a", 0.1),
        Transfer("y", "a", "b", 1.2 * GB, deps=("c",)),
    ]
    result = simulate(line(), tasks)
    times, resources, utilisation = result.timeline
    assert resources.tolist() == [0, 0, 0]  # the rate cap is not a link
    assert times == pytest.approx([0.0, 0.1, 0.28], rel=1e-12)
    assert utilisation == pytest.approx([0.4, 1.0, 0.0], rel=1e-12)
    assert result.finish[[0, 2]] == pytest.approx([0.25, 0.28], rel=1e-12)
    assert result.busy_seconds.tolist() == pytest.approx([0.28, 0.0], rel=1e-12)


def leaf_spine(routing="ecmp"):
    """Hosts h0-h2 on leaf l0, h3-h5 on leaf l1, both leaves on spines p0 and p1; every link
    10 GB/s, no latency. Under ECMP h0->h3, h1->h5 and h2->h4 all hash onto p1."""
    hosts = [f"h{i}" for i in range(6)]
    devices = [Device(h, "gpu") for h in hosts] + [Device(s, "switch") for s in ("l0", "l1", "p0", "p1")]
    links = [Link(h, f"l{i // 3}", "ethernet", 1, 10.0, 0.0) for i, h in enumerate(hosts)]
    links += [Link(leaf, spine, "ethernet", 1, 10.0, 0.0) for leaf in ("l0", "l1") for spine in ("p0", "p1")]
    return Topology("leaf-spine", devices, links, routing=routing)


@pytest.mark.parametrize(
    "pairs, ecmp, spray",
    [
        ([("h0", "h3"), ("h1", "h5")], 0.2, 0.1),  # ECMP: both on p1 at 5 GB/s; sprayed: 10 GB/s each
        ([("h0", "h3"), ("h1", "h5"), ("h2", "h4")], 0.3, 0.15),  # sprayed: each leaf uplink carries 3r/2 = 10
    ],
)
def test_ecmp_collisions_and_packet_spraying(pairs, ecmp, spray):
    assert {leaf_spine().route(a, b)[1].dst for a, b in pairs} == {"p1"}
    tasks = [Transfer(f"{a}{b}", a, b, GB) for a, b in pairs]
    hashed = simulate(leaf_spine("ecmp"), tasks)
    sprayed = simulate(leaf_spine("spray"), tasks)
    assert np.allclose(hashed.finish, ecmp, rtol=1e-12)
    assert np.allclose(sprayed.finish, spray, rtol=1e-12)
    uplinks = [2 * k for k, link in enumerate(sprayed.topology.links) if link.a == "l0"]  # l0 -> p0, l0 -> p1
    assert sprayed.bytes_moved[uplinks] == pytest.approx([len(pairs) * GB / 2] * 2, rel=1e-12)


def test_a_sprayed_flow_alone_and_an_explicit_route_stay_on_one_path():
    alone = simulate(leaf_spine("spray"), [Transfer("x", "h0", "h3", GB)])
    assert alone.finish[0] == pytest.approx(0.1, rel=1e-12)  # the host link caps it, not half a spine
    pinned = simulate(
        leaf_spine("spray"),
        [
            Transfer("x", "h0", "h3", GB, route=("h0", "l0", "p0", "l1", "h3")),
            Transfer("y", "h1", "h5", GB, route=("h1", "l0", "p0", "l1", "h5")),
        ],
    )
    assert np.allclose(pinned.finish, 0.2, rtol=1e-12)


def test_floor_prices_a_links_bytes_in_the_window_where_they_can_move():
    # both transfers wait for c0 (1 s) and c1 waits for both: the critical path is 1 + 1 + 1 s,
    # but the link carries 2 s of bytes after c0 and before c1, so no order beats 4 s: exact.
    tasks = [
        Compute("c0", "a", 1.0),
        Transfer("x", "a", "b", 10 * GB, deps=("c0",)),
        Transfer("y", "a", "b", 10 * GB, deps=("c0",)),
        Compute("c1", "b", 1.0, deps=("x", "y")),
    ]
    floor = dag_floor(line(latency_us=0.0), tasks)
    assert floor.path_seconds == pytest.approx(3.0, rel=1e-12)
    assert floor.window_seconds == pytest.approx(4.0, rel=1e-12) and floor.resource == "a->b"
    assert floor.seconds == pytest.approx(simulate(line(), tasks).makespan, rel=1e-12)
    sprayed = [Transfer("x", "h0", "h3", GB), Transfer("y", "h1", "h5", GB), Transfer("z", "h2", "h4", GB)]
    assert dag_floor(leaf_spine("spray"), sprayed).seconds == pytest.approx(0.15, rel=1e-12)  # exact, as simulated
    assert dag_floor(leaf_spine("ecmp"), sprayed).seconds == pytest.approx(0.3, rel=1e-12)  # all three on p1


@pytest.mark.parametrize("seed", range(10))
def test_floor_is_never_above_any_simulated_schedule(seed):
    topology, tasks, cores = random_case(seed)
    rng = np.random.default_rng(100 + seed)
    for routing in ("ecmp", "spray"):
        net = topology.with_routing(routing)
        floor = dag_floor(net, tasks, cores=cores)
        assert floor.seconds > 0
        for _ in range(4):  # random priorities: other orders of the same flows
            shuffled = [replace(t, priority=int(rng.integers(0, 4))) if isinstance(t, Transfer) else t for t in tasks]
            assert floor.seconds <= simulate(net, shuffled, timeline=False, cores=cores).makespan * (1 + 1e-9)


def test_sim_dag_routing_option_and_yaml_field(tmp_path, capsys):
    from commgraph.cli.main import main
    from commgraph.topology import write_yaml

    write_yaml(leaf_spine("ecmp"), tmp_path / "fabric.yaml")
    dag = tmp_path / "dag.json"
    dag.write_text(
        json.dumps(
            {
                "tasks": [
                    {"id": f"{a}{b}", "type": "transfer", "src": a, "dst": b, "bytes": GB}
                    for a, b in (("h0", "h3"), ("h1", "h5"), ("h2", "h4"))
                ]
            }
        )
    )
    for routing, makespan in (("ecmp", 0.3), ("spray", 0.15)):
        assert (
            main(["sim", "dag", str(dag), "--topology", str(tmp_path / "fabric.yaml"), "--routing", routing, "--json"])
            == 0
        )
        assert json.loads(capsys.readouterr().out)["makespan_seconds"] == pytest.approx(makespan, rel=1e-12)
    write_yaml(leaf_spine("spray"), tmp_path / "sprayed.yaml")
    assert main(["sim", "dag", str(dag), "--topology", str(tmp_path / "sprayed.yaml")]) == 0
    assert "(spray): makespan 150 ms\n" in capsys.readouterr().out


def test_tasks_are_frozen_values_and_building_them_pauses_only_the_collector():
    import dataclasses
    import gc

    from commgraph.sim.dag import paused_collection

    a = Transfer("x", "gpu0", "gpu1", 4.0, 1, None, ("y",), 0.5)
    assert a == Transfer("x", "gpu0", "gpu1", 4.0, priority=1, deps=("y",), overhead_s=0.5) and hash(a) == hash(a)
    assert dataclasses.replace(a, bytes=2.0).bytes == 2.0 and a.max_rate is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.bytes = 1.0
    assert Compute("c", "gpu0", 1.0).deps == () and dataclasses.astuple(Compute("c", "gpu0", 1.0, ("x",)))[-1] == ("x",)
    assert gc.isenabled()
    with paused_collection():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_sprayed_parallel_links_merge_into_one_constraint_and_every_result_stays():
    from commgraph.sim import engine

    net = load_preset("fattree:k=4,server=hgx-h100,nics=1,bisection=full").with_routing("spray")
    rng = np.random.default_rng(3)
    gpus = [g.id for g in net.gpus]
    tasks = [Compute("c", gpus[0], 1e-3)] + [
        Transfer(f"x{k}", gpus[a], gpus[b], float(rng.integers(1, 9)) * 1e8, int(k % 2), deps=("c",) if k % 3 else ())
        for k, (a, b) in enumerate(rng.integers(0, len(gpus), (60, 2)))
        if a // 8 != b // 8
    ]
    table = engine._Flows(net, tasks, check_dag(tasks).transfer).arrays()
    merged, stands_for = engine.merge_identical(table)
    assert np.count_nonzero(stands_for != np.arange(stands_for.shape[0])) > 0  # parallel uplinks merged
    assert merged.resources.shape[0] < table.resources.shape[0]
    assert np.array_equal(np.diff(merged.ptr) > 0, np.diff(table.ptr) > 0)
    fast = simulate(net, tasks)
    original = engine.identical_columns
    try:
        engine.identical_columns = lambda ptr, resources, weights, capacity: np.arange(capacity.shape[0])
        plain = simulate(net, tasks)
    finally:
        engine.identical_columns = original
    assert np.allclose(fast.finish, plain.finish, rtol=1e-12, atol=0) and np.allclose(fast.start, plain.start)
    assert np.allclose(fast.busy_seconds, plain.busy_seconds, rtol=1e-12, atol=1e-15)
    for r in np.unique(plain.timeline[1]):  # each link's utilisation steps, in time order
        a, b = fast.timeline[1] == r, plain.timeline[1] == r
        assert np.allclose(fast.timeline[0][a], plain.timeline[0][b]) and np.allclose(
            fast.timeline[2][a], plain.timeline[2][b]
        )
    assert set(np.unique(fast.timeline[1])) == set(np.unique(plain.timeline[1]))


def test_merging_on_the_paths_gives_the_flow_by_flow_merge():
    """The flow table merged on the distinct paths (setup flows and forwarding limits included)
    equals the full table merged flow by flow, entry for entry, and so do the bytes per resource;
    with a private rate cap it is merged flow by flow."""
    from commgraph.sim import engine

    net = load_preset("fattree:k=4,server=hgx-h100,nics=1,bisection=full").with_routing("spray")
    gpus = [g.id for g in net.gpus]
    rng = np.random.default_rng(5)
    sprayed = [
        Transfer(f"x{k}", gpus[a], gpus[b], float(rng.integers(1, 9)) * 1e8)
        for k, (a, b) in enumerate(rng.integers(0, 64, (80, 2)))
    ]
    cases = [(net, sprayed)]
    for seed in range(6):
        topology, tasks, _ = random_case(seed)
        cases += [
            (topology, tasks),
            (topology, [replace(t, max_rate=None) if isinstance(t, Transfer) else t for t in tasks]),
        ]
    merged_any = False
    for topology, tasks in cases:
        transfer = check_dag(tasks).transfer
        full = engine._Flows(topology, tasks, transfer)
        expected, stands_for = engine.merge_identical(full.arrays())
        fast = engine._Flows(topology, tasks, transfer, merge=True)
        got = fast.arrays()
        for field in ("ptr", "resources", "weights", "sizes", "capacity"):
            assert np.array_equal(getattr(got, field), getattr(expected, field)), field
        assert np.array_equal(fast.stands_for, stands_for)
        assert np.array_equal(fast.bytes_per_resource(), full.bytes_per_resource())
        merged_any |= bool((stands_for != np.arange(stands_for.shape[0])).any())
    assert merged_any


def _without_implied(net, tasks):
    """``simulate`` with every resource a constraint (no resource dropped as implied)."""
    from commgraph.sim import engine

    original = engine.implied
    try:
        engine.implied = lambda flows: np.zeros(flows.capacity.shape[0], dtype=bool)
        return simulate(net, tasks, timeline=False)
    finally:
        engine.implied = original


def test_links_the_servers_links_imply_stop_constraining_and_every_time_stays():
    from commgraph.plan.coflow import schedule
    from commgraph.sim import engine
    from commgraph.workload import Layout, ModelSpec, build_iteration, gpu

    spec = ModelSpec(
        "moe-tiny", layers=2, hidden=256, heads=4, seq_len=128, micro_batch=1, vocab=0, experts=8, top_k=2, ffn=512
    )
    for routing in ("spray", "ecmp"):
        net = load_preset("fattree:k=4,server=hgx-h100,nics=1,bisection=full", speeds={"ib": 12.5}).with_routing(
            routing
        )
        it = build_iteration(spec, Layout(tp=2, pp=2, dp=8, ep=8, microbatches=2), gpu("h100"), net)
        tasks = schedule("hermod", it.tasks, it.coflows, net, matching="alg3").tasks
        table, _ = engine.merge_identical(engine._Flows(net, tasks, check_dag(tasks).transfer).arrays())
        dropped = engine.implied(table)
        kinds = [
            tuple(net.device(d).kind for d in (net.links[r // 2].a, net.links[r // 2].b))
            for r in range(2 * len(net.links))
        ]
        fabric = [r for r in np.unique(table.resources) if kinds[r] == ("switch", "switch")]
        nics = [r for r in np.unique(table.resources) if "nic" in kinds[r]]
        assert fabric and nics and not dropped[nics].any()  # each server's network link stays
        if routing == "spray":  # the switches' links go
            assert dropped[fabric].all()
        else:  # hashed flows collide there
            assert not dropped[fabric].all()
        fast, plain = simulate(net, tasks, timeline=False), _without_implied(net, tasks)
        for field in ("start", "finish", "busy_seconds", "bytes_moved"):  # bit for bit
            assert np.array_equal(getattr(fast, field), getattr(plain, field))


def test_a_resource_is_implied_only_by_resources_that_stay():
    from commgraph.sim import engine

    def flows(ptr, resources, weights, capacity):
        table = engine._Flows(line(), [], np.zeros(0, dtype=bool)).arrays()
        return table._replace(
            ptr=np.array(ptr),
            resources=np.array(resources),
            weights=np.array(weights, float),
            capacity=np.array(capacity, float),
        )

    # one flow on two equal links: each bounds the other, so neither may go
    assert not engine.implied(flows([0, 2], [0, 1], [1, 1], [1, 1])).any()
    # two flows from links 0 and 1 share link 2, half of each: 2 is implied at capacity 1, not at 0.9
    assert engine.implied(flows([0, 2, 4], [0, 2, 1, 2], [1, 0.5, 1, 0.5], [1, 1, 1])).tolist() == [False, False, True]
    assert not engine.implied(flows([0, 2, 4], [0, 2, 1, 2], [1, 0.5, 1, 0.5], [1, 1, 0.9])).any()
    # and a flow wholly on link 2 beside them leaves its own cover in
    assert not engine.implied(flows([0, 2, 4, 5], [0, 2, 1, 2, 2], [1, 0.5, 1, 0.5, 1], [1, 1, 1]))[2]


def test_flows_on_one_path_share_its_row_and_every_time_stays():
    """The event loop on the table whose flows share their paths' rows gives the start, finish
    and busy times and the timeline of the table with a row per flow, bit for bit: a sprayed MoE
    under Algorithm 3 and random DAGs with setup flows, forwarding limits and rate caps, with and
    without a recorded timeline (links the others imply dropped)."""
    from commgraph.plan.coflow import schedule
    from commgraph.sim import engine
    from commgraph.sim.events import simulate_events
    from commgraph.workload import Layout, ModelSpec, build_iteration, gpu

    spec = ModelSpec(
        "moe-tiny", layers=2, hidden=256, heads=4, seq_len=128, micro_batch=1, vocab=0, experts=8, top_k=2, ffn=512
    )
    net = load_preset("fattree:k=4,server=hgx-h100,nics=1,bisection=full", speeds={"ib": 12.5}).with_routing("spray")
    it = build_iteration(spec, Layout(tp=2, pp=2, dp=8, ep=8, microbatches=2), gpu("h100"), net)
    moe = schedule("hermod", it.tasks, it.coflows, net, matching="alg3").tasks
    cases = [(net, moe, {})]
    for seed in range(3):
        topology, tasks, cores = random_case(seed)
        uncapped = [replace(t, max_rate=None) if isinstance(t, Transfer) else t for t in tasks]
        cases += [(topology, tasks, cores), (topology, uncapped, cores)]
    for topology, tasks, cores in cases:
        dependents = check_dag(tasks)
        flows = engine._Flows(topology, tasks, dependents.transfer, merge=True)
        shared, own = flows.table(), flows.arrays()
        if tasks is moe:
            assert flows.row_resources.shape[0] * 10 < own.resources.shape[0]  # far fewer route entries
        assert np.array_equal(engine.implied(shared), engine.implied(own))
        own = own._replace(path=np.arange(flows.sizes.shape[0]))
        arrays = engine._task_arrays(topology, tasks, dependents, flows, cores)
        for record in (False, True):
            if record:
                a, b = shared, own
            else:
                keep = ~engine.implied(shared)
                a, b = engine.binding_first(shared, keep), engine.binding_first(own, keep)
            fast, plain = simulate_events(a, arrays, True, record), simulate_events(b, arrays, True, record)
            assert not np.isnan(fast.finish).any()
            for field in fast._fields:
                assert np.array_equal(getattr(fast, field), getattr(plain, field)), field
