"""Collectives as flows: how ring and tree all-reduce, point-to-point sends and all-to-all load the
links, one aggregated flow per pair of neighbours rather than one per step.

A ring all-reduce of ``S`` bytes over ``n`` ranks (Patarasuk & Yuan 2009) runs ``2(n-1)`` steps of
``S/n`` bytes between ring neighbours, so alone on links of bandwidth ``B`` and latency ``alpha`` it
takes

.. math::  T = 2\\frac{n-1}{n}\\frac{S}{B} + 2(n-1)\\alpha .

Its aggregate is one flow per neighbour pair carrying ``2(n-1)/n S`` bytes, with the other
``2(n-1) - 1`` latencies added as a fixed overhead: the same link loads and, alone, the same time.
A double binary tree (NCCL; Sanders et al. 2009) sends ``S/2`` up and down each edge of two
complementary trees, all pipelined.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from commgraph.errors import SimulationError
from commgraph.topology.model import Topology


@dataclass(frozen=True)
class FlowSet:
    """Flows of one collective: member positions (``src``, ``dst``), bytes and fixed overhead each."""

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray
    overhead_hops: int = 0  # latencies of the route paid on top of the one a flow pays


def path_latency(topology: Topology, a: str, b: str) -> float:
    return sum(topology.links[h.link].latency_us for h in topology.route(a, b)) * 1e-6


def ring_allreduce(n: int, nbytes: float) -> FlowSet:
    if n < 1:
        raise SimulationError("an all-reduce needs at least one rank")
    if n == 1:
        return FlowSet(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))
    src = np.arange(n)
    return FlowSet(src, (src + 1) % n, np.full(n, 2.0 * (n - 1) / n * nbytes), 2 * (n - 1) - 1)


def tree_allreduce(n: int, nbytes: float) -> FlowSet:
    """Two binary trees, the second the mirror of the first (rank i -> n-1-i), each carrying half."""
    if n < 1:
        raise SimulationError("an all-reduce needs at least one rank")
    child = np.arange(1, n)
    parent = (child - 1) // 2
    src = np.concatenate([child, parent, n - 1 - child, n - 1 - parent])
    dst = np.concatenate([parent, child, n - 1 - parent, n - 1 - child])
    depth = math.ceil(math.log2(n + 1)) - 1 if n > 1 else 0
    return FlowSet(src, dst, np.full(src.shape[0], nbytes / 2.0), max(2 * depth - 1, 0))


def ring_half(n: int, nbytes: float) -> FlowSet:
    """A ring reduce-scatter or all-gather of ``nbytes``: half a ring all-reduce, ``(n-1)/n S`` per
    neighbour pair and ``n - 1`` steps' latencies."""
    if n < 1:
        raise SimulationError("a reduce-scatter needs at least one rank")
    if n == 1:
        return FlowSet(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))
    src = np.arange(n)
    return FlowSet(src, (src + 1) % n, np.full(n, (n - 1) / n * nbytes), n - 2)


ALLREDUCE = {"ring": ring_allreduce, "tree": tree_allreduce}


def all_to_all(counts: np.ndarray, bytes_per_unit: float) -> FlowSet:
    """Direct all-to-all: one flow per ordered pair of distinct members, ``counts[i, j]`` units."""
    n = counts.shape[0]
    src, dst = np.nonzero(~np.eye(n, dtype=bool))
    return FlowSet(src, dst, counts[src, dst] * bytes_per_unit)


def token_counts(
    rng: np.random.Generator, ranks: int, experts: int, tokens: int, top_k: int, alpha: float
) -> np.ndarray:
    """Tokens each of ``ranks`` EP ranks sends to each rank's experts (``experts / ranks`` each):
    expert popularity drawn from a symmetric Dirichlet(``alpha``) (smaller is more skewed, ``inf``
    uniform), then every rank's ``tokens x top_k`` choices drawn from it."""
    if experts % ranks:
        raise SimulationError(f"{experts} experts do not split evenly over {ranks} EP ranks")
    popularity = np.full(experts, 1.0 / experts) if math.isinf(alpha) else rng.dirichlet(np.full(experts, alpha))
    picks = rng.multinomial(tokens * top_k, popularity, size=ranks)
    return picks.reshape(ranks, ranks, experts // ranks).sum(axis=2)
