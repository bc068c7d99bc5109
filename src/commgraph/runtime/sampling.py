"""A sampling hop's remote frontier, drawn by the nodes' owners (``--structure partitioned``).

Each worker sends the destinations of a hop that no part of its machine holds to their owners with
the runtime's matching all-to-all, with the hop's key and fanout; each owner draws their in-edges
with the requester's key (:mod:`commgraph.sample.keyed`: the draws the requester would have made
from the whole structure) and sends back, per requested node, the count then the sources. Two
all-to-alls of int64 ids per hop, counted as ``sampling`` bytes, and two small all-gathers of the
counts. A collective: every worker takes part in every hop, with or without a batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from commgraph.runtime.alltoall import MatchingAllToAll
from commgraph.runtime.comm import Communicator

# serve(nodes, fanout, key) -> (per-node counts, sources node after node): an owner's draws
Serve = Callable[[np.ndarray, int, int], tuple[np.ndarray, np.ndarray]]


@dataclass
class RemoteRows:
    """The draws for a hop's remote destinations, in the order they were asked (by owner)."""

    counts: np.ndarray
    sources: np.ndarray


class RemoteSampling:
    """Sample nodes at their owners, all workers in step (see the module's docstring)."""

    label = "sampling"

    def __init__(self, comm: Communicator):
        self.comm = comm
        self.alltoall = MatchingAllToAll(comm)

    def __call__(self, nodes: np.ndarray, owners: np.ndarray, fanout: int, key: int, serve: Serve) -> RemoteRows:
        """Draw ``nodes`` (sorted by ``owners``, their owning ranks) at their owners, and serve
        what the others ask of this worker with ``serve``."""
        rank, size = self.comm.world.rank, self.comm.world.size
        wanted = np.bincount(owners, minlength=size).astype(np.int64)
        meta = self.comm.all_gather_object((wanted.tolist(), int(fanout), int(key)))
        asks = np.array([m[0] for m in meta], dtype=np.int64)  # asks[i, j]: nodes i asks of j
        requested = torch.empty(int(asks[:, rank].sum()), dtype=torch.int64)
        self.alltoall(requested, torch.from_numpy(np.ascontiguousarray(nodes, dtype=np.int64)), asks, label=self.label)
        replies = []
        for r, ids in enumerate(np.split(requested.numpy(), np.cumsum(asks[:, rank])[:-1])):
            counts, sources = serve(ids, meta[r][1], meta[r][2]) if ids.size else (ids, ids)
            replies.append(np.concatenate([counts, sources]).astype(np.int64, copy=False))
        lengths = np.array(self.comm.all_gather_object([len(reply) for reply in replies]), dtype=np.int64)
        received = torch.empty(int(lengths[:, rank].sum()), dtype=torch.int64)
        self.alltoall(received, torch.from_numpy(np.concatenate(replies)), lengths, label=self.label)
        counts, sources = [], []
        for q, block in enumerate(np.split(received.numpy(), np.cumsum(lengths[:, rank])[:-1])):
            counts.append(block[: wanted[q]])
            sources.append(block[wanted[q] :])
        return RemoteRows(np.concatenate(counts), np.concatenate(sources))

    def idle(self, serve: Serve) -> None:
        """Take part in a hop with nothing to ask (a worker without a batch this step)."""
        none = np.zeros(0, dtype=np.int64)
        self(none, none, 0, 0, serve)
