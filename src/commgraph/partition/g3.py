"""G3's locality-aware iterative partitioning (thesis ch. 4, section 4.3.2).

Stage 1 balances computation: METIS multi-constraint k-way with two vertex weights (1 per node and
the node's degree, both balanced within ``STAGE1_IMBALANCE``), minimising the total communication
volume sum_i |V_i^remote| (METIS's volume objective counts exactly that on an undirected graph).
On large graphs METIS's volume objective costs up to 3x its edge-cut objective, so there stage 1
takes the edge-cut partition and lowers its volume itself: greedy single-node moves priced exactly
by the counters below, within ``BALANCE_LIMIT``. That reaches the same volume (within 1.5% either
way on 1M-node RMAT graphs) in about 60% of the time.

Stage 2 balances communication (Algorithm 2): repeatedly take the parts with the most and the
fewest remote nodes, V_max and V_min; swap the node of V_max with the most remote neighbours for
the node of V_min with the fewest neighbours outside V_max, until |V_min^remote| / |V_max^remote|
is within ``gamma`` of 1. Swaps keep node counts equal and are refused if they push a part's degree
sum above ``BALANCE_LIMIT`` x the mean. Within a round a swapped node is not swapped again, which
rules out cycles; a round also stops after ``patience`` swaps without a new best max |V_i^remote|,
and then rolls back to the best state seen. Rounds repeat (at most ``MAX_ROUNDS``) while they still
help: on RMAT graphs the first round often ends with the worst part's movable nodes all used.
Unlike Algorithm 2's proxies (most remote neighbours; fewest neighbours outside V_max), the pair
is chosen by the exact change of both parts' remote counts, computed from the counters: with the
proxies most swaps raised the worst part and stage 2 stalled at once.

Up to ``THOROUGH_EDGES`` stored edges (Cora, email-Enron; a start costs seconds there) g3 works
harder for a low total. The whole pipeline runs from ``STARTS`` METIS seeds and keeps the result
whose remote min/max reaches ``REMOTE_BALANCE`` with the lowest total remote (the lowest total if
none does): one start's total varies by 5-10% with the seed and with the node order alone (an
isolated node inserted in the middle of Cora's ids moves it from 1.03x to 1.12x METIS's at 8 parts),
and stage 2 adds 5-14% to what stage 1 left. Stage 2's partner is, among the nodes of every lighter
part, the one whose swap raises the total remote count the least (above the threshold: the node of
the lightest part that has one that adds the fewest remote nodes to V_max). Each start ends with a
polish: single-node moves that lower the total remote count within both load limits while every
part's remote count stays at most the largest stage 2 left and at least ``REMOTE_BALANCE`` of it (or
stage 2's smallest, if lower), so the worst part never gets worse. On Cora, 8 parts, seeds 1-3 this
takes g3 from 1.03-1.10x METIS's total remote to 0.99-1.04x, in about 3 s instead of 0.7 s.

Remote sets are tracked incrementally with in-partition degree counters (the "fast neighbour
tracking" paragraph): ``count[p, u]`` = edges from u into part p; u is remote to p while u is outside
p and ``count[p, u] > 0``. Moving a node v updates only the counters of v's neighbours: O(d_v).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit

from commgraph.graph import Graph
from commgraph.partition.mapped import release_pages
from commgraph.partition.metis import metis_multi_constraint, undirected_adjacency

STAGE1_IMBALANCE = 1.04
# Up to SMALL_GRAPH_EDGES stored edges, stage 1 is METIS's volume objective, best of several runs:
# that costs seconds at most and finds a lower volume (Cora, 8 parts: 862 -> 788). Above, it is the
# edge-cut objective and the volume refinement (on Cora that pair sends 5-10% more after stage 2).
SMALL_GRAPH_EDGES, SMALL_GRAPH_TRIES = 2_000_000, 4
# Up to THOROUGH_EDGES: STARTS starts, the best kept, the partner that raises the total least, the polish
# (a start of the 100k-node RMAT graphs, 2M stored edges, takes over a minute: one is enough there)
THOROUGH_EDGES, STARTS, REMOTE_BALANCE = 500_000, 4, 0.95
BALANCE_LIMIT = 1.05  # no part's node count or degree sum above this x the mean, whatever moves
REFINE_PASSES = 8  # on RMAT graphs the passes stop gaining after about five
GAMMA = 0.005
MAX_ROUNDS = 8
# Each step prices nodes exactly (O(degree) each) from a window that rotates through the part, until
# WORK_PER_SCAN edge visits are spent, and never moves nodes of degree above MAX_SWAP_DEGREE (hubs
# would upset the degree balance): a step stays cheap on graphs of millions of nodes.
WORK_PER_SCAN = 8_000
MAX_SWAP_DEGREE = 2048


def g3_partition(
    graph: Graph,
    parts: int,
    seed: int,
    *,
    gamma: float = GAMMA,
    max_swaps: int | None = None,
    patience: int | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[np.ndarray, dict]:
    """Stage 1 then stage 2 (from ``STARTS`` seeds up to ``THOROUGH_EDGES``, the best kept). Returns the
    assignment and what each stage of the kept start did. ``log`` hears a line as each stage starts
    and ends: on graphs of millions of nodes stage 1 alone takes a minute."""
    if parts == 1:
        return np.zeros(graph.num_nodes, dtype=np.int64), {"swaps": 0, "kept_swaps": 0}
    say = log or (lambda line: None)
    adjacency = undirected_adjacency(graph)
    weights = np.stack([np.ones(graph.num_nodes, dtype=np.int64), graph.in_degrees()], axis=1)
    release_pages(graph)  # a graph held as file maps leaves METIS its memory
    small = graph.num_edges <= SMALL_GRAPH_EDGES
    thorough = graph.num_edges <= THOROUGH_EDGES
    starts = STARTS if thorough else 1
    swap_limits = (
        max_swaps if max_swaps is not None else graph.num_nodes // 2,
        patience if patience is not None else max(200, graph.num_nodes // (10 * parts)),
    )
    best = None
    for start in range(starts):
        # METIS seeds its generator with srand(seed), and glibc's srand(0) is srand(1): 1 + ... keeps
        # every start's seed distinct
        metis_seed = seed if starts == 1 else 1 + seed * starts + start
        where = "" if starts == 1 else f" (start {start + 1} of {starts})"
        run = _one_start(
            graph,
            adjacency,
            weights,
            parts,
            metis_seed,
            small,
            thorough,
            gamma,
            swap_limits,
            lambda line: say(line.replace(":", where + ":", 1)),
        )
        if best is None or run.rank < best.rank:
            best = run
    return best.assignment, {**best.details, "starts": starts}


@dataclass
class _Start:
    """One run of the pipeline: its assignment, what its stages did, and how it ranks (lower is
    better: remote balance reached first, then the total remote count)."""

    assignment: np.ndarray
    details: dict
    rank: tuple[bool, int]


def _one_start(
    graph: Graph,
    adjacency: tuple[np.ndarray, np.ndarray],
    weights: np.ndarray,
    parts: int,
    seed: int,
    small: bool,
    thorough: bool,
    gamma: float,
    swap_limits: tuple[int, int],
    say: Callable[[str], None],
) -> _Start:
    """Stage 1 from one METIS seed (``small``: the volume objective), stage 2 and, if ``thorough``,
    the polish within the remote band."""
    say(
        "g3 stage 1: METIS k-way, nodes and degrees balanced, "
        + ("communication volume minimised" if small else "edge cut minimised, then volume-lowering moves")
    )
    start = time.perf_counter()
    assignment = metis_multi_constraint(
        adjacency, weights, parts, seed, STAGE1_IMBALANCE, volume=small, tries=SMALL_GRAPH_TRIES if small else 1
    )
    tracker = RemoteTracker(graph, assignment, parts)
    moves = 0 if small else tracker.refine(REFINE_PASSES)
    stage1 = {
        "stage1_seconds": time.perf_counter() - start,
        "stage1_total_remote": int(tracker.remote.sum()),
        "stage1_remote_min_max": float(tracker.remote.min() / max(tracker.remote.max(), 1)),
        "refine_moves": int(moves),
    }
    say(
        f"g3 stage 1: {stage1['stage1_seconds']:.1f} s, remote min/max {stage1['stage1_remote_min_max']:.3f}; "
        "stage 2: swapping nodes between the most and least loaded parts"
    )
    start = time.perf_counter()
    swaps = kept = 0
    for _ in range(MAX_ROUNDS):  # each round may swap every node once
        done, useful = tracker.rebalance(
            gamma=gamma, max_swaps=swap_limits[0], patience=swap_limits[1], thorough=thorough
        )
        swaps, kept = swaps + done, kept + useful
        remote = tracker.remote
        if useful == 0 or remote.min() >= (1 - gamma) * remote.max():
            break
    highest = int(tracker.remote.max())
    band = (min(int(tracker.remote.min()), int(np.ceil(REMOTE_BALANCE * highest))), highest)
    polished = tracker.refine(REFINE_PASSES, band=band) if thorough else 0
    seconds = time.perf_counter() - start
    remote = tracker.remote
    balance = remote.min() / max(remote.max(), 1)
    say(f"g3 stage 2: {seconds:.1f} s, {kept:,} swaps kept, remote min/max {balance:.3f}")
    details = {
        "swaps": int(swaps),
        "kept_swaps": int(kept),
        "polish_moves": int(polished),
        **stage1,
        "stage2_seconds": seconds,
    }
    return _Start(tracker.assignment.astype(np.int64), details, (balance < REMOTE_BALANCE, int(remote.sum())))


class RemoteTracker:
    """Per-part remote sets under node moves, without recounting: O(d_v) per moved node."""

    def __init__(self, graph: Graph, assignment: np.ndarray, parts: int):
        self.indptr, self.indices = graph.indptr, graph.indices
        self.degree = graph.in_degrees()
        self.assignment = np.asarray(assignment, dtype=np.int64).copy()
        self.count = _counts(self.indptr, self.indices, self.assignment, parts)
        self.remote = _remote_from_counts(self.count, self.assignment)
        self.parts = parts

    def move(self, node: int, part: int) -> None:
        _move(
            self.indptr, self.indices, self.assignment, self.count, self.remote, node, int(self.assignment[node]), part
        )

    def _loads(self) -> tuple[np.ndarray, np.ndarray]:
        """Each part's node count and degree sum, which both balance limits bound."""
        return (
            np.bincount(self.assignment, minlength=self.parts).astype(np.int64),
            np.bincount(self.assignment, weights=self.degree, minlength=self.parts).astype(np.int64),
        )

    def refine(self, passes: int, band: tuple[int, int] | None = None) -> int:
        """Lower the total remote count by single-node moves within ``BALANCE_LIMIT``, and, given a
        ``band`` (lowest, highest), keeping every part's remote count within it; returns how many
        nodes moved."""
        sizes, degree_sum = self._loads()
        node_cap = int(BALANCE_LIMIT * sizes.sum() / self.parts)
        degree_cap = int(BALANCE_LIMIT * degree_sum.sum() / self.parts)
        low, high = band if band is not None else (0, self.indptr.shape[0])
        return _refine(
            self.indptr,
            self.indices,
            self.degree,
            self.assignment,
            self.count,
            self.remote,
            sizes,
            degree_sum,
            node_cap,
            degree_cap,
            low,
            high,
            passes,
        )

    def rebalance(self, gamma: float, max_swaps: int, patience: int, thorough: bool = True) -> tuple[int, int]:
        """Stage 2's swaps (one round); ``thorough``: the partner is the node of any lighter part whose
        swap raises the total remote count the least, else the node of the lightest part that has
        one that adds the fewest remote nodes to V_max. Returns swaps made and kept."""
        order = np.argsort(self.assignment, kind="stable")
        sizes, degree_sum = self._loads()
        starts = np.concatenate([[0], np.cumsum(sizes)])
        position = np.empty_like(order)
        position[order] = np.arange(order.shape[0])
        limit = BALANCE_LIMIT * degree_sum.sum() / self.parts
        log = np.empty((max(max_swaps, 1), 2), dtype=np.int64)
        return _rebalance(
            self.indptr,
            self.indices,
            self.degree,
            self.assignment,
            self.count,
            self.remote,
            order,
            starts,
            position,
            degree_sum,
            limit,
            gamma,
            max_swaps,
            patience,
            WORK_PER_SCAN,
            MAX_SWAP_DEGREE,
            thorough,
            log,
        )


