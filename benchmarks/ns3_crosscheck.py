"""Packet-level cross-check of the flow-level simulator on ns-3 (issue 33): one small fat-tree
scenario exported from a coflow DAG (``commgraph.sim.packet``) replayed in ns-3 3.44 (the PyPI
package ``ns3``, optional extra ``packet``) and in the flow-level simulator, under two disciplines:

- ``fifo``: every switch and host port one FIFO queue disc;
- ``bands``: Hermod's priority bands, the TOS byte set per flow and a strict-priority
  ``PrioQueueDisc`` on every port (ns-3 maps the TOS byte to 4 socket priorities: 4 bands).

In ns-3 every flow is a TCP connection (``BulkSend`` to a ``PacketSink``, NewReno, 1448-byte
segments) released at its time. Under ``ecmp`` routing it takes the path the flow-level simulator's
ECMP hash gave it: each path to a host is an address of that host with static host routes along
the path; acknowledgements take the shortest path back. Under ``spray`` (``--routing spray``, or a
sprayed scenario file) every node routes by ns-3's global routing with ``RandomEcmpRouting``: each
packet, acknowledgements included, leaves on one of the equal-cost next hops at random (packet
spraying), while the flow-level simulator splits each flow evenly over every shortest path; TCP
then waits for ``SPRAY_DUPACKS`` duplicate acknowledgements (not 3) before a fast retransmit, as
a sprayed fabric's transport must tolerate reordering (with 3, one 12.5 MB flow over two paths
takes longer than over one). The report gives, per discipline, each coflow's completion time in
both simulators (median and worst relative difference) and the mean completion per coflow type,
so that a gap between FIFO and the bands that only packets open shows.

    python benchmarks/ns3_crosscheck.py [--scenario FILE | --write FILE] [--routing spray] [--flows N] [--json OUT]

Without ``--scenario`` it builds the default scenario: a small MoE (4 layers, hidden 512, 8
experts, tp 2, pp 2, dp 8, ep 8, 4 micro-batches) on 32 GPUs of a ``fattree:k=4,nics=1``
cluster at 100 Gbit/s, scheduled by Hermod (Algorithm 3 all-to-alls), its network flows released
when the flow-level run of the whole DAG started them.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import deque
from dataclasses import replace
from pathlib import Path

import numpy as np

from commgraph.sim.packet import Scenario, coflow_completion, export_scenario, flow_level, read_scenario, write_scenario
from commgraph.study.coflow import run_schedule
from commgraph.topology import load_preset
from commgraph.workload import Layout, ModelSpec, build_iteration, gpu

BAND_TOS = (16, 24, 8, 0)  # TOS bytes whose ns-3 socket priorities are 6, 4, 2, 0: bands 0 (first) to 3
PRIOMAP = "3 3 2 3 1 3 0 3 3 3 3 3 3 3 3 3"  # socket priority -> band
QUEUE_PACKETS = 1000  # per queue disc (per band in ``bands``)
SPRAY_DUPACKS = 100  # duplicate acknowledgements before a fast retransmit when packets are sprayed
WATCH = """
#include "ns3/application.h"
#include "ns3/simulator.h"
namespace xcheck {
std::vector<double> finish;
std::vector<uint64_t> need, got;
void OnRx(uint32_t n, ns3::Ptr<const ns3::Packet> p, const ns3::Address&) {
    got[n] += p->GetSize();
    if (got[n] >= need[n] && finish[n] < 0) finish[n] = ns3::Simulator::Now().GetSeconds();
}
void Watch(ns3::Ptr<ns3::Application> sink, uint32_t n, uint64_t bytes) {
    if (finish.size() <= n) { finish.resize(n + 1, -1.0); need.resize(n + 1, 0); got.resize(n + 1, 0); }
    need[n] = bytes;
    sink->TraceConnectWithoutContext("Rx", ns3::MakeBoundCallback(&OnRx, n));
}
void Reset() { finish.clear(); need.clear(); got.clear(); }
}
"""


def default_scenario(routing: str = "ecmp") -> Scenario:
    spec = ModelSpec(
        "moe-tiny", layers=4, hidden=512, heads=8, seq_len=256, micro_batch=1, vocab=0, experts=8, top_k=2, ffn=1024
    )
    net = load_preset(
        "fattree:k=4,server=hgx-h100,nics=1,latency=1,bisection=full", speeds={"ib": 100 / 8, "pcie": 64.0}
    ).with_routing(routing)
    it = build_iteration(spec, Layout(tp=2, pp=2, dp=8, ep=8, microbatches=4), gpu("h100"), net)
    outcome = run_schedule("hermod", it.tasks, it.coflows, net)
    return export_scenario(
        net,
        outcome.schedule.tasks,
        outcome.schedule.coflows,
        outcome.result.start,
        name=f"moe-tiny on fattree:k=4,nics=1, {routing}, hermod",
    )


def ns3_replay(scenario: Scenario, *, priorities: bool, seed: int = 1) -> np.ndarray:
    """Each flow's finish time (seconds from the first release) in ns-3; NaN where a flow did not
    finish within 10x the flow-level makespan."""
    import cppyy
    from ns import ns  # the optional extra ``packet``

    if not hasattr(cppyy.gbl, "xcheck"):
        cppyy.cppdef(WATCH)
    cppyy.gbl.xcheck.Reset()
    ns.RngSeedManager.SetSeed(seed)
    ns.Config.SetDefault("ns3::TcpSocket::SegmentSize", ns.UintegerValue(1448))
    ns.Config.SetDefault("ns3::TcpSocket::SndBufSize", ns.UintegerValue(4 << 20))
    ns.Config.SetDefault("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(4 << 20))
    spray = scenario.routing == "spray"
    ns.Config.SetDefault("ns3::Ipv4GlobalRouting::RandomEcmpRouting", ns.BooleanValue(spray))
    ns.Config.SetDefault("ns3::TcpSocketBase::ReTxThreshold", ns.UintegerValue(SPRAY_DUPACKS if spray else 3))
    names = [*scenario.hosts, *scenario.switches]
    nodes = ns.NodeContainer()
    nodes.Create(len(names))
    node = {name: nodes.Get(i) for i, name in enumerate(names)}
    stack = ns.InternetStackHelper()
    stack.SetRoutingHelper(ns.Ipv4GlobalRoutingHelper() if spray else ns.Ipv4StaticRoutingHelper())
    stack.Install(nodes)
    p2p = ns.PointToPointHelper()
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", ns.QueueSizeValue(ns.QueueSize("1p")))
    tch = ns.TrafficControlHelper()
    if priorities:
        handle = tch.SetRootQueueDisc("ns3::PrioQueueDisc", "Priomap", ns.StringValue(PRIOMAP))
        classes = tch.AddQueueDiscClasses(handle, 4, "ns3::QueueDiscClass")
        for band in range(4):
            tch.AddChildQueueDisc(
                handle,
                classes[band],
                "ns3::FifoQueueDisc",
                "MaxSize",
                ns.QueueSizeValue(ns.QueueSize(f"{QUEUE_PACKETS}p")),
            )
    else:
        tch.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", ns.QueueSizeValue(ns.QueueSize(f"{QUEUE_PACKETS}p")))
    address = ns.Ipv4AddressHelper()
    ends: dict[tuple[str, str], tuple[int, object]] = {}  # (node, neighbour): (interface, neighbour's address)
    for k, link in enumerate(scenario.links):
        p2p.SetDeviceAttribute("DataRate", ns.DataRateValue(ns.DataRate(int(link.bits_per_second))))
        p2p.SetChannelAttribute("Delay", ns.TimeValue(ns.MicroSeconds(link.latency_us)))
        devices = p2p.Install(node[link.a], node[link.b])
        tch.Install(devices)
        address.SetBase(ns.Ipv4Address(f"10.{k >> 8}.{k & 255}.0"), ns.Ipv4Mask("255.255.255.0"))
        ifaces = address.Assign(devices)
        for side, (me, other) in enumerate(((link.a, link.b), (link.b, link.a))):
            ipv4 = node[me].GetObject[ns.Ipv4]()
            ends[(me, other)] = (ipv4.GetInterfaceForDevice(devices.Get(side)), ifaces.GetAddress(1 - side))
    if spray:  # shortest paths everywhere, each packet on one of them at random
        ns.Ipv4GlobalRoutingHelper.PopulateRoutingTables()
        address_of = {}  # a host's address on its link
        for (_, there), (_, address) in ends.items():
            address_of.setdefault(there, address)
        aliases = {f.path: address_of[f.dst] for f in scenario.flows}
    else:
        routing = ns.Ipv4StaticRoutingHelper()
        table = {n: routing.GetStaticRouting(node[n].GetObject[ns.Ipv4]()) for n in names}
        _ack_routes(scenario, names, ends, table, ns)
        aliases = {}
        for f in scenario.flows:
            if f.path not in aliases:
                aliases[f.path] = _alias(len(aliases), f.path, ends, node, table, ns)
    sinks, sources = ns.ApplicationContainer(), ns.ApplicationContainer()
    for n, f in enumerate(scenario.flows):
        port = 1024 + n
        sink = ns.PacketSinkHelper(
            "ns3::TcpSocketFactory", ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo()
        )
        app = sink.Install(node[f.dst]).Get(0)
        cppyy.gbl.xcheck.Watch(app, n, f.bytes)
        sinks.Add(app)
        bulk = ns.BulkSendHelper("ns3::TcpSocketFactory", ns.InetSocketAddress(aliases[f.path], port).ConvertTo())
        bulk.SetAttribute("MaxBytes", ns.UintegerValue(f.bytes))
        bulk.SetAttribute("SendSize", ns.UintegerValue(1448))
        bulk.SetAttribute("Tos", ns.UintegerValue(BAND_TOS[min(f.band, 3)] if priorities else 0))
        started = bulk.Install(node[f.src])
        started.Start(ns.Seconds(f.release_s))
        sources.Add(started)
    horizon = 10 * float(flow_level(scenario, priorities=priorities).finish.max())
    ns.Simulator.Stop(ns.Seconds(horizon))
    ns.Simulator.Run()
    finish = np.array([cppyy.gbl.xcheck.finish[n] for n in range(len(scenario.flows))])
    ns.Simulator.Destroy()
    return np.where(finish < 0, np.nan, finish)


def _ack_routes(scenario: Scenario, names: list[str], ends: dict, table: dict, ns) -> None:
    """Every node's host route to every host's first address, along a shortest path (BFS)."""
    neighbours: dict[str, list[str]] = {n: [] for n in names}
    for a, b in ends:
        neighbours[a].append(b)
    for host in scenario.hosts:
        first = next(b for b in neighbours[host])
        target = ends[(first, host)][1]  # the host's address on its first link
        parent = {host: None}
        queue = deque([host])
        while queue:
            here = queue.popleft()
            for n in neighbours[here]:
                if n not in parent:
                    parent[n] = here
                    queue.append(n)
        for n, toward in parent.items():
            if toward is not None:
                interface, hop = ends[(n, toward)]
                table[n].AddHostRouteTo(target, hop, interface)


def _alias(k: int, path: tuple[str, ...], ends: dict, node: dict, table: dict, ns):
    """A new /32 address of the path's last host on its last link, with host routes to it at
    every node before it on the path."""
    alias = ns.Ipv4Address(f"11.{k >> 16 & 255}.{k >> 8 & 255}.{k & 255}")
    interface, _ = ends[(path[-1], path[-2])]
    ipv4 = node[path[-1]].GetObject[ns.Ipv4]()
    ipv4.AddAddress(interface, ns.Ipv4InterfaceAddress(alias, ns.Ipv4Mask("255.255.255.255")))
    for here, there in zip(path, path[1:]):
        out, hop = ends[(here, there)]
        table[here].AddHostRouteTo(alias, hop, out)
    return alias


def compare(scenario: Scenario, seed: int) -> dict:
    """Per discipline: both simulators' per-coflow completion times and their relative difference."""
    report = {
        "scenario": scenario.name,
        "flows": len(scenario.flows),
        "bytes": sum(f.bytes for f in scenario.flows),
        "coflows": len({f.coflow for f in scenario.flows}),
        "disciplines": {},
    }
    kinds = {f.coflow: f.kind for f in scenario.flows}
    for label, priorities in (("fifo", False), ("bands", True)):
        start = time.perf_counter()
        packet = ns3_replay(scenario, priorities=priorities, seed=seed)
        wall = time.perf_counter() - start
        flow = flow_level(scenario, priorities=priorities).finish
        ok = ~np.isnan(packet)
        a = coflow_completion(scenario, flow)
        b = coflow_completion(scenario, np.where(ok, packet, np.inf))
        diff = np.array([(b[c] - a[c]) / a[c] for c in a])
        by_kind = {
            k: {
                "flow_level_ms": 1e3 * float(np.mean([a[c] for c in a if kinds[c] == k])),
                "ns3_ms": 1e3 * float(np.mean([b[c] for c in b if kinds[c] == k])),
            }
            for k in dict.fromkeys(kinds.values())
        }
        report["disciplines"][label] = {
            "unfinished_flows": int((~ok).sum()),
            "ns3_wall_s": wall,
            "makespan_flow_level_ms": 1e3 * float(flow.max()),
            "makespan_ns3_ms": 1e3 * float(np.nanmax(packet)),
            "median_relative_difference": float(np.median(np.abs(diff))),
            "worst_relative_difference": float(diff[np.argmax(np.abs(diff))]),
            "by_kind": by_kind,
        }
    return report


