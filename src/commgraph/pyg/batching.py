"""The batches the bridge's loaders share: an epoch's batches (as many on every rank:
:func:`most_batches`) and ids' positions among distinct nodes (:func:`local_positions`). Their
arguments are checked in :mod:`commgraph.pyg.loader_checks`; their hops are drawn in
:mod:`commgraph.pyg.hops`."""

from __future__ import annotations

import math

import numpy as np

from commgraph.pyg.link import search
from commgraph.pyg.world import session


def most_batches(num_seeds: int, batch_size: int) -> int:
    """The most batches any rank's seeds need (this rank has ``num_seeds``), through one all-reduce."""
    s = session()
    needs = [0.0] * s.world.size
    needs[s.world.rank] = math.ceil(num_seeds / batch_size)
    return int(max(s.comm.global_sum(needs)))


def epoch_batches(num_seeds: int, batch_size: int, steps: int, shuffle: bool, rng: np.random.Generator):
    """``steps`` batches of positions in a rank's ``num_seeds`` seeds: in order or, with ``shuffle``,
    in an order drawn from ``rng``; past its own batches a rank makes its first ones again (empty
    ones when it has no seeds)."""
    order = rng.permutation(num_seeds) if shuffle else np.arange(num_seeds)
    own = math.ceil(num_seeds / batch_size)
    for step in range(steps):
        at = (step % own) * batch_size if own else 0
        yield order[at : at + batch_size]


def local_positions(nodes: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Positions in ``nodes`` (distinct) of ``ids``."""
    sorter = np.argsort(nodes)
    return sorter[search(nodes[sorter], ids)]
