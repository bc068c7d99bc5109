"""Cheapest-path distances over a topology's routing graph, shared by the GPUs of a machine.

Routes are cheapest paths (seconds per GB) in a directed graph in which a device that does not
forward (a GPU) is split into an in-node, where edges only arrive, and an out-node, where edges
only leave (:attr:`Topology._routing_graph`). Routing every GPU's flows needs the distances from
its out-node to every node: one Dijkstra per GPU over the whole cluster. A path from a device
that does not forward leaves its machine (host) for the first time through an *exit*, a forwarding
device of the host linked to another host (a server's NIC), so

.. math:: d_g(v) = \\min\\Big(d^{host}_g(v),\\; \\min_{b \\in exits} d^{host}_g(b) + d_b(v)\\Big)

where :math:`d^{host}_g` is the distance inside the host's own nodes and :math:`d_b` the distance
from the exit over the whole graph. The exits' distances are computed once and shared by every
device of the host: a cluster of 8-GPU servers with one NIC each runs one Dijkstra per server
instead of eight, and keeps one distance array per server.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

RECENT = 64  # composed distance arrays kept (routes are cached per pair, so a source's are asked for together)


class Distances:
    """``distances(node)``: the array of cheapest-path distances from ``node`` of ``graph`` (a CSR
    of ``2 n`` nodes: in-nodes ``0..n-1``, out-nodes ``n..2n-1``; ``out_node[d]`` is ``d`` for a
    forwarding device, ``n + d`` otherwise). ``hosts[d]`` names device ``d``'s machine,
    ``neighbours[d]`` the devices it links to."""

    def __init__(self, graph: csr_matrix, out_node: list[int], hosts: list[str], neighbours: list[list[int]]):
        self.graph, self.out_node, self.hosts = graph, out_node, hosts
        self.n = len(hosts)
        members: dict[str, list[int]] = {}
        for d, host in enumerate(hosts):
            members.setdefault(host, []).append(d)
        self.members = members
        self.boundary = [any(hosts[m] != hosts[d] for m in neighbours[d]) for d in range(self.n)]
        self.full: dict[int, np.ndarray] = {}  # Dijkstra over the whole graph, per node
        self.inside: dict[str, _Host] = {}
        self.local: dict[str, np.ndarray] = {}  # per host with exits: distances among its nodes inside it
        self.recent: dict[int, np.ndarray] = {}

    def __call__(self, node: int) -> np.ndarray:
        device = node - self.n if node >= self.n else node
        if node >= self.n and not self.boundary[device] and self._host(self.hosts[device]).exits:
            return self._composed(device)
        return self._full(node)

    def _full(self, node: int) -> np.ndarray:
        if node not in self.full:
            self.full[node] = dijkstra(self.graph, indices=node)
        return self.full[node]

    def _host(self, host: str) -> _Host:
        if host not in self.inside:
            devices = self.members[host]
            nodes = np.unique([*devices, *(self.out_node[d] for d in devices)])
            exits = [d for d in devices if self.boundary[d] and self.out_node[d] == d]
            position = {int(v): k for k, v in enumerate(nodes)}
            self.inside[host] = _Host(nodes, self.graph[nodes][:, nodes], position, [(b, position[b]) for b in exits])
        return self.inside[host]

    def _composed(self, device: int) -> np.ndarray:
        """Distances from a device that does not forward and has no link off its host: inside the
        host, or through the host's first exit and on from it (module docstring)."""
        if device in self.recent:
            return self.recent[device]
        name = self.hosts[device]
        host = self._host(name)
        if name not in self.local:
            self.local[name] = dijkstra(host.graph)
        inside = self.local[name][host.position[self.n + device]]
        dist = np.full(2 * self.n, np.inf)
        for b, at in host.exits:
            if np.isfinite(inside[at]):
                np.minimum(dist, inside[at] + self._full(b), out=dist)
        dist[host.nodes] = np.minimum(dist[host.nodes], inside)
        if len(self.recent) >= RECENT:
            del self.recent[next(iter(self.recent))]
        self.recent[device] = dist
        return dist


class _Host(NamedTuple):
    """A host's nodes (its devices' in- and out-nodes, sorted), the routing graph among them (node
    ``nodes[k]`` at ``k = position[node]``), and its exits as (device, position)."""

    nodes: np.ndarray
    graph: csr_matrix
    position: dict[int, int]
    exits: list[tuple[int, int]]
