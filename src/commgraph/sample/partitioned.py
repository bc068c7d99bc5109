"""Sampling on a partitioned structure (``--structure partitioned``, DistDGL's layout).

A machine holds the in-edges of its own parts only (each part's ``indptr``/``indices`` of the
partition set, local ids: owned nodes, then halo), plus two per-node maps of the whole graph: the
owner of each node (one byte up to 127 parts) and its in-degree (GCN's normalisation). A hop
draws the destinations its machine holds from those files, and sends the others to their owners
(the trainer has the runtime carry them: :mod:`commgraph.runtime.sampling`), which draw them with
the requester's key. Draws are counter-based (:mod:`commgraph.sample.keyed`), so the blocks are
exactly those of the replicated structure (:class:`~commgraph.sample.base.SamplingGraph`) for the
same seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from commgraph.errors import SamplingError
from commgraph.partition.mapped import advise_random
from commgraph.partition.store import Part, PartitionSet, owned_positions
from commgraph.sample.keyed import keyed_slots

# remote(nodes, owners, fanout, key, serve) -> rows with .counts and .sources: what the trainer has
# the runtime carry (commgraph.runtime.sampling.RemoteSampling); it also has an idle(serve)
Remote = Callable[..., Any]


@dataclass(frozen=True)
class PartRows:
    """One part's in-edges as the partition set stores them (memory-mapped, read-only)."""

    owned: np.ndarray  # ascending global ids
    halo: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray  # local ids: 0..len(owned)-1 owned, then halo

    @classmethod
    def of(cls, part: Part) -> PartRows:
        return cls(*(np.asarray(a) for a in (part.owned, part.halo, part.indptr, part.indices)))

    def sample(self, nodes: np.ndarray, fanout: int, key: int) -> tuple[np.ndarray, np.ndarray]:
        """The keyed draws for ``nodes`` (global ids this part owns): per-node counts and the
        sources (global ids), node after node."""
        counts, slots = keyed_slots(self.indptr, owned_positions(self.owned, nodes), nodes, fanout, key)
        local = np.asarray(self.indices[slots], dtype=np.int64)
        n_owned = self.owned.shape[0]
        inside = local < n_owned
        sources = np.empty(local.shape[0], dtype=np.int64)
        sources[inside] = self.owned[local[inside]]
        sources[~inside] = self.halo[local[~inside] - n_owned]
        return counts, sources


def merge_rows(n: int, groups: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Per-destination draws made in groups, back in destination order: each group gives the
    destinations' positions, their counts and their sources (destination after destination)."""
    counts = np.zeros(n, dtype=np.int64)
    for at, group_counts, _ in groups:
        counts[at] = group_counts
    starts = np.concatenate([[0], np.cumsum(counts)])
    sources = np.empty(int(starts[-1]), dtype=np.int64)
    for at, group_counts, group_sources in groups:
        within = np.concatenate([[0], np.cumsum(group_counts)[:-1]])
        sources[np.repeat(starts[at] - within, group_counts) + np.arange(group_sources.shape[0])] = group_sources
    return counts, sources


class PartitionedGraph:
    """What a worker samples on with ``--structure partitioned``: its machine's parts, the owner
    and degree maps of the set's ``structure/`` (memory-mapped), and the remote hops.

    Args:
        parts: the in-edges of each part of this machine, by part (= rank).
        owner: the part owning each node.
        degree: each node's in-degree without self loops.
        part: this worker's part.
        remote: draws hops at other machines' owners (None: a single machine holds every part).
    """

    def __init__(
        self, parts: dict[int, PartRows], owner: np.ndarray, degree: np.ndarray, part: int, remote: Remote | None
    ):
        self.parts, self.owner, self.degree, self.part, self.remote = parts, owner, degree, part, remote
        self.machine = np.array(sorted(parts), dtype=np.int64)

    @classmethod
    def from_partition(
        cls, pset: PartitionSet, part: int, machine: np.ndarray, remote: Remote | None
    ) -> PartitionedGraph:
        """Worker ``part`` of ``pset`` on a machine holding parts ``machine``."""
        parts = {int(q): PartRows.of(pset.part(int(q), check=int(q) == part)) for q in machine}
        return cls(parts, np.asarray(pset.assignment()), np.asarray(pset.structure("degree")), part, remote)

    @property
    def num_nodes(self) -> int:
        return int(self.owner.shape[0])

    def read_at_random(self) -> None:
        """Advise the kernel that the machine's parts' mapped CSRs are read a neighbour list at a
        time (:func:`~commgraph.partition.mapped.advise_random`): under a memory budget."""
        advise_random(*(array for rows in self.parts.values() for array in (rows.indptr, rows.indices)))

    def is_remote(self, nodes: np.ndarray) -> np.ndarray:
        return self.owner[nodes] != self.part

    def local_nodes(self) -> np.ndarray:
        """The nodes this worker owns."""
        return np.asarray(self.parts[self.part].owned, dtype=np.int64)

    def held(self, nodes: np.ndarray) -> np.ndarray:
        """Whether this machine holds each node's in-edges."""
        return np.isin(self.owner[nodes], self.machine)

    def sample_rows(self, dst: np.ndarray, fanout: int, key: int) -> tuple[np.ndarray, np.ndarray]:
        """A hop's keyed draws for ``dst``, the machine's from its parts and the others at their
        owners: per-destination counts and sources, destination after destination. A collective
        when the job spans machines."""
        owners = self.owner[dst].astype(np.int64)
        groups = []
        for q in np.unique(owners):
            if int(q) in self.parts:
                at = np.flatnonzero(owners == q)
                groups.append((at, *self.parts[int(q)].sample(dst[at], fanout, key)))
        far = np.flatnonzero(~np.isin(owners, self.machine))
        if self.remote is not None:
            far = far[np.argsort(owners[far], kind="stable")]
            rows = self.remote(dst[far], owners[far], fanout, key, self.serve)
            groups.append((far, rows.counts, rows.sources))
        elif far.size:
            raise SamplingError(
                f"{far.size} destinations are owned by parts this machine does not hold and no "
                f"remote sampling was set up"
            )
        return merge_rows(dst.shape[0], groups)

    def serve(self, nodes: np.ndarray, fanout: int, key: int) -> tuple[np.ndarray, np.ndarray]:
        """Another worker's request: draw ``nodes`` (owned here) with its key."""
        return self.parts[self.part].sample(nodes, fanout, key)

    def idle(self, hops: int) -> None:
        """A step without a batch: serve the others' requests for each of ``hops`` hops."""
        if self.remote is not None:
            for _ in range(hops):
                self.remote.idle(self.serve)