def print_report(report: dict) -> None:
    print(
        f"{report['scenario']}: {report['flows']:,} flows, {report['bytes'] / 1e6:.1f} MB, {report['coflows']} coflows"
    )
    print("| discipline | coflow type | flow-level mean CCT ms | ns-3 mean CCT ms |")
    print("|---|---|---|---|")
    for label, d in report["disciplines"].items():
        for kind, row in d["by_kind"].items():
            print(f"| {label} | {kind} | {row['flow_level_ms']:.3f} | {row['ns3_ms']:.3f} |")
    print(
        "\n| discipline | makespan flow-level ms | makespan ns-3 ms | per-coflow CCT: median abs. rel. diff | "
        "worst rel. diff | unfinished flows | ns-3 wall s |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, d in report["disciplines"].items():
        print(
            f"| {label} | {d['makespan_flow_level_ms']:.3f} | {d['makespan_ns3_ms']:.3f} | "
            f"{d['median_relative_difference']:.1%} | {d['worst_relative_difference']:+.1%} | "
            f"{d['unfinished_flows']} | {d['ns3_wall_s']:.0f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", type=Path, help="a scenario file (default: build the default scenario)")
    parser.add_argument("--write", type=Path, help="write the scenario here before running it")
    parser.add_argument("--json", type=Path, help="write the report as JSON here")
    parser.add_argument("--flows", type=int, default=0, help="replay only the first N flows (by release; 0: all)")
    parser.add_argument("--seed", type=int, default=1, help="ns-3's random seed")
    parser.add_argument(
        "--routing",
        choices=("ecmp", "spray"),
        default="ecmp",
        help="the default scenario's routing: each flow on its ECMP path, or packets sprayed",
    )
    args = parser.parse_args()
    scenario = read_scenario(args.scenario) if args.scenario else default_scenario(args.routing)
    if args.flows:
        first = sorted(scenario.flows, key=lambda f: f.release_s)[: args.flows]
        scenario = replace(scenario, flows=tuple(first), name=f"{scenario.name}, first {len(first)} flows")
    if args.write:
        write_scenario(scenario, args.write)
    report = compare(scenario, args.seed)
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
