"""The all-reduce planners' view of a machine: the workers, the candidate tree edges between them
and the links each uses (``CostGraph``), and the tree helpers they share."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commgraph.errors import PlanError
from commgraph.topology import Topology


class CostGraph:
    """The GPUs, the candidate tree edges between them, and the physical links each one uses."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.workers = [d.id for d in topology.workers]
        if len(self.workers) < 2:
            raise PlanError(f"topology {topology.name!r} has {len(self.workers)} worker device(s); all-reduce needs 2")
        index = {w: i for i, w in enumerate(self.workers)}
        direct = [(k, index[l.a], index[l.b]) for k, l in enumerate(topology.links)
                  if l.a in index and l.b in index]
        pairs = [(a, b) for _, a, b in direct]
        self.direct = len(min_spanning_tree(len(self.workers), pairs, np.zeros(len(pairs)))) == len(self.workers) - 1
        if self.direct:
            self.pairs = [(a, b) for _, a, b in direct]
            uses = [[k] for k, _, _ in direct]
            self.paths = [(self.workers[a], self.workers[b]) for a, b in self.pairs]
        else:
            self.pairs = [(a, b) for a in range(len(self.workers)) for b in range(a + 1, len(self.workers))]
            hops = [topology.route(self.workers[a], self.workers[b]) for a, b in self.pairs]
            uses = [[h.link for h in route] for route in hops]
            self.paths = [(route[0].src, *(h.dst for h in route)) for route in hops]
        self.links = sorted({k for u in uses for k in u})
        column = {k: i for i, k in enumerate(self.links)}
        self.usage = np.zeros((len(self.pairs), len(self.links)))  # times each pair's path crosses a link
        for p, u in enumerate(uses):
            for k in u:
                self.usage[p, column[k]] += 1
        chosen = [topology.links[k] for k in self.links]
        if all(l.kind == "nvlink" for l in chosen):
            self.cost = np.array([1.0 / l.count for l in chosen])
        else:
            unit = min(l.bandwidth_gbps / l.count for l in chosen)
            self.cost = np.array([unit / l.bandwidth_gbps for l in chosen])
        self.unit_gbps = min(topology.links[k].bandwidth_gbps * c for k, c in zip(self.links, self.cost))

    @property
    def n(self) -> int:
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
