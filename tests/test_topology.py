from pathlib import Path

import numpy as np
import pytest
from scipy.sparse.csgraph import dijkstra

from commgraph.errors import TopologyError
from commgraph.topology import Device, Link, Topology, load_preset, load_topology, read_yaml, write_yaml
from commgraph.topology.detect import parse_topo_matrix
from commgraph.topology.distances import dijkstra_until
from commgraph.topology.files import to_yaml
from commgraph.topology.presets import DEFAULT_SPEEDS, DGX1_NV1, DGX1_NV2, SERVERS, preset_speeds

FIXTURES = Path(__file__).parent / "fixtures"


def nvlinks(topology):
    """{(gpu, gpu): count} of GPU-GPU NVLink entries."""
    return {tuple(sorted((l.a, l.b))): l.count for l in topology.links if l.kind == "nvlink"}


def test_dgx1_wiring_is_exact():
    t = load_preset("dgx1-v100")
    assert len(t.gpus) == 8 and sum(nvlinks(t).values()) == 24
    expected = {(f"gpu{i}", f"gpu{j}"): 2 for i, j in DGX1_NV2} | {(f"gpu{i}", f"gpu{j}"): 1 for i, j in DGX1_NV1}
    assert nvlinks(t) == expected
    for g in range(8):  # 6 NVLinks per GPU
        assert sum(c for pair, c in nvlinks(t).items() if f"gpu{g}" in pair) == 6
    assert {l.bandwidth_gbps for l in t.links if l.kind == "nvlink"} == {48.35, 24.22}
    assert load_preset("p3.16xlarge").to_dict()["links"] == t.to_dict()["links"]


def test_p3_8xlarge_is_the_four_gpu_half():
    t = load_preset("p3.8xlarge")
    assert len(t.gpus) == 4 and sum(nvlinks(t).values()) == 9


