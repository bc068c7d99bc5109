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

A route to one target needs only the distances of the nodes no farther than it: every node on a
cheapest path is nearer, and a node's distance is exact once Dijkstra settles it. So each search
stops when it settles the target asked for (:func:`dijkstra_until`) and is kept with that radius;
a later target beyond the radius searches again. Routes between neighbouring servers (a ring's
hops) then explore a few servers' nodes, not the whole cluster.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

RECENT = 64  # composed distance arrays kept (routes are cached per pair, so a source's are asked for together)


class Distances:
    """``distances(node, target)``: an array of cheapest-path distances from ``node`` of ``graph``
    (a CSR of ``2 n`` nodes: in-nodes ``0..n-1``, out-nodes ``n..2n-1``; ``out_node[d]`` is ``d``
    for a forwarding device, ``n + d`` otherwise), exact at ``target`` and at every node nearer
    than it (those on its cheapest paths); a farther node's entry is at least its distance
    (``inf`` if not reached). Without ``target``, exact everywhere. ``hosts[d]`` names device
    ``d``'s machine, ``neighbours[d]`` the devices it links to."""

    def __init__(self, graph: csr_matrix, out_node: list[int], hosts: list[str], neighbours: list[list[int]]):
        self.graph, self.out_node, self.hosts = graph, out_node, hosts
        self.n = len(hosts)
        members: dict[str, list[int]] = {}
        for d, host in enumerate(hosts):
            members.setdefault(host, []).append(d)
        self.members = members
        self.boundary = [any(hosts[m] != hosts[d] for m in neighbours[d]) for d in range(self.n)]
        self.full: dict[int, _Searched] = {}  # Dijkstra over the whole graph, per node
        self.inside: dict[str, _Host] = {}
        self.local: dict[str, np.ndarray] = {}  # per host with exits: distances among its nodes inside it
        self.recent: dict[int, _Searched] = {}

    def __call__(self, node: int, target: int | None = None) -> np.ndarray:
        device = node - self.n if node >= self.n else node
        if node >= self.n and not self.boundary[device] and self._host(self.hosts[device]).exits:
            return self._composed(device, target)
        return self._full(node, target)

    def _full(self, node: int, target: int | None) -> np.ndarray:
        """Dijkstra from ``node`` over the whole graph, as far as ``target`` (everywhere if None)."""
        known = self.full.get(node)
        if known is None or not known.covers(target):
            stop = -1 if target is None else target
            dist = dijkstra_until(self.graph.indptr, self.graph.indices, self.graph.data, node, stop)
            known = self.full[node] = _Searched(dist, np.inf if target is None else dist[target])
        return known.dist

    def _host(self, host: str) -> _Host:
        if host not in self.inside:
            devices = self.members[host]
            nodes = np.unique([*devices, *(self.out_node[d] for d in devices)])
            exits = [d for d in devices if self.boundary[d] and self.out_node[d] == d]
            position = {int(v): k for k, v in enumerate(nodes)}
            self.inside[host] = _Host(nodes, self.graph[nodes][:, nodes], position, [(b, position[b]) for b in exits])
        return self.inside[host]

    def _composed(self, device: int, target: int | None) -> np.ndarray:
        """Distances from a device that does not forward and has no link off its host: inside the
        host, or through the host's first exit and on from it (module docstring). Exact as far as
        ``target``: each exit's search reaches it, and a node nearer than the target through
        its cheapest exit is nearer than the target from that exit."""
        known = self.recent.get(device)
        if known is not None and known.covers(target):
            return known.dist
        name = self.hosts[device]
        host = self._host(name)
        if name not in self.local:
            self.local[name] = dijkstra(host.graph)
        inside = self.local[name][host.position[self.n + device]]
        dist = None
        for b, at in host.exits:
            if np.isfinite(inside[at]):
                through = inside[at] + self._full(b, target)
                dist = through if dist is None else np.minimum(dist, through, out=dist)
        if dist is None:
            dist = np.full(2 * self.n, np.inf)
        dist[host.nodes] = np.minimum(dist[host.nodes], inside)
        if len(self.recent) >= RECENT:
            del self.recent[next(iter(self.recent))]
        self.recent[device] = _Searched(dist, np.inf if target is None else dist[target])
        return dist


class _Searched(NamedTuple):
    """Distances from one node, exact at every node no farther than ``radius``."""

    dist: np.ndarray
    radius: float

    def covers(self, target: int | None) -> bool:
        """Whether the distance to ``target`` (every node's, if None) is exact."""
        return self.radius == np.inf if target is None else self.dist[target] <= self.radius


@njit(cache=True)
def dijkstra_until(indptr, indices, data, source, target):  # pragma: no cover
    """Cheapest-path distances from ``source`` over the CSR (``indptr``, ``indices``, ``data``:
    positive weights), stopping once ``target`` is settled (``-1``: never). Every settled node's
    distance is exact (the minimum over its in-neighbours of their distance plus the weight, as
    :func:`scipy.sparse.csgraph.dijkstra` computes it); an unsettled node's is an upper bound or
    ``inf``. A binary heap with lazy deletion."""
    n = indptr.shape[0] - 1
    dist = np.full(n, np.inf)
    done = np.zeros(n, np.bool_)
    heap_d = np.empty(indices.shape[0] + 1)
    heap_v = np.empty(indices.shape[0] + 1, np.int64)
    dist[source] = 0.0
    heap_d[0], heap_v[0], size = 0.0, source, 1
    while size > 0:
        d, v = heap_d[0], heap_v[0]
        size -= 1
        last_d, last_v, i = heap_d[size], heap_v[size], 0
        while True:  # sift the last entry down from the root
            child = 2 * i + 1
            if child >= size:
                break
            if child + 1 < size and heap_d[child + 1] < heap_d[child]:
                child += 1
            if heap_d[child] >= last_d:
                break
            heap_d[i], heap_v[i] = heap_d[child], heap_v[child]
            i = child
        heap_d[i], heap_v[i] = last_d, last_v
        if done[v]:
            continue
        done[v] = True
        if v == target:
            break
        for k in range(indptr[v], indptr[v + 1]):
            u = indices[k]
            nd = d + data[k]
            if nd < dist[u]:
                dist[u] = nd
                i = size  # sift the new entry up
                size += 1
                while i > 0:
                    parent = (i - 1) // 2
                    if heap_d[parent] <= nd:
                        break
                    heap_d[i], heap_v[i] = heap_d[parent], heap_v[parent]
                    i = parent
                heap_d[i], heap_v[i] = nd, u
    return dist


class _Host(NamedTuple):
    """A host's nodes (its devices' in- and out-nodes, sorted), the routing graph among them (node
    ``nodes[k]`` at ``k = position[node]``), and its exits as (device, position)."""

    nodes: np.ndarray
    graph: csr_matrix
    position: dict[int, int]
    exits: list[tuple[int, int]]
