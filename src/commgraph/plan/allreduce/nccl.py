"""NCCL's algorithms and the parameter server as all-reduce schedules: ``ring``/``ring1``,
``tree``/``tree1`` and ``ps`` (the package's description), and the routing of their hops over the
topology's routes."""

from __future__ import annotations

import numpy as np

from commgraph.plan.allreduce.graph import CostGraph
from commgraph.plan.allreduce.schedule import AllReduceSchedule, Ring, Route, Tree
from commgraph.plan.packing import RouteGraph, route_demands


def nccl_rings(graph: CostGraph, channels: bool = False) -> AllReduceSchedule:
    """``ring1``'s one ring; with ``channels``, on an NVLink mesh its link-disjoint Hamiltonian
    cycles both ways, and on servers of equally many workers one ring per GPU position: ring c
    visits every server's workers from its c-th on (module docstring)."""
    order = [graph.workers[i] for i in _ring_order(graph)]
    hosts = _hosts(graph)
    cycles = _disjoint_cycles(graph) if channels and graph.direct else []
    if len(cycles) > 1:  # NCCL's rings on an NVLink mesh: link-disjoint cycles, each both ways
        rings = [tuple(graph.workers[i] for i in c) for cycle in cycles for c in (cycle, cycle[:1] + cycle[:0:-1])]
        return AllReduceSchedule("ring", tuple(graph.workers), rings=tuple(Ring(1.0 / len(rings), r) for r in rings))
    if not channels or len(hosts) < 2 or len({len(h) for h in hosts}) != 1:
        name = "ring" if channels else "ring1"
        return AllReduceSchedule(name, tuple(graph.workers), rings=(Ring(1.0, tuple(order)),))
    size = len(hosts[0])
    rings = tuple(Ring(1.0 / size, tuple(w for h in hosts for w in h[c:] + h[:c])) for c in range(size))
    return AllReduceSchedule("ring", tuple(graph.workers), rings=rings)


def _hosts(graph: CostGraph) -> list[list[str]]:
    """The workers of each host, hosts in order of their first worker."""
    by_host: dict[str, list[str]] = {}
    for w in graph.workers:
        by_host.setdefault(graph.topology.device(w).host, []).append(w)
    return list(by_host.values())