@njit(cache=True)
def _counts(indptr, indices, assignment, parts):  # pragma: no cover - compiled
    count = np.zeros((parts, assignment.shape[0]), np.int32)
    for v in range(assignment.shape[0]):
        p = assignment[v]
        for j in range(indptr[v], indptr[v + 1]):
            count[p, indices[j]] += 1
    return count


@njit(cache=True)
def _remote_from_counts(count, assignment):  # pragma: no cover - compiled
    parts, n = count.shape
    remote = np.zeros(parts, np.int64)
    for p in range(parts):
        for u in range(n):
            if count[p, u] > 0 and assignment[u] != p:
                remote[p] += 1
    return remote


@njit(cache=True)
def _move(indptr, indices, assignment, count, remote, v, a, b):  # pragma: no cover - compiled
    """Move v from part a to part b, updating counters and remote sizes of a and b only."""
    if a == b:
        return
    if count[a, v] > 0:
        remote[a] += 1  # v now sits outside a but still feeds it
    if count[b, v] > 0:
        remote[b] -= 1  # v was remote to b; now it is inside
    assignment[v] = b
    for j in range(indptr[v], indptr[v + 1]):
        u = indices[j]  # edge u -> v now lands in b instead of a
        count[a, u] -= 1
        if count[a, u] == 0 and assignment[u] != a:
            remote[a] -= 1
        count[b, u] += 1
        if count[b, u] == 1 and assignment[u] != b:
            remote[b] += 1


