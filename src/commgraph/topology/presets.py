"""Real machines, wired as they are built, and clusters made of them.

Server wirings, their speeds and sources: :mod:`commgraph.topology.servers`; clusters of them:
:mod:`commgraph.topology.clusters`.

``dgx-a100``, ``hgx-h100`` and ``hgx-h20`` have speeds of their own (``SERVER_SPEEDS``, sources in
:mod:`commgraph.topology.servers`). One rule sets every preset's speeds, a single server or a cluster of them
(:func:`preset_speeds`): DGCL's defaults, under the server preset's own, under a named cluster's
stated figures (:data:`NAMED`), under the user's ``speeds``. So every server of ``2xhgx-h100-ib``
or ``fattree:k=8,server=hgx-h100`` keeps the H100 server's NIC, PCIe and NVSwitch speeds unless
``speeds`` overrides them.

Names: ``dgx1-v100``, ``p3.8xlarge``, ``p3.16xlarge``, ``p2.16xlarge``, ``pcie-8gpu-qpi``, ``dgx-a100``,
``hgx-h100``, ``hgx-h20``, ``leo-fnic``, ``localhost-cpu:N``, ``NxPRESET-ib`` / ``NxPRESET-eth`` (N
servers on one network switch), ``NxPRESET-ib-railsR`` (rail-split: R network switches, NIC i of every
server on switch i mod R, so even NICs on one switch and odd on another for R = 2), either with a
``-pxn`` suffix (GPUs forward, as NCCL's PXN does: ``Topology.gpu_forwarding``) and
``fattree:k=K,server=PRESET,link=ib|eth,rail=0|1,bisection=edge|full`` (k-ary fat-tree of K^3/4
servers). ``rail=1`` wires it rail-optimised: NIC i of every server in a pod plugs into edge switch
i mod K/2 of that pod, so same-rail traffic of a pod crosses one switch. ``nics=N`` wires only N of
a server's NICs (evenly spread; N divides its NICs), so the server's GPUs share N network links;
``latency=US`` sets the network links' latency. ``bisection=full`` gives every edge-aggregation and
aggregation-core link as many NIC speeds as a server has NICs, so the fabric carries all NICs at line
rate (the default, ``edge``, gives each of those links one NIC speed).

Where each named cluster comes from (each server preset: :mod:`commgraph.topology.servers`; the
fat-tree: :mod:`commgraph.topology.clusters`):

- ``hermod-thesis`` (thesis-dgs-g3-hermod-leo, section 5.5): "By default, we simulate a 128-server
  cluster, with each server hosting eight GPUs, connected via a full-bisection fat-tree network
  with 100Gbps links and a 1 us link propagation delay": ``fattree:k=8,server=hgx-h100,nics=1,
  latency=1,bisection=full`` with every network link at 12.5 GB/s (:data:`NAMED`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from commgraph.errors import TopologyError
from commgraph.topology.clusters import NETWORK_KINDS, cluster, fat_tree, fat_tree_options, no_collection
from commgraph.topology.model import Topology
from commgraph.topology.servers import (
    DEFAULT_SPEEDS,
    DEFAULTS_SOURCE,
    DGX1_NV1,
    DGX1_NV2,
    LATENCY_US,
    OVERRIDE_SOURCE,
    SERVER_SPEEDS,
    SERVERS,
    Builder,
    PresetSpeeds,
    localhost,
    make_link,
)

__all__ = [
    "DEFAULT_SPEEDS",
    "DEFAULTS_SOURCE",
    "DGX1_NV1",
    "DGX1_NV2",
    "LATENCY_US",
    "NAMED",
    "OVERRIDE_SOURCE",
    "SERVER_SPEEDS",
    "SERVERS",
    "NamedCluster",
    "PresetSpeeds",
    "join_hosts",
    "load_preset",
    "make_link",
    "preset_names",
    "preset_speeds",
]


@dataclass(frozen=True)
class NamedCluster:
    """A cluster a paper states: the preset ``spec`` that wires it and the ``speeds`` (GB/s, by
    key of :data:`DEFAULT_SPEEDS`) it states, over the servers' own; ``source`` names the statement."""

    spec: str
    speeds: dict[str, float]
    source: str


# Hermod's simulated cluster (thesis-dgs-g3-hermod-leo, section 5.5, "Simulation setup"): "By
# default, we simulate a 128-server cluster, with each server hosting eight GPUs, connected via a
# full-bisection fat-tree network with 100Gbps links and a 1 us link propagation delay." So a k = 8
# fat-tree (128 servers) of 8-GPU Hopper servers (the thesis's measured platform, section 5.2), one
# network link per server, every network link 100 Gbit/s = 12.5 GB/s and 1 us; the servers keep
# hgx-h100's NVSwitch and PCIe speeds, which the thesis does not state.
NAMED = {
    "hermod-thesis": NamedCluster(
        "fattree:k=8,server=hgx-h100,nics=1,latency=1,bisection=full",
        {"ib": 12.5},
        "hermod-thesis: the thesis's 100Gbps links",
    )
}
_CLUSTER = re.compile(r"(\d+)x(.+?)(?:-(ib|eth))?(?:-rails(\d+))?(-pxn)?")