def double_binary_trees(graph: CostGraph) -> AllReduceSchedule:
    """Two binary trees in heap order over the workers, the second over the order shifted by n/2,
    half the data each (NCCL's double binary tree, without its leaf/inner-node swap)."""
    n, trees = graph.n, []
    for shift in (0, 1):
        order = [graph.workers[(i + shift * (n // 2)) % n] for i in range(n)]
        edges = tuple((order[i], order[(i - 1) // 2]) for i in range(1, n))
        trees.append(Tree(0.5, order[0], edges))
    return AllReduceSchedule("tree1", tuple(graph.workers), trees=tuple(trees))


def nccl_trees(graph: CostGraph) -> AllReduceSchedule:
    """NCCL's trees across servers of equally many workers: per channel c (one per GPU position)
    and per tree of the double binary tree over the servers, a chain through every server's
    workers from its c-th on, the chains' heads joined by that binary tree; 1/(2 x channels) of the
    data each. On one server (or unequal ones), ``tree1``'s double binary tree over the workers."""
    hosts = _hosts(graph)
    if len(hosts) < 2 or len({len(h) for h in hosts}) != 1:
        return double_binary_trees(graph)
    size, count, trees = len(hosts[0]), len(hosts), []
    for c in range(size):
        for shift in (0, 1):
            order = [hosts[(k + shift * (count // 2)) % count] for k in range(count)]
            chains = [h[c:] + h[:c] for h in order]
            edges = [(chain[i], chain[i - 1]) for chain in chains for i in range(1, size)]
            edges += [(chains[k][0], chains[(k - 1) // 2][0]) for k in range(1, count)]
            trees.append(Tree(1.0 / (2 * size), chains[0][0], tuple(edges)))
    return AllReduceSchedule("tree", tuple(graph.workers), trees=tuple(trees))


def sharded_servers(graph: CostGraph) -> AllReduceSchedule:
    """The parameter server as trees: worker b serves 1/n of the data, a star rooted at b that
    every other worker sends its share to and receives the sum from."""
    workers = graph.workers
    trees = tuple(Tree(1.0 / len(workers), b, tuple((a, b) for a in workers if a != b)) for b in workers)
    return AllReduceSchedule("ps", tuple(workers), trees=trees)


def routed(graph: CostGraph, schedule: AllReduceSchedule) -> AllReduceSchedule:
    """``schedule`` (single-route rings or trees) with every hop split over the topology's routes by
    the min-max routing LP (:func:`commgraph.plan.packing.route_demands`)."""
    index = {w: i for i, w in enumerate(graph.workers)}
    n = graph.n
    demand: dict[tuple[int, int], float] = {}  # (sender, receiver) -> share of the data it carries
    for ring in schedule.rings:
        for a, b in zip(ring.order, ring.order[1:] + ring.order[:1]):
            key = (index[a], index[b])
            demand[key] = demand.get(key, 0.0) + 2 * (n - 1) / n * ring.weight
    for tree in schedule.trees:
        for child, parent in tree.edges:
            key = tuple(sorted((index[child], index[parent])))
            demand[key] = demand.get(key, 0.0) + tree.weight
    hops, both_ways = sorted(demand), bool(schedule.trees)
    topology, workers = graph.topology, graph.workers
    direct = [k for k, l in enumerate(topology.links) if l.a in index and l.b in index]
    if graph.direct and all(topology.links_between(workers[a], workers[b]) for a, b in hops):
        routes = RouteGraph(topology, workers, direct)  # NCCL's NVLink rings: the GPUs' own links only
    else:
        routes = RouteGraph(topology, workers)
    routing = route_demands(routes, [(a, b, demand[a, b]) for a, b in hops], both_ways)
    split = dict(zip(hops, routing.split))

    def routes_of(a: str, b: str) -> tuple[Route, ...]:
        hop = (index[a], index[b])
        flip = hop not in split
        shares = split[hop[::-1] if flip else hop]
        return tuple(Route(share, routes.devices(path[::-1] if flip else path)) for path, share in shares.items())

    rings = tuple(
        Ring(r.weight, r.order, tuple(routes_of(a, b) for a, b in zip(r.order, r.order[1:] + r.order[:1])))
        for r in schedule.rings
    )
    trees = tuple(Tree(t.weight, t.root, t.edges, tuple(routes_of(c, p) for c, p in t.edges)) for t in schedule.trees)
    return AllReduceSchedule(
        schedule.planner[:-1] if schedule.planner.endswith("1") else schedule.planner, schedule.devices, rings, trees
    )


def _ring_order(graph: CostGraph) -> list[int]:
    """A Hamiltonian cycle over direct links with the widest narrowest link, if one exists (small n:
    depth-first search); otherwise the workers in order."""
    n = graph.n
    if not graph.direct or n > 16:
        return list(range(n))
    width = np.zeros((n, n))
    for p, (a, b) in enumerate(graph.pairs):
        width[a, b] = width[b, a] = max(width[a, b], 1.0 / graph.cost[graph.usage[p].argmax()])
    best: tuple[float, list[int]] = (0.0, list(range(n)))

    def search(path: list[int], narrowest: float) -> None:
        nonlocal best
        if narrowest <= best[0]:
            return
        if len(path) == n:
            closing = width[path[-1], path[0]]
            if closing > 0 and min(narrowest, closing) > best[0]:
                best = (min(narrowest, closing), list(path))
            return
        for nxt in range(n):
            if nxt not in path and width[path[-1], nxt] > 0:
                search(path + [nxt], min(narrowest, width[path[-1], nxt]))

    search([0], np.inf)
    return best[1]


def _disjoint_cycles(graph: CostGraph, budget: int = 200_000) -> list[list[int]]:
    """As many Hamiltonian cycles over the direct links as the links' counts allow, each link used
    by at most ``count`` of them (NVLink rings that share no NVLink: three on a DGX-1), by
    depth-first search with backtracking over the cycles found (at most ``budget`` steps); none
    beyond 16 workers."""
    n = graph.n
    if n > 16 or n < 3:
        return []
    capacity = np.zeros((n, n), dtype=int)
    for p, (a, b) in enumerate(graph.pairs):
        count = graph.topology.links[graph.links[int(graph.usage[p].argmax())]].count
        capacity[a, b] = capacity[b, a] = capacity[a, b] + count
    steps, best = 0, []

    def cycles(found: list[list[int]]) -> None:
        nonlocal best, steps
        if len(found) > len(best):
            best = [list(c) for c in found]
        path, seen = [0], {0}

        def extend() -> bool:
            nonlocal steps
            steps += 1
            if steps > budget:
                return True
            if len(path) == n:
                if capacity[path[-1], 0] > 0:
                    hops = list(zip(path, path[1:] + path[:1]))
                    for a, b in hops:
                        capacity[a, b] -= 1
                        capacity[b, a] -= 1
                    cycles(found + [list(path)])
                    for a, b in hops:
                        capacity[a, b] += 1
                        capacity[b, a] += 1
                return steps > budget
            for nxt in range(n):
                if nxt not in seen and capacity[path[-1], nxt] > 0:
                    path.append(nxt)
                    seen.add(nxt)
                    if extend():
                        return True
                    path.pop()
                    seen.discard(nxt)
            return False

        extend()

    cycles([])
    return best