@njit(cache=True)
def _swap(indptr, indices, assignment, count, remote, members, position, degree_sum, degree, x, y):  # pragma: no cover
    a, b = assignment[x], assignment[y]
    _move(indptr, indices, assignment, count, remote, x, a, b)
    _move(indptr, indices, assignment, count, remote, y, b, a)
    px, py = position[x], position[y]
    members[px], members[py] = y, x
    position[x], position[y] = py, px
    degree_sum[a] += degree[y] - degree[x]
    degree_sum[b] += degree[x] - degree[y]


@njit(cache=True)
def _flips(indptr, indices, assignment, count, v, p, level):  # pragma: no cover - compiled
    """Neighbours u of v outside part p with ``count[p, u] == level``, less one if v feeds p: how
    far |V_p^remote| shrinks when v leaves p (level 1) or grows when v joins p (level 0)."""
    change = -1 if count[p, v] > 0 else 0
    for j in range(indptr[v], indptr[v + 1]):
        u = indices[j]
        if u != v and count[p, u] == level and assignment[u] != p:
            change += 1
    return change


@njit(cache=True)
def _leave_gain(indptr, indices, assignment, count, v, a):  # pragma: no cover - compiled
    """How much |V_a^remote| shrinks if v leaves part a."""
    return _flips(indptr, indices, assignment, count, v, a, 1)


