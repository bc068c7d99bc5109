"""Routes through a topology: the path a transfer takes, and how a flow spreads over equal-cost paths.

A route is the direct link between two devices if there is one (the fastest, if several), else the
cheapest path (sum of seconds per GB) whose intermediate devices all forward (switches, CPUs, NICs;
GPUs only with ``gpu_forwarding``). Where several cheapest paths tie (a fat-tree's many paths
through its core), the fabric's ``routing`` decides what a flow uses: ``ecmp`` (per-flow hashing:
each (src, dst) pair takes one of them by a stable hash, so two flows may collide on one link while
another idles) or ``spray`` (packet spraying: a flow's bytes split evenly over every equal-cost
path, so a link carries the share of the flow's paths that cross it; :meth:`Routes.spread`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.sparse import csr_matrix

from commgraph.errors import TopologyError
from commgraph.topology.distances import Distances


@dataclass(frozen=True)
class Hop:
    """One directed step of a route: link ``link`` (an index into ``Topology.links``), traversed
    from ``src`` to ``dst``. ``resource`` numbers (link, direction) pairs: 2 * link + direction."""

    link: int
    src: str
    dst: str
    forward: bool

    @property
    def resource(self) -> int:
        """The (link, direction) resource the hop occupies: ``2 * link``, plus 1 against the link's
        ``a -> b`` direction."""
        return 2 * self.link + (0 if self.forward else 1)


class Routes:
    """The routing half of :class:`~commgraph.topology.Topology`: it reads the topology's
    ``devices``, ``links``, ``index``, ``gpu_forwarding``, ``routing`` and ``_route_cache``, and its
    :meth:`~commgraph.topology.Topology.forwards` and ``links_between`` lookups."""

    def route(self, src: str, dst: str) -> list[Hop]:
        """The path a transfer from ``src`` to ``dst`` takes: the direct link if there is one
        (the fastest, if several), else the cheapest path (sum of seconds per GB) whose
        intermediate devices all forward (switches, CPUs, NICs; GPUs only with ``gpu_forwarding``). Among equal-cost
        paths (a fat-tree has many) each pair picks one by a stable hash of (src, dst), as ECMP
        does, so traffic spreads over the fabric deterministically. Empty if src == dst."""
        key = (src, dst)
        if key in self._route_cache:
            return self._route_cache[key]
        start, target = self.index.get(src), self.index.get(dst)
        if start is None or target is None:
            self.device(src if start is None else dst)  # raises, naming the unknown device
        if src == dst:
            return []
        direct = self.links_between(src, dst)
        if direct:
            k = max(direct, key=lambda j: self.links[j].bandwidth_gbps)
            hops = [Hop(k, src, dst, self.links[k].a == src)]
        else:
            hops = self._cheapest_path(start, target)
        self._route_cache[key] = hops
        return hops

    def spread(self, src: str, dst: str) -> list[tuple[Hop, float]]:
        """The link directions a flow from ``src`` to ``dst`` loads and the share of its bytes each
        carries: under ``ecmp`` its one :meth:`route`, every hop carrying it all; under ``spray``
        every cheapest path, the flow split evenly over them, so a hop carries the fraction of those
        paths that cross it (a server's own links 1, each of a fat-tree's ``c`` core paths ``1/c``).
        Hops are in the order of the :meth:`route` hops first, then the other paths' links.

        Between two devices that do not forward, on different machines with one exit each (a
        server's one NIC), every cheapest path is one from the source to its exit, one between the
        exits and one from the other exit in, and the path counts multiply: the shares are those
        of the three parts, each computed once and shared by every pair that crosses it (the
        same quotients of path counts, so the same numbers)."""
        hops = self.route(src, dst)
        if self.routing == "ecmp" or len(hops) <= 1:
            return [(h, 1.0) for h in hops]
        key = ("spray", src, dst)
        if key not in self._route_cache:
            start, target = self.index[src], self.index[dst]
            exits = self._sole_exits(start, target)
            if exits is None:
                shares = self._shares(start, target)
            else:
                shares = {}
                for a, b in ((start, exits[0]), exits, (exits[1], target)):
                    part = ("shares", a, b)
                    if part not in self._route_cache:
                        self._route_cache[part] = self._shares(a, b)
                    shares.update(self._route_cache[part])
            first = {(h.link, h.src): h for h in hops}
            result = [(h, shares[(h.link, h.src)]) for h in hops]
            for (k, a), share in sorted(shares.items()):
                if (k, a) not in first:
                    link = self.links[k]
                    result.append((Hop(k, a, link.b if link.a == a else link.a, link.a == a), share))
            self._route_cache[key] = result
        return self._route_cache[key]

    def _sole_exits(self, start: int, target: int) -> tuple[int, int] | None:
        """The exits every cheapest path from ``start`` to ``target`` crosses (source's, then
        target's), when both are devices that do not forward, have no link off their machines,
        and sit on different machines with one exit each; else None."""
        distances = self._distances
        if self.devices[start].host == self.devices[target].host:
            return None
        exits = []
        for d in (start, target):
            if self.forwards(self.devices[d]) or distances.boundary[d]:
                return None
            host = distances._host(self.devices[d].host)
            if len(host.exits) != 1:
                return None
            exits.append(host.exits[0][0])
        return exits[0], exits[1]

    def _shares(self, start: int, target: int) -> dict[tuple[int, str], float]:
        """Per link direction ``(link, tail device)`` on some cheapest path from ``start`` to
        ``target``, the fraction of those paths crossing it: paths into its tail times paths out
        of its head, over all paths."""
        graph, arriving, out_node = self._routing_graph
        dist = self._distances(out_node[start], target)
        n = len(self.devices)
        edges: dict[int, list[tuple[int, int]]] = {}  # node -> (predecessor, link) on cheapest paths
        order, stack, seen = [], [target], {target}
        while stack:  # every node on a cheapest path, found backwards from the target
            node = stack.pop()
            order.append(node)
            if node == out_node[start]:
                continue
            edges[node] = [(u, k) for u, k, w in arriving[node] if abs(dist[u] + w - dist[node]) <= 1e-9 * dist[node]]
            for u, _ in edges[node]:
                if u not in seen:
                    seen.add(u)
                    stack.append(u)
        order.sort(key=lambda v: dist[v])
        into = {out_node[start]: 1.0}  # cheapest paths from the start to a node
        for node in order:
            if node in edges:
                into[node] = sum(into[u] for u, _ in edges[node])
        out = {target: 1.0}  # cheapest paths from a node to the target
        for node in reversed(order):
            for u, _ in edges.get(node, ()):
                out[u] = out.get(u, 0.0) + out[node]
        total = into[target]
        shares: dict[tuple[int, str], float] = {}
        for node, options in edges.items():
            for u, k in options:
                a = self.devices[u % n].id
                shares[(k, a)] = shares.get((k, a), 0.0) + into[u] * out[node] / total
        return shares

    @cached_property
    def _routing_graph(self):
        """Directed graph in which paths cannot pass through non-forwarding devices: such a
        device d is split into an in-node d (edges only arrive) and an out-node n + d (edges only
        leave). Returns (CSR of link weights in seconds per GB, per in-node the list of
        (out-node, link, weight) arriving there)."""
        n = len(self.devices)
        out_node = [i if self.forwards(d) else n + i for i, d in enumerate(self.devices)]
        best: dict[tuple[int, int], tuple[float, int]] = {}
        for k, link in enumerate(self.links):
            a, b, w = self.index[link.a], self.index[link.b], 1.0 / link.bandwidth_gbps
            for u, v in ((out_node[a], b), (out_node[b], a)):
                if (u, v) not in best or w < best[(u, v)][0]:
                    best[(u, v)] = (w, k)
        arriving: list[list[tuple[int, int, float]]] = [[] for _ in range(n)]
        for (u, v), (w, k) in best.items():
            arriving[v].append((u, k, w))
        rows, cols = zip(*best) if best else ((), ())
        weights = [w for w, _ in best.values()]
        graph = csr_matrix((weights, (rows, cols)), shape=(2 * n, 2 * n))
        return graph, arriving, out_node

    @cached_property
    def _distances(self) -> Distances:
        """Cheapest-path distances from a node of :attr:`_routing_graph`, shared by a host's GPUs."""
        graph, _, out_node = self._routing_graph
        return Distances(
            graph, out_node, [d.host for d in self.devices], [[m for m, _ in near] for near in self._adjacency]
        )

    def check_routes(self, devices: list[str]) -> None:
        """Refuse, naming the first pair, ``devices`` of which some two have no route between them
        (a rail-split fabric whose GPUs may not forward, a link missing from a YAML file)."""
        for a, src in enumerate(devices):
            for dst in devices[a + 1 :]:
                self.route(src, dst)
                self.route(dst, src)

    def _cheapest_path(self, start: int, target: int) -> list[Hop]:
        graph, arriving, out_node = self._routing_graph
        source = out_node[start]
        dist = self._distances(source, target)
        if not np.isfinite(dist[target]):
            hint = "" if self.gpu_forwarding else " (GPUs do not forward here: set gpu_forwarding, as NCCL's PXN does)"
            raise TopologyError(
                f"no route from {self.devices[start].id!r} to {self.devices[target].id!r} "
                f"in topology {self.name!r}{hint}"
            )
        pair = f"{self.devices[start].id}->{self.devices[target].id}"
        n = len(self.devices)
        hops, node = [], target
        while node != source:
            options = [(u, k) for u, k, w in arriving[node] if abs(dist[u] + w - dist[node]) <= 1e-9 * dist[node]]
            u, k = options[zlib.crc32(f"{pair}@{node}".encode()) % len(options)] if len(options) > 1 else options[0]
            a = self.devices[u % n].id
            hops.append(Hop(k, a, self.devices[node].id, self.links[k].a == a))
            node = u
        hops.reverse()
        return hops