def preset_names() -> list[str]:
    """The preset names and name patterns :func:`load_preset` takes."""
    return [
        *SERVERS,
        *NAMED,
        "localhost-cpu:N",
        "NxPRESET-ib|eth[-railsR][-pxn]",
        "fattree:k=K,server=PRESET,link=ib|eth,rail=0|1,bisection=edge|full",
    ]


def load_preset(name: str, speeds: dict[str, float] | None = None) -> Topology:
    """Build the topology a preset name describes (names, wirings and their sources: the module
    docstring).

    Args:
        name: a server (``dgx1-v100``, ``p3.8xlarge``, ``p3.16xlarge``, ``p2.16xlarge``,
            ``pcie-8gpu-qpi``, ``dgx-a100``, ``hgx-h100``, ``hgx-h20``, ``leo-fnic``), a named cluster
            (:data:`NAMED`), ``localhost-cpu:N`` (N CPU worker processes on one machine, sharing
            memory), ``NxSERVER-ib`` / ``NxSERVER-eth`` (N servers
            on one non-blocking switch) or ``fattree:k=K,...``.
        speeds: GB/s overrides by key of :data:`DEFAULT_SPEEDS` (``{"pcie": 24}``).

    Returns:
        Topology: validated.

    Raises:
        TopologyError: an unknown name or speed key, or bad options.
    """
    if name in NAMED:
        named = NAMED[name]
        return replace(load_preset(named.spec, {**named.speeds, **(speeds or {})}), name=name)
    b = Builder(preset_speeds(name, speeds))
    if name in SERVERS:
        SERVERS[name](b, "", "node0")
        return b.build(name)
    if match := re.fullmatch(r"localhost-cpu:(\d+)", name):
        return localhost(b, int(match.group(1)), name)
    if match := _CLUSTER.fullmatch(name):
        with no_collection():
            return cluster(
                b,
                int(match.group(1)),
                match.group(2),
                match.group(3) or "ib",
                name,
                int(match.group(4) or 1),
                pxn=bool(match.group(5)),
            )
    if name.startswith("fattree:"):
        with no_collection():
            return fat_tree(b, name)
    raise TopologyError(f"unknown topology {name!r}; presets: {', '.join(preset_names())}")


def preset_speeds(name: str, speeds: dict[str, float] | None = None) -> PresetSpeeds:
    """The link speeds preset ``name`` is built with, and where each comes from: one rule for a
    single server and every cluster of servers (``NxSERVER-ib``, ``fattree:...,server=SERVER``):
    DGCL's defaults, under the server preset's own (:data:`SERVER_SPEEDS`), under a named
    cluster's stated figures (:data:`NAMED`), under the user's ``speeds``.

    Args:
        name: a preset name (:func:`load_preset`).
        speeds: the user's GB/s overrides by key of :data:`DEFAULT_SPEEDS`.

    Raises:
        TopologyError: an unknown speed key.
    """
    speeds = speeds or {}
    unknown = set(speeds) - DEFAULT_SPEEDS.keys()
    if unknown:
        raise TopologyError(f"unknown speed key(s) {sorted(unknown)}; use {sorted(DEFAULT_SPEEDS)}")
    named = NAMED.get(name)
    server = _server_of(named.spec if named else name)
    layers = (
        (DEFAULT_SPEEDS, DEFAULTS_SOURCE),
        (SERVER_SPEEDS.get(server, {}), f"{server}'s preset"),
        (named.speeds if named else {}, named.source if named else ""),
        (speeds, OVERRIDE_SOURCE),
    )
    values, sources = {}, {}
    for layer, source in layers:
        values.update(layer)
        sources.update(dict.fromkeys(layer, source))
    return PresetSpeeds(values, sources, {**(named.speeds if named else {}), **speeds})


def _server_of(name: str) -> str | None:
    """The server preset a preset name is made of (a fat-tree's default: ``dgx1-v100``), or None."""
    if name in SERVERS:
        return name
    if match := _CLUSTER.fullmatch(name):
        return match.group(2)
    if name.startswith("fattree:"):
        return fat_tree_options(name).get("server", "dgx1-v100")
    return None


def join_hosts(hosts: list[tuple[str, Topology]], network: str = "eth") -> Topology:
    """Several machines' topologies as one cluster, as a job across machines sees it: each host's
    devices renamed ``<host>/<id>`` on that host, and every host's NICs (or, without NICs, the
    hub or CPUs its workers share) plugged into one non-blocking ``network`` switch."""
    if network not in NETWORK_KINDS:
        raise TopologyError(f"network must be ib or eth, got {network!r}")
    if len({name for name, _ in hosts}) != len(hosts):
        raise TopologyError("join_hosts: a host is listed twice")
    b = Builder(preset_speeds(""))  # no server preset: DGCL's defaults
    switch = b.device("netswitch", "switch", "network")
    for name, topology in hosts:
        rename = {d.id: f"{name}/{d.id}" for d in topology.devices}
        b.devices += [replace(d, id=rename[d.id], host=name) for d in topology.devices]
        b.links += [replace(link, a=rename[link.a], b=rename[link.b]) for link in topology.links]
        nics = [d.id for d in topology.devices if d.kind == "nic"]
        hubs = [d.id for d in topology.devices if d.kind == "switch"] or [
            d.id for d in topology.devices if d.kind == "cpu"
        ][:1]
        for device in nics or hubs:
            b.link(rename[device], switch, NETWORK_KINDS[network])
    return b.build("+".join(name for name, _ in hosts))