@njit(cache=True)
def _join_cost(indptr, indices, assignment, count, v, b):  # pragma: no cover - compiled
    """How much |V_b^remote| grows if v joins part b."""
    return _flips(indptr, indices, assignment, count, v, b, 0)


@njit(cache=True)
def _refine(
    indptr, indices, degree, assignment, count, remote, sizes, degree_sum, node_cap, degree_cap, low, high, passes
):  # pragma: no cover - compiled
    """Each pass visits the boundary nodes in id order and moves each to the neighbouring part that
    lowers the total remote count the most, if that part stays within both caps and both parts'
    remote counts stay within ``low..high``; it stops after a pass that moves nothing. The total
    changes by exactly join cost - leave gain: only parts a and b gain or lose remote nodes when v
    moves from a to b."""
    parts = count.shape[0]
    moves = 0
    for _ in range(passes):
        before = moves
        for v in range(assignment.shape[0]):
            a = assignment[v]
            if count[a, v] == degree[v]:
                continue  # no neighbour elsewhere: a move could only add remote nodes
            leave = _leave_gain(indptr, indices, assignment, count, v, a)
            if not low <= remote[a] - leave <= high:
                continue
            best, best_change = -1, 0
            for b in range(parts):
                if b == a or count[b, v] == 0 or sizes[b] + 1 > node_cap or degree_sum[b] + degree[v] > degree_cap:
                    continue
                join = _join_cost(indptr, indices, assignment, count, v, b)
                if not low <= remote[b] + join <= high:
                    continue
                change = join - leave
                if change < best_change:
                    best, best_change = b, change
            if best >= 0:
                _move(indptr, indices, assignment, count, remote, v, a, best)
                sizes[a] -= 1
                sizes[best] += 1
                degree_sum[a] -= degree[v]
                degree_sum[best] += degree[v]
                moves += 1
        if moves == before:
            break
    return moves


