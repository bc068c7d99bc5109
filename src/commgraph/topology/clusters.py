"""Clusters of server presets: ``NxSERVER-ib|eth[-railsR][-pxn]`` (servers on one network switch,
or rail-split over R switches) and ``fattree:k=K,...`` (a k-ary fat-tree; options and sources:
:mod:`commgraph.topology.presets`).

Al-Fares, Loukissas and Vahdat, "A Scalable, Commodity Data Center Network Architecture", SIGCOMM
2008 (the fat-tree); ``rail=1`` as NVIDIA's DGX SuperPOD reference architecture wires its rails.
A cluster's size is checked against the machine's memory before any device is built.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from commgraph.errors import TopologyError
from commgraph.sizes import check_room
from commgraph.topology.model import Topology
from commgraph.topology.servers import Builder, make_link, server_wiring

NETWORK_KINDS = {"ib": "infiniband", "eth": "ethernet"}


def cluster(
    b: Builder, count: int, server: str, network: str, name: str, rails: int = 1, pxn: bool = False
) -> Topology:
    """``count`` servers whose NICs plug into one non-blocking network switch, or with ``rails`` > 1
    into ``rails`` switches (NIC i of every server into switch i mod rails; at most one rail per
    NIC); ``pxn``: routes may relay through GPUs."""
    build = server_wiring(server)
    if count < 1 or rails < 1:
        raise TopologyError(f"{name}: need at least 1 server and 1 rail")
    _check_size(b, name, count, server, 1)  # the switches: rails <= a server's NICs, checked below
    servers = [build(b, f"n{s}.", f"node{s}") for s in range(count)]
    if rails > max(1, len(servers[0])):  # a rail switch no NIC plugs into would be disconnected
        raise TopologyError(
            f"{name}: {rails} rails but a {server} server has {len(servers[0])} NICs, one per rail; "
            f"use at most -rails{len(servers[0])}"
        )
    switches = [b.device("netswitch" if rails == 1 else f"railswitch{r}", "switch", "network") for r in range(rails)]
    for nics in servers:
        for i, nic in enumerate(nics):
            b.link(nic, switches[i % rails], NETWORK_KINDS[network])
    return b.build(name, gpu_forwarding=pxn)


@contextmanager
def no_collection() -> Iterator[None]:
    """The cyclic garbage collector paused while a cluster's millions of devices and links are
    made (none is in a cycle; each collection would rescan them all): half the time at 20,000 servers."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


ENTRY_BYTES = 600  # peak bytes per device or link while a cluster is built and validated (measured: ~520)


def _check_size(b: Builder, name: str, servers: int, server: str, network: int) -> None:
    """Refuse a cluster of ``servers`` servers whose devices and links (one server's, each NIC's
    link to the network, and ``network`` switches and links besides) would not fit in memory,
    before any is built."""
    probe = Builder(b.rule)
    nics = server_wiring(server)(probe, "", "probe")
    entries = servers * (len(probe.devices) + len(probe.links) + len(nics)) + network
    check_room(
        f"{name} ({servers:,} servers, {entries:,} devices and links)",
        entries * ENTRY_BYTES,
        TopologyError,
        "use fewer servers (a smaller N or k)",
    )


def fat_tree(b: Builder, name: str) -> Topology:
    """A k-ary fat-tree (Al-Fares et al.): k pods of k/2 edge and k/2 aggregation switches,
    (k/2)^2 core switches, k/2 servers per edge switch, so k^3/4 servers in all (options: module
    docstring)."""
    options = fat_tree_options(name)
    usage = (
        f"{name}: expected fattree:k=K[,server=PRESET][,link=ib|eth][,rail=0|1][,bisection=edge|full]"
        "[,nics=N][,latency=US]"
    )
    unknown = set(options) - {"k", "server", "link", "rail", "bisection", "nics", "latency"}
    if unknown or "k" not in options:
        raise TopologyError(usage)
    try:
        k = int(options["k"])
    except ValueError:
        raise TopologyError(f"{name}: k must be an even integer >= 2") from None
    if k < 2 or k % 2:
        raise TopologyError(f"{name}: k must be an even integer >= 2, got {k}")
    build, network = server_wiring(options.get("server", "dgx1-v100")), options.get("link", "ib")
    if network not in NETWORK_KINDS:
        raise TopologyError(f"{name}: link must be ib or eth, got {network!r}")
    rail, bisection = options.get("rail", "0"), options.get("bisection", "edge")
    if rail not in ("0", "1") or bisection not in ("edge", "full"):
        raise TopologyError(usage)
    nics_wanted, latency = _positive(options, "nics", int, name), _positive(options, "latency", float, name)
    kind, half = NETWORK_KINDS[network], k // 2
    _check_size(b, name, k**3 // 4, options.get("server", "dgx1-v100"), 5 * k * k // 4 + k**3 // 2)
    servers = 0
    nics_per_server = 1
    edges_by_pod = []
    for pod in range(k):
        edges = [f"edge{pod}.{e}" for e in range(half)]
        edges_by_pod.append(edges)
        for e in range(half * half):
            nics = _wired_nics(build(b, f"s{servers}.", f"server{servers}"), nics_wanted, name)
            nics_per_server = len(nics)
            for i, nic in enumerate(nics):
                b.link(nic, edges[i % half] if rail == "1" else edges[e // half], kind)
            servers += 1
    up = make_link("x", "y", kind, 1, b.speeds)
    if latency is not None:
        up = replace(up, latency_us=latency)
        b.links = [replace(link, latency_us=latency) if link.kind == kind else link for link in b.links]
    width = nics_per_server if bisection == "full" else 1
    for pod, edges in enumerate(edges_by_pod):
        for edge in edges:
            b.device(edge, "switch", "network")
        for a in range(half):
            agg = b.device(f"agg{pod}.{a}", "switch", "network")
            for edge in edges:
                b.links.append(replace(up, a=edge, b=agg, count=width, bandwidth_gbps=up.bandwidth_gbps * width))
            for c in range(half):
                core = f"core{a * half + c}"
                if pod == 0:
                    b.device(core, "switch", "network")
                b.links.append(replace(up, a=agg, b=core, count=width, bandwidth_gbps=up.bandwidth_gbps * width))
    return b.build(name)


def fat_tree_options(name: str) -> dict[str, str]:
    """A ``fattree:k=K,...`` name's options by key."""
    return dict(item.split("=", 1) for item in name.split(":", 1)[1].split(",") if "=" in item)


def _positive(options: dict[str, str], key: str, kind: type, name: str):
    """Option ``key`` as a number > 0, or None when absent."""
    if key not in options:
        return None
    try:
        value = kind(options[key])
    except ValueError:
        value = 0
    if not value > 0:
        raise TopologyError(f"{name}: {key} must be a number > 0, got {options[key]!r}")
    return value


def _wired_nics(nics: list[str], wanted: int | None, name: str) -> list[str]:
    """The ``wanted`` NICs of a server that get a network link, evenly spread over its NICs (all
    when None); the others stay unplugged, so the server's traffic shares the wired ones."""
    if wanted is None:
        return nics
    if len(nics) % wanted:
        raise TopologyError(f"{name}: nics={wanted} must divide the server's {len(nics)} NICs")
    return nics[:: len(nics) // wanted]