@pytest.mark.parametrize(
    "name",
    [
        *SERVERS,
        "localhost-cpu:3",
        "2xdgx1-v100-ib",
        "3xp3.8xlarge-eth",
        *(
            pytest.param(spec, marks=pytest.mark.slow)  # 80 servers: seconds to draw
            for spec in ("fattree:k=4,server=p3.8xlarge", "fattree:k=4,link=eth")
        ),
    ],
)
def test_every_preset_loads_validates_round_trips_and_draws(name, tmp_path):
    t = load_preset(name)
    again = read_yaml(_written(t, tmp_path))
    assert again.same_as(t)
    assert to_yaml(again) == to_yaml(t)
    from commgraph.topology.draw import draw_topology

    draw_topology(t, tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


def _written(topology, tmp_path):
    path = tmp_path / "t.yaml"
    write_yaml(topology, path)
    return path


def test_nvswitch_machines_and_cluster_sizes():
    a100 = load_preset("dgx-a100")
    for g in a100.gpus:
        assert sum(l.count for l in a100.links if l.kind == "nvswitch" and g.id in (l.a, l.b)) == 12
    assert sum(1 for d in a100.devices if d.kind == "nic") == 8
    h100 = load_preset("hgx-h100")
    for g in h100.gpus:
        assert sum(l.count for l in h100.links if l.kind == "nvswitch" and g.id in (l.a, l.b)) == 18
    p2 = load_preset("p2.16xlarge")
    assert len(p2.gpus) == 16 and not nvlinks(p2)
    cluster = load_preset("2xdgx1-v100-ib")
    assert len(cluster.gpus) == 16 and cluster.hosts[:2] == ["node0", "node1"]
    assert sum(1 for l in cluster.links if l.kind == "infiniband") == 8
    fat = load_preset("fattree:k=8")
    assert len(fat.gpus) == 1024 and sum(1 for d in fat.devices if d.id.startswith("core")) == 16


def test_speeds_can_be_changed():
    t = load_preset("dgx1-v100", {"nv2": 40.0, "pcie": 24.0})
    assert {l.bandwidth_gbps for l in t.links if l.kind == "nvlink" and l.count == 2} == {40.0}
    assert {l.bandwidth_gbps for l in t.links if l.kind == "pcie"} == {24.0}
    with pytest.raises(TopologyError, match="unknown speed key"):
        load_preset("dgx1-v100", {"warp": 1.0})


def _speeds_by_kind(topology, host_prefix):
    """Each link kind of the devices whose ids start with ``host_prefix``: the set of (count, GB/s)."""
    kinds = {}
    for link in topology.links:
        if link.a.startswith(host_prefix) and link.kind != "infiniband":
            kinds.setdefault(link.kind, set()).add((link.count, link.bandwidth_gbps))
    return kinds


@pytest.mark.parametrize("cluster,prefix", [("fattree:k=2,server=hgx-h100", "s1."), ("2xhgx-h100-ib", "n1.")])
def test_every_server_of_a_cluster_keeps_its_presets_speeds(cluster, prefix):
    """A fat-tree's and an NxPRESET cluster's servers: the preset's NVSwitch ports (5, 4, 4, 5 links
    of 20.6 GB/s), PCIe gen5 48 GB/s, QPI and 50 GB/s NICs, link for link."""
    one, net = load_preset("hgx-h100"), load_preset(cluster)
    assert _speeds_by_kind(net, prefix) == _speeds_by_kind(one, "")
    assert _speeds_by_kind(one, "")["nvswitch"] == {(5, 5 * 20.6), (4, 4 * 20.6)}
    assert _speeds_by_kind(one, "")["pcie"] == {(1, 48.0)}
    assert {l.bandwidth_gbps for l in net.links if l.kind == "infiniband" and ".nic" in l.a} == {50.0}
    rule = preset_speeds(cluster)
    assert rule.describe({"nvswitch", "pcie", "infiniband"}) == "nv1 20.6, pcie 48, ib 50 GB/s (hgx-h100's preset)"


def test_a_clusters_speed_override_wins_over_its_servers_own():
    net = load_preset("fattree:k=2,server=hgx-h100,bisection=full", {"ib": 12.5, "pcie": 64.0})
    assert {l.bandwidth_gbps for l in net.links if l.kind == "pcie"} == {64.0}
    assert {l.bandwidth_gbps for l in net.links if l.kind == "infiniband" and ".nic" in l.a} == {12.5}
    assert {l.bandwidth_gbps for l in net.links if l.kind == "infiniband" and ".nic" not in l.a} == {8 * 12.5}
    assert {l.bandwidth_gbps for l in net.links if l.kind == "nvswitch"} == {5 * 20.6, 4 * 20.6}
    rule = preset_speeds("fattree:k=2,server=hgx-h100", {"ib": 12.5, "pcie": 64.0})
    assert rule.sources == {**dict.fromkeys(DEFAULT_SPEEDS, "DGCL's defaults"), "nv1": "hgx-h100's preset"} | {
        "pcie": "overridden",
        "ib": "overridden",
    }


def test_hermod_thesis_is_the_thesiss_stated_network():
    """Section 5.5: 128 servers of 8 GPUs, a full-bisection fat-tree, 100 Gbit/s links of 1 us."""
    thesis = load_preset("hermod-thesis")
    network = [l for l in thesis.links if l.kind == "infiniband"]
    assert len(thesis.hosts) == 128 + 1 and len(thesis.gpus) == 1024  # the servers and the network
    assert {(l.bandwidth_gbps, l.latency_us) for l in network} == {(100 / 8, 1.0)}
    assert {l.bandwidth_gbps for l in thesis.links if l.kind == "pcie"} == {48.0}
    assert "ib 12.5 GB/s (hermod-thesis: the thesis's 100Gbps links)" in preset_speeds("hermod-thesis").describe()
    faster = load_preset("hermod-thesis", {"ib": 50.0})
    assert {l.bandwidth_gbps for l in faster.links if l.kind == "infiniband"} == {50.0}


def test_routes_take_the_real_path_and_never_relay_through_gpus():
    t = load_preset("dgx1-v100")
    assert [(h.src, h.dst) for h in t.route("gpu0", "gpu3")] == [("gpu0", "gpu3")]
    assert [h.dst for h in t.route("gpu0", "gpu5")] == ["pcie0", "cpu0", "cpu1", "pcie2", "gpu5"]
    assert [h.dst for h in t.route("gpu5", "gpu0")] == ["pcie2", "cpu1", "cpu0", "pcie0", "gpu0"]
    assert t.route("gpu1", "gpu1") == []
    cluster = load_preset("2xdgx1-v100-ib")
    route = cluster.route("n0.gpu0", "n1.gpu7")
    assert [cluster.links[h.link].kind for h in route] == ["pcie", "pcie", "infiniband", "infiniband", "pcie", "pcie"]
    for a in cluster.gpus:
        for b in cluster.gpus:
            hops = cluster.route(a.id, b.id)
            assert all(cluster.device(h.dst).kind != "gpu" for h in hops[:-1])
            assert all(x.dst == y.src for x, y in zip(hops, hops[1:]))


def test_fat_tree_routes_spread_over_core_switches():
    t = load_preset("fattree:k=8")
    cores = {
        h.dst
        for i in range(8)
        for j in range(20)
        for h in t.route(f"s0.gpu{i}", f"s{100 + j}.gpu{i}")
        if h.dst.startswith("core")
    }
    assert len(cores) >= 12  # of 16: ECMP-like spreading, not one shortest path for all


@pytest.mark.parametrize(
    "name",
    [
        "fattree:k=4,server=hgx-h100,nics=1,bisection=full",
        "fattree:k=4,server=hgx-h100,nics=8",
        "fattree:k=4,server=dgx-a100,rail=1",
        "2xhgx-h100-ib",
        "dgx1-v100",
    ],
)
def test_a_gpus_distances_through_its_hosts_exits_equal_its_own_dijkstra(name):
    t = load_preset(name)
    graph, _, out_node = t._routing_graph
    for gpu in t.gpus[:8] + t.gpus[-3:]:
        node = out_node[t.index[gpu.id]]
        assert np.allclose(t._distances(node), dijkstra(graph, indices=node), rtol=1e-12, atol=0)


def test_the_gpus_of_a_server_with_one_nic_share_one_dijkstra():
    t = load_preset("fattree:k=4,server=hgx-h100,nics=1,bisection=full")
    _, _, out_node = t._routing_graph
    for gpu in t.gpus[:8]:
        t._distances(out_node[t.index[gpu.id]])
    assert list(t._distances.full) == [t.index["s0.nic0"]]


@pytest.mark.parametrize(
    "devices, links, message",
    [
        ([Device("a", "gpu"), Device("a", "gpu")], [], "duplicate device id 'a'"),
        ([Device("a", "gpu"), Device("b", "warp")], [], "unknown kind 'warp'"),
        ([Device("a", "gpu"), Device("b", "gpu")], [Link("a", "c", "pcie", 1, 1.0, 0.0)], "unknown device 'c'"),
        ([Device("a", "gpu"), Device("b", "gpu")], [Link("a", "b", "pcie", 1, 0.0, 0.0)], "bandwidth_gbps must be > 0"),
        ([Device("a", "gpu"), Device("b", "gpu")], [Link("a", "b", "pcie", 1, -3.0, 0.0)], "link 0 .a - b.: bandwidth"),
        ([Device("a", "gpu"), Device("b", "gpu")], [Link("a", "b", "pcie", 0, 1.0, 0.0)], "count must be"),
        (
            [Device("a", "gpu"), Device("b", "gpu"), Device("c", "cpu")],
            [Link("a", "b", "pcie", 1, 1.0, 0.0)],
            "device 'c' is disconnected",
        ),
        (
            [Device("a", "gpu"), Device("b", "gpu")],
            [Link("a", "b", "nvlink", 1, 1.0, 0.0), Link("b", "a", "nvlink", 1, 1.0, 0.0)],
            "duplicate nvlink",
        ),
        ([Device("a", "gpu"), Device("b", "gpu")], [Link("a", "a", "pcie", 1, 1.0, 0.0)], "two different devices"),
        ([Device("a", "gpu"), Device("b", "gpu")], [Link("a", "b", "warp", 1, 1.0, 0.0)], "unknown kind 'warp'"),
        (  # the first link at fault is named, whatever later links get wrong
            [Device("a", "gpu"), Device("b", "gpu")],
            [
                Link("a", "b", "pcie", 1, 1.0, 0.0),
                Link("a", "b", "qpi", 1, 1.0, -1.0),
                Link("a", "zz", "pcie", 1, 1.0, 0.0),
            ],
            r"^link 1 \(a - b\): latency_us must be >= 0, got -1.0$",
        ),
    ],
)
def test_invalid_topologies_name_the_offending_entry(devices, links, message):
    with pytest.raises(TopologyError, match=message):
        Topology("bad", devices, links)


def test_yaml_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices: [{id: a, kind: gpu}]\nlinks: [{a: a, b: zz, kind: pcie, bandwidth_gbps: 1}]\n")
    with pytest.raises(TopologyError, match="unknown device 'zz'"):
        read_yaml(bad)
    bad.write_text("devices: [{id: a, kind: gpu, colour: red}]\nlinks: []\n")
    with pytest.raises(TopologyError, match=r"device 0: unknown field\(s\) \['colour'\]"):
        read_yaml(bad)
    bad.write_text("devices: [ {id: a\n")
    with pytest.raises(TopologyError, match="not valid YAML"):
        read_yaml(bad)
    with pytest.raises(TopologyError, match="unknown topology 'dgx9'"):
        load_topology("dgx9")


def test_detect_dgx1_fixture():
    t = parse_topo_matrix((FIXTURES / "nvidia-smi-topo-dgx1.txt").read_text())
    assert nvlinks(t) == nvlinks(load_preset("dgx1-v100"))
    kinds = [d.kind for d in t.devices]
    assert kinds.count("cpu") == 2 and kinds.count("pcie_switch") == 4 and kinds.count("nic") == 4
    assert [h.dst for h in t.route("gpu0", "gpu5")] == ["pcie0", "cpu0", "cpu1", "pcie2", "gpu5"]
    assert [h.dst for h in t.route("gpu0", "gpu1")] == ["gpu1"]


def test_detect_dgx_a100_fixture_finds_the_nvswitch_fabric():
    t = parse_topo_matrix((FIXTURES / "nvidia-smi-topo-dgx-a100.txt").read_text())
    assert len(t.gpus) == 8 and not nvlinks(t)
    fabric = [l for l in t.links if l.kind == "nvswitch"]
    assert len(fabric) == 8 and {l.count for l in fabric} == {12}
    assert [h.dst for h in t.route("gpu0", "gpu7")] == ["nvswitch0", "gpu7"]
    kinds = [d.kind for d in t.devices]
    assert kinds.count("cpu") == 2 and kinds.count("pcie_switch") == 4 and kinds.count("nic") == 8


def test_detect_pcie_only_fixture_matches_the_preset():
    t = parse_topo_matrix((FIXTURES / "nvidia-smi-topo-pcie8.txt").read_text())
    preset = load_preset("pcie-8gpu-qpi")
    kinds = [d.kind for d in t.devices]
    assert kinds.count("cpu") == 2 and kinds.count("pcie_switch") == 4 and not nvlinks(t)
    for a, b in (("gpu0", "gpu1"), ("gpu0", "gpu3"), ("gpu1", "gpu6")):
        assert [h.dst for h in t.route(a, b)] == [h.dst for h in preset.route(a, b)]


def test_detect_reads_one_gpu_with_an_underlined_header():
    """nvidia-smi underlines the header with terminal codes (one H100, as the device machine printed it)."""
    t = parse_topo_matrix((FIXTURES / "nvidia-smi-topo-h100x1.txt").read_text())
    assert [d.id for d in t.devices if d.kind == "gpu"] == ["gpu0"]
    assert [h.dst for h in t.route("gpu0", "cpu0")] == ["cpu0"]


def test_detect_rejects_other_text():
    with pytest.raises(TopologyError, match="no header line"):
        parse_topo_matrix("No devices were found\n")
    text = (FIXTURES / "nvidia-smi-topo-pcie8.txt").read_text().replace("PIX", "WHAT", 1)
    with pytest.raises(TopologyError, match="unknown relation 'WHAT'"):
        parse_topo_matrix(text)


def test_detect_without_gpus_is_localhost(monkeypatch):
    import commgraph.topology.detect as detect_module

    monkeypatch.setattr(detect_module.shutil, "which", lambda name: None)
    monkeypatch.setattr(detect_module, "_cuda_device_count", lambda: 0)
    t = detect_module.detect()
    assert t.name.startswith("localhost-cpu:") and not t.gpus


def test_detect_with_cuda_but_no_nvidia_smi(monkeypatch):
    import commgraph.topology.detect as detect_module

    monkeypatch.setattr(detect_module.shutil, "which", lambda name: None)
    monkeypatch.setattr(detect_module, "_cuda_device_count", lambda: 2)
    t = detect_module.detect()
    assert [g.id for g in t.gpus] == ["gpu0", "gpu1"]
    assert [h.dst for h in t.route("gpu0", "gpu1")] == ["pcie0", "gpu1"]


@pytest.mark.multiproc
def test_machines_of_a_job_join_into_one_topology():
    """Under torchrun across machines, ``--topology detect`` joins each machine's own topology
    through a network switch: its NICs when it has them, else the hub its CPU workers share."""
    from commgraph.topology import join_hosts

    cpus = join_hosts([("a", load_preset("localhost-cpu:2")), ("b", load_preset("localhost-cpu:3"))])
    assert [d.id for d in cpus.workers] == ["a/cpu0", "a/cpu1", "b/cpu0", "b/cpu1", "b/cpu2"]
    assert cpus.device("b/cpu2").host == "b"
    assert [h.dst for h in cpus.route("a/cpu0", "b/cpu2")] == ["a/shm", "netswitch", "b/shm", "b/cpu2"]
    assert [cpus.links[h.link].kind for h in cpus.route("a/cpu0", "b/cpu2")][1:3] == ["ethernet"] * 2
    gpus = join_hosts([("x", load_preset("dgx1-v100")), ("y", load_preset("dgx1-v100"))], network="ib")
    assert len(gpus.workers) == 16 and "netswitch" in [h.dst for h in gpus.route("x/gpu0", "y/gpu5")]
    assert sum(link.kind == "infiniband" for link in gpus.links) == 8  # 4 NICs a DGX-1
    with pytest.raises(TopologyError, match="listed twice"):
        join_hosts([("a", load_preset("localhost-cpu:1"))] * 2)


def test_routing_is_a_field_that_round_trips_and_spray_splits_over_every_core_path(tmp_path):
    t = load_preset("fattree:k=4,server=hgx-h100,nics=1,latency=1,bisection=full").with_routing("spray")
    again = read_yaml(_written(t, tmp_path))
    assert again.routing == "spray" and again.same_as(t) and "routing: spray" in to_yaml(t)
    assert "routing" not in t.with_routing("ecmp").to_dict()  # the default reads as before
    a, b = t.gpus[0].id, t.gpus[-1].id  # servers in different pods: 4 core paths
    shares = {(h.src, h.dst): share for h, share in t.spread(a, b)}
    assert [shares[(h.src, h.dst)] for h in t.route(a, b)] == [1, 1, 1, 1 / 2, 1 / 4, 1 / 4, 1 / 2, 1, 1, 1, 1, 1, 1]
    assert sum(share for (src, dst), share in shares.items() if dst.startswith("core")) == pytest.approx(1.0)
    assert len([1 for (src, dst) in shares if dst.startswith("core")]) == 4
    assert [(h, 1.0) for h in t.route(a, b)] == t.with_routing("ecmp").spread(a, b)
    with pytest.raises(TopologyError, match="routing must be one of ecmp, spray, got 'random'"):
        t.with_routing("random")


def test_sprayed_shares_composed_through_the_servers_nics_equal_each_gpu_pairs_own():
    t = load_preset("fattree:k=4,server=hgx-h100,nics=1,latency=1,bisection=full").with_routing("spray")
    gpus = [g.id for g in t.gpus]
    pairs = [(a, b) for a in gpus[::3] for b in gpus[1::5] if a.split(".")[0] != b.split(".")[0]]
    assert len(pairs) > 500
    for a, b in pairs:
        start, target = t.index[a], t.index[b]
        assert t._sole_exits(start, target) == (t.index[a.split(".")[0] + ".nic0"], t.index[b.split(".")[0] + ".nic0"])
        composed = t.spread(a, b)
        assert [h for h, _ in composed[: len(t.route(a, b))]] == t.route(a, b)
        assert {(h.link, h.src): share for h, share in composed} == t._shares(start, target)  # bit for bit
    assert ("shares", t.index["s0.nic0"], t.index["s15.nic0"]) in t._route_cache  # one per pair of servers
    same_server = t._sole_exits(t.index["s0.gpu0"], t.index["s0.gpu5"])
    several = load_preset("fattree:k=4,server=hgx-h100,nics=8,bisection=full").with_routing("spray")
    assert same_server is None and several._sole_exits(several.index["s0.gpu0"], several.index["s9.gpu1"]) is None


def test_dijkstra_stopped_at_a_target_is_scipys_up_to_it_and_an_upper_bound_beyond():
    t = load_preset("fattree:k=4,server=hgx-h100,nics=1,bisection=full")
    graph, _, out_node = t._routing_graph
    args = (graph.indptr, graph.indices, graph.data)
    for source in (t.index["s0.nic0"], out_node[t.index["s3.gpu2"]], t.index["core0"]):
        whole = dijkstra(graph, indices=source)
        assert np.array_equal(dijkstra_until(*args, source, -1), whole)
        for target in (t.index["s1.gpu0"], t.index["s15.gpu7"], source):
            dist = dijkstra_until(*args, source, target)
            near = whole <= whole[target]
            assert dist[target] == whole[target]
            assert np.array_equal(dist[near], whole[near])
            assert np.all(dist[~near] >= whole[~near])
            if target != t.index["s15.gpu7"]:
                assert np.isinf(dist).any()  # it stopped before reaching the whole cluster


@pytest.mark.parametrize("routing", ["ecmp", "spray"])
def test_routes_from_searches_stopped_at_the_target_equal_those_from_whole_searches(routing):
    near = load_preset("fattree:k=4,server=hgx-h100,nics=1,bisection=full").with_routing(routing)
    whole = load_preset("fattree:k=4,server=hgx-h100,nics=1,bisection=full").with_routing(routing)
    search = whole._distances
    whole.__dict__["_distances"] = lambda node, target=None: search(node)
    whole.__dict__["_sole_exits"] = lambda start, target: None  # each pair's own shares, not composed
    gpus = [g.id for g in near.gpus]
    pairs = [(a, b) for a in gpus[::3] for b in gpus[1::5] if a != b] + [(gpus[0], "core1"), ("s2.nic0", gpus[9])]
    for a, b in pairs:
        assert near.route(a, b) == whole.route(a, b)
        assert near.spread(a, b) == whole.spread(a, b)
    assert len(near._distances.full) > 0 and all(np.isfinite(s.radius) for s in near._distances.full.values())