@njit(cache=True)
def _partner(
    indptr,
    indices,
    degree,
    assignment,
    count,
    remote,
    members,
    starts,
    locked,
    degree_sum,
    limit,
    pmax,
    q,
    vmax,
    gain_max,
    offset,
    work,
    max_degree,
    thorough,
):  # pragma: no cover
    """Among the nodes of part q whose swap with vmax leaves both parts below V_max's current remote
    count and within the degree limit, the one whose swap raises the total remote count the least
    (``thorough``) or that adds the fewest remote nodes to V_max (the first that lowers it, if any);
    returns it (-1 if none) and what it was chosen by."""
    grow = _join_cost(indptr, indices, assignment, count, vmax, q)
    cap_max = max(limit, degree_sum[pmax])
    cap_q = max(limit, degree_sum[q])
    best, least = -1, 2 * assignment.shape[0] + 1
    size = starts[q + 1] - starts[q]
    seen = 0
    for step in range(size):
        v = members[starts[q] + (offset + step) % size]
        if locked[v] or degree[v] > max_degree:
            continue
        if degree_sum[pmax] - degree[vmax] + degree[v] > cap_max:
            continue
        if degree_sum[q] - degree[v] + degree[vmax] > cap_q:
            continue
        seen += 2 * degree[v] + 1
        if seen > work:
            break
        cost = _join_cost(indptr, indices, assignment, count, v, pmax)
        if cost >= gain_max:  # V_max would not shrink
            continue
        leave = _leave_gain(indptr, indices, assignment, count, v, q)
        if remote[q] + grow - leave >= remote[pmax]:
            continue
        change = grow - gain_max + cost - leave if thorough else cost
        if change < least:
            best, least = v, change
            if not thorough and cost <= -1:
                break
    return best, least


@njit(cache=True)
def _rebalance(
    indptr,
    indices,
    degree,
    assignment,
    count,
    remote,
    members,
    starts,
    position,
    degree_sum,
    limit,
    gamma,
    max_swaps,
    patience,
    work,
    max_degree,
    thorough,
    log,
):  # pragma: no cover
    n = assignment.shape[0]
    offset = 0
    locked = np.zeros(n, np.bool_)
    best = remote.max()
    best_len = 0
    n_log = 0
    stale = 0
    while n_log < max_swaps:
        pmax = np.argmax(remote)
        pmin = np.argmin(remote)
        if remote[pmax] == 0 or remote[pmin] / remote[pmax] >= 1.0 - gamma:
            break
        # v_max: the boundary node of V_max whose move to V_min lowers V_max's remote count the
        # most net of what it adds to V_min's (ties: more remote neighbours, as in Algorithm 2)
        vmax = -1
        best_net = -(n + 1)
        most = -1
        size = starts[pmax + 1] - starts[pmax]
        seen = 0
        for step in range(size):
            v = members[starts[pmax] + (offset + step) % size]
            outside = degree[v] - count[pmax, v]
            if locked[v] or outside <= 0 or degree[v] > max_degree:
                continue
            net = _leave_gain(indptr, indices, assignment, count, v, pmax) - _join_cost(
                indptr, indices, assignment, count, v, pmin
            )
            if net > best_net or (net == best_net and outside > most):
                best_net, most, vmax = net, outside, v
            seen += 2 * degree[v] + 1
            if seen >= work:
                break
        if vmax < 0:
            break
        gain_max = _leave_gain(indptr, indices, assignment, count, vmax, pmax)
        # V_min first, then the next least loaded parts: the partner that raises the total the least
        # among them all (thorough), or the first that fits
        vmin, least = -1, 2 * n + 1
        for q in np.argsort(remote, kind="mergesort"):
            if q == pmax or remote[q] >= remote[pmax]:
                break
            v, change = _partner(
                indptr,
                indices,
                degree,
                assignment,
                count,
                remote,
                members,
                starts,
                locked,
                degree_sum,
                limit,
                pmax,
                q,
                vmax,
                gain_max,
                offset,
                work,
                max_degree,
                thorough,
            )
            if v >= 0 and change < least:
                vmin, least = v, change
                if not thorough:
                    break
        offset += 1
        if vmin < 0:
            locked[vmax] = True  # no partner improves the worst part: try the next node
            continue
        _swap(indptr, indices, assignment, count, remote, members, position, degree_sum, degree, vmax, vmin)
        locked[vmax] = True
        locked[vmin] = True
        log[n_log, 0] = vmax
        log[n_log, 1] = vmin
        n_log += 1
        worst = remote.max()
        if worst < best:
            best, best_len, stale = worst, n_log, 0
        else:
            stale += 1
            if stale > patience:
                break
    for i in range(n_log - 1, best_len - 1, -1):  # roll back to the best state seen
        _swap(indptr, indices, assignment, count, remote, members, position, degree_sum, degree, log[i, 0], log[i, 1])
    return n_log, best_len
