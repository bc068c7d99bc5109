"""The all-reduce planners' view of a machine: the workers, the candidate tree edges between them
and the links each uses (``CostGraph``), and the tree helpers they share."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from commgraph.errors import PlanError
from commgraph.topology import Topology


class CostGraph:
    """The GPUs, the candidate tree edges between them (``pairs``), the path each takes (``paths``)
    and the physical links each crosses (``usage``, over ``links``), and every link's cost ``cost``
    (``docs/planning.md``, "All-reduce"). On a direct-link machine the candidates
    are the GPUs' direct links and ``links`` the links they use; otherwise the candidates are every
    two GPUs on the topology's route (made on first use: a cluster has many), and ``links`` are all
    links of the machine (the fastest between any two devices, as routes take)."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.workers = [d.id for d in topology.workers]
        if len(self.workers) < 2:
            raise PlanError(f"topology {topology.name!r} has {len(self.workers)} worker device(s); all-reduce needs 2")
        index = {w: i for i, w in enumerate(self.workers)}
        direct = [(k, index[l.a], index[l.b]) for k, l in enumerate(topology.links) if l.a in index and l.b in index]
        pairs = [(a, b) for _, a, b in direct]
        self.direct = len(min_spanning_tree(len(self.workers), pairs, np.zeros(len(pairs)))) == len(self.workers) - 1
        if self.direct:
            self.links = sorted({k for k, _, _ in direct})
        else:
            fastest: dict[tuple[str, str], int] = {}
            for k, link in enumerate(topology.links):
                pair = tuple(sorted((link.a, link.b)))
                if pair not in fastest or link.bandwidth_gbps > topology.links[fastest[pair]].bandwidth_gbps:
                    fastest[pair] = k
            self.links = sorted(fastest.values())
        chosen = [topology.links[k] for k in self.links]
        if all(l.kind == "nvlink" for l in chosen):
            self.cost = np.array([1.0 / l.count for l in chosen])
        else:
            unit = min(l.bandwidth_gbps / l.count for l in chosen)
            self.cost = np.array([unit / l.bandwidth_gbps for l in chosen])
        self.unit_gbps = min(topology.links[k].bandwidth_gbps * c for k, c in zip(self.links, self.cost))

    @cached_property
    def _candidates(self) -> tuple[list[tuple[int, int]], list[tuple[str, ...]], list[list[int]]]:
        """(pairs, their paths, the links each path crosses)."""
        topology, workers = self.topology, self.workers
        if self.direct:
            index = {w: i for i, w in enumerate(workers)}
            direct = [
                (k, index[l.a], index[l.b]) for k, l in enumerate(topology.links) if l.a in index and l.b in index
            ]
            pairs = [(a, b) for _, a, b in direct]
            return pairs, [(workers[a], workers[b]) for a, b in pairs], [[k] for k, _, _ in direct]
        pairs = [(a, b) for a in range(len(workers)) for b in range(a + 1, len(workers))]
        hops = [topology.route(workers[a], workers[b]) for a, b in pairs]
        return pairs, [(route[0].src, *(h.dst for h in route)) for route in hops], [[h.link for h in r] for r in hops]

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """The candidate tree edges, as pairs of worker indices."""
        return self._candidates[0]

    @property
    def paths(self) -> list[tuple[str, ...]]:
        """The devices each candidate edge's path crosses, from one worker to the other."""
        return self._candidates[1]

    @cached_property
    def usage(self) -> np.ndarray:
        """[pairs, links]: times each pair's path crosses each link."""
        column = {k: i for i, k in enumerate(self.links)}
        usage = np.zeros((len(self.pairs), len(self.links)))
        for p, crossed in enumerate(self._candidates[2]):
            for k in crossed:
                usage[p, column[k]] += 1
        return usage

    @property
    def n(self) -> int:
        """The number of workers."""
        return len(self.workers)

    def lower_bound(self) -> float | None:
        """Lemma 2.1: (n - 1) / sum_e 1/c_e. It holds when GPUs aggregate on every edge (direct
        links); through switches a tree edge may cross several links, so there is none (None)."""
        return (self.n - 1) / float(np.sum(1.0 / self.cost)) if self.direct else None


def min_spanning_tree(n: int, pairs: list[tuple[int, int]], weights: np.ndarray) -> list[int]:
    """Kruskal over the candidate pairs; returns the chosen pair indices."""
    parent = list(range(n))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    tree = []
    for p in np.lexsort((np.arange(len(pairs)), weights)):
        a, b = pairs[p]
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[ra] = rb
            tree.append(int(p))
    return tree


@dataclass(frozen=True)
class _Search:
    parent: list[int]  # the start's is -1
    order: list[int]  # breadth-first: the last is a node farthest from the start


def tree_search(n: int, edges: list[tuple[int, int]], start: int) -> _Search:
    """Breadth-first search of a tree given by its edges over node ids 0..n-1."""
    neighbours: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        neighbours[a].append(b)
        neighbours[b].append(a)
    parent, order = [-2] * n, [start]
    parent[start] = -1
    for node in order:
        for nxt in neighbours[node]:
            if parent[nxt] == -2:
                parent[nxt] = node
                order.append(nxt)
    return _Search(parent, order)


def tree_centre(n: int, edges: list[tuple[int, int]]) -> int:
    """A centre of a tree: the middle of a longest path, found by two breadth-first searches (the
    node farthest from any node ends a longest path)."""
    search = tree_search(n, edges, tree_search(n, edges, 0).order[-1])
    path = [search.order[-1]]
    while search.parent[path[-1]] != -1:
        path.append(search.parent[path[-1]])
    return path[len(path) // 2]
