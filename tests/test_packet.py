import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from commgraph.errors import SimulationError
from commgraph.sim.packet import (
    Scenario,
    ScenarioFlow,
    ScenarioLink,
    coflow_completion,
    export_scenario,
    flow_level,
    read_scenario,
    write_scenario,
)
from commgraph.study.coflow import run_schedule
from commgraph.topology import load_preset
from commgraph.workload import Layout, ModelSpec, build_iteration, gpu

GBIT = 1e9


def _moe_run():
    spec = ModelSpec(
        "moe-tiny", layers=2, hidden=256, heads=4, seq_len=128, micro_batch=1, vocab=0, experts=8, top_k=2, ffn=512
    )
    net = load_preset(
        "fattree:k=4,server=hgx-h100,nics=1,latency=1,bisection=full", speeds={"ib": 100 / 8, "pcie": 64.0}
    )
    it = build_iteration(spec, Layout(tp=2, pp=2, dp=8, ep=8, microbatches=2), gpu("h100"), net)
    return net, run_schedule("hermod", it.tasks, it.coflows, net)


def test_export_keeps_the_network_flows_their_paths_release_times_and_ranked_bands(tmp_path):
    net, outcome = _moe_run()
    tasks = outcome.schedule.tasks
    scenario = export_scenario(net, tasks, outcome.schedule.coflows, outcome.result.start, bands=4)
    host = {d.id: d.host for d in net.devices}
    crossing = [
        i
        for c in outcome.schedule.coflows
        for i in c.flows
        if host[tasks[i].src] != host[tasks[i].dst] and tasks[i].bytes > 0
    ]
    assert len(scenario.flows) == len(crossing)
    assert {f.kind for f in scenario.flows} == {"ep", "pp", "dp"}
    assert min(f.release_s for f in scenario.flows) == 0.0
    t0 = min(outcome.result.start[i] for i in crossing)
    by_id = {t.id: i for i, t in enumerate(tasks)}
    for f in scenario.flows:
        i = by_id[f.id]
        assert f.release_s == pytest.approx(outcome.result.start[i] - t0, abs=1e-15)
        assert f.bytes == int(np.ceil(tasks[i].bytes))
        assert f.src == f.path[0] and f.dst == f.path[-1] and len(f.path) in (3, 5)
    # a higher-priority class never lands in a lower band
    pairs = sorted((tasks[by_id[f.id]].priority, f.band) for f in scenario.flows)
    assert all(a[1] <= b[1] for a, b in zip(pairs, pairs[1:]))
    assert {f.band for f in scenario.flows} == {0, 1, 2, 3}
    write_scenario(scenario, tmp_path / "s.json")
    assert read_scenario(tmp_path / "s.json") == scenario


def _two_hosts(*flows: ScenarioFlow) -> Scenario:
    links = (ScenarioLink("h0", "sw", 100 * GBIT, 1.0), ScenarioLink("sw", "h1", 100 * GBIT, 1.0))
    return Scenario("two hosts", 2, ("h0", "h1"), ("sw",), links, flows)


def _two_paths(routing: str, *flows: ScenarioFlow) -> Scenario:
    """h0 - x at 200 Gbit/s, two 100 Gbit/s paths x - y0|y1 - z, z - h1 at 200 Gbit/s; 1 us links."""
    links = (
        ScenarioLink("h0", "x", 200 * GBIT, 1.0),
        ScenarioLink("x", "y0", 100 * GBIT, 1.0),
        ScenarioLink("x", "y1", 100 * GBIT, 1.0),
        ScenarioLink("y0", "z", 100 * GBIT, 1.0),
        ScenarioLink("y1", "z", 100 * GBIT, 1.0),
        ScenarioLink("z", "h1", 200 * GBIT, 1.0),
    )
    return Scenario("two paths", 1, ("h0", "h1"), ("x", "y0", "y1", "z"), links, flows, routing)


def test_a_sprayed_scenario_splits_each_flow_over_both_paths_and_round_trips(tmp_path):
    flow = ScenarioFlow("a", "ca", "ep", "h0", "h1", 12_500_000, 0.0, 0, ("h0", "x", "y0", "z", "h1"))
    ecmp, spray = _two_paths("ecmp", flow), _two_paths("spray", flow)
    assert flow_level(ecmp).finish[0] == pytest.approx(1e-3 + 4e-6)  # 100 Mbit at 100 Gbit/s, 4 links' latency
    assert flow_level(spray).finish[0] == pytest.approx(0.5e-3 + 4e-6)  # half on each path
    write_scenario(spray, tmp_path / "s.json")
    assert read_scenario(tmp_path / "s.json") == spray
    with pytest.raises(SimulationError, match="routing must be one of ecmp, spray, got 'adaptive'"):
        _two_paths("adaptive", flow)


