"""The batches the bridge's loaders share: an epoch's batches (as many on every rank:
:func:`most_batches`), each made while the one before is in use (:func:`made_ahead`) and counted
as it is yielded (:func:`with_counts`), and ids' positions among distinct nodes
(:func:`local_positions`). Their arguments are checked in
:mod:`commgraph.pyg.loader_checks`; their hops are drawn in :mod:`commgraph.pyg.hops`."""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Iterator

import numpy as np

from commgraph.pyg.link import search
from commgraph.pyg.trim import BatchCounts
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


def made_ahead(batches: Iterator, name: str) -> Iterator:
    """The items of ``batches``, in order, each made by a thread of its own (named ``name``) while
    the caller uses the one before: at most two are alive, the one in use and the next. An error
    making one is raised here, at that item; when the caller stops early, the thread finishes the
    item it is making (whatever it shares with the caller is free again on return) and ends."""
    asks: queue.SimpleQueue = queue.SimpleQueue()
    made: queue.SimpleQueue = queue.SimpleQueue()

    def make() -> None:
        while asks.get():
            try:
                made.put((True, next(batches)))
            except StopIteration:
                made.put((False, None))
                return
            except BaseException as error:  # raised in the caller's thread
                made.put((False, error))
                return

    thread = threading.Thread(target=make, name=name, daemon=True)
    thread.start()
    asks.put(True)
    try:
        while True:
            ok, item = made.get()
            if not ok:
                if item is not None:
                    raise item
                return
            asks.put(True)
            yield item
    finally:
        asks.put(False)
        thread.join()


def with_counts(loader, batches: Iterator) -> Iterator:
    """The batches of ``batches``, ``loader.yielded`` set to each one's counts as it is yielded
    (:class:`~commgraph.pyg.trim.BatchCounts`, which ``cg.sampled(..., trim=True)`` trims by);
    closing this closes ``batches``."""
    try:
        for batch in batches:
            loader.yielded = BatchCounts(tuple(batch.num_sampled_nodes), tuple(batch.num_sampled_edges))
            yield batch
    finally:
        batches.close()