def test_export_of_a_sprayed_fabric_says_so_and_keeps_the_ecmp_path():
    net, outcome = _moe_run()
    sprayed = net.with_routing("spray")
    tasks, coflows = outcome.schedule.tasks, outcome.schedule.coflows
    ecmp = export_scenario(net, tasks, coflows, outcome.result.start)
    spray = export_scenario(sprayed, tasks, coflows, outcome.result.start)
    assert (ecmp.routing, spray.routing) == ("ecmp", "spray")
    assert spray.flows == ecmp.flows


def _flow(name, band, release=0.0, nbytes=1_250_000):
    return ScenarioFlow(name, f"c{name}", "dp", "h0", "h1", nbytes, release, band, ("h0", "sw", "h1"))


def test_flow_level_replay_gives_line_rate_priorities_and_release_times_exactly():
    one = flow_level(_two_hosts(_flow("a", 0)))
    assert one.finish[0] == pytest.approx(1_250_000 * 8 / (100 * GBIT) + 2e-6)  # 100 us + two 1 us links
    both = _two_hosts(_flow("a", 1), _flow("b", 0))
    banded = flow_level(both).finish
    assert banded[1] == pytest.approx(100e-6 + 2e-6) and banded[0] == pytest.approx(200e-6 + 2e-6)
    fifo = flow_level(both, priorities=False).finish
    assert fifo == pytest.approx([202e-6, 202e-6])
    late = _two_hosts(_flow("a", 0), _flow("b", 0, release=300e-6))
    finish = flow_level(late).finish
    assert finish[1] == pytest.approx(402e-6)
    assert coflow_completion(late, finish) == pytest.approx({"ca": 102e-6, "cb": 102e-6})


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.update(format="other"), "not a commgraph-packet-scenario"),
        (lambda d: d["flows"][0].pop("bytes"), "missing field 'bytes'"),
        (lambda d: d["flows"][0].update(bytes=0), "bytes >= 1"),
        (lambda d: d["flows"][0].update(band=2), "band < 2"),
        (lambda d: d["flows"][0].update(path=["h0", "h1"]), "no link joins"),
        (lambda d: d["flows"][0].update(dst="sw"), "two different hosts"),
        (lambda d: d["links"][0].update(bits_per_second=0), "bits_per_second > 0"),
        (lambda d: d["flows"].append(dict(d["flows"][0])), "repeats"),
    ],
)
def test_bad_scenario_files_are_refused_naming_the_problem(tmp_path, edit, message):
    data = _two_hosts(_flow("a", 0)).to_dict()
    edit(data)
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(SimulationError, match=message):
        read_scenario(tmp_path / "bad.json")


def test_export_refuses_coflows_that_stay_inside_servers():
    net = load_preset("hgx-h100")
    from commgraph.sim import Transfer
    from commgraph.sim.coflow import Coflow

    tasks = [Transfer("x", "gpu0", "gpu1", 1e6)]
    with pytest.raises(SimulationError, match="crosses the network"):
        export_scenario(net, tasks, [Coflow("c", "dp", 0, 0, (0,))], np.zeros(1))


@pytest.mark.skipif(
    importlib.util.find_spec("ns") is None, reason="ns-3's Python bindings are absent (pip install 'commgraph[packet]')"
)
def test_ns3_replays_a_small_scenario_close_to_the_flow_level_simulator():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from ns3_crosscheck import ns3_replay

    scenario = _two_hosts(_flow("a", 1, nbytes=12_500_000), _flow("b", 0, release=200e-6, nbytes=12_500_000))
    flow = flow_level(scenario).finish  # b at 1.2 ms, a at 2 ms
    packet = ns3_replay(scenario, priorities=True)
    assert not np.isnan(packet).any()
    assert packet[1] < packet[0]  # the band-0 flow overtakes the earlier band-1 flow
    assert np.abs(packet / flow - 1).max() < 0.1  # TCP's handshake and slow start, headers


@pytest.mark.skipif(
    importlib.util.find_spec("ns") is None, reason="ns-3's Python bindings are absent (pip install 'commgraph[packet]')"
)
def test_ns3_sprays_packets_over_both_paths():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from ns3_crosscheck import ns3_replay

    flow = ScenarioFlow("a", "ca", "ep", "h0", "h1", 12_500_000, 0.0, 0, ("h0", "x", "y0", "z", "h1"))
    packet = ns3_replay(_two_paths("spray", flow), priorities=False)[0]
    assert flow_level(_two_paths("spray", flow)).finish[0] < packet < 0.9e-3  # one path at line rate: 1 ms
