"""The automorphisms of a machine that the packing LPs exploit (:mod:`commgraph.plan.colgen`).

Two kinds, both checked on the topology itself, never assumed from a preset's name:

- **twins**: devices that are not workers, of one kind on one host, with the same links to the same
  neighbours (the NVSwitch planes of a DGX A100, the two NICs under one PCIe switch). Swapping two
  twins maps the machine onto itself.
- **the server shift**: the hosts that hold workers, when every one has the same devices in the same
  order and moving every host's devices to the next host's (the last to the first; devices outside
  them stay) maps every link onto a link of the same kind, count, bandwidth and latency: identical
  servers on one switch, or on rails whose switch depends on a NIC's position only.

The group they generate acts on the resources (link directions, ``2 * link + direction``);
``classes`` numbers its orbits. A mix of columns averaged over the group loads every resource of an
orbit equally; :meth:`Symmetry.expand` gives that average for one path: its images under every
shift, each split evenly over the twins at every twin on the way (a path's load averaged over the
twins' permutations is the same as over these independent choices: no link joins two twins of one
class, so each link sees a uniform choice at each end).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np

from commgraph.topology import Topology


@dataclass(frozen=True)
class Symmetry:
    """``shifts[k]``: the device permutation of the server shift applied k times (``shifts[0]`` the
    identity; one entry when there is no shift); ``twin[d]``: device d's twin class (-1: none) and
    ``members[c]`` the devices of class c; ``classes[r]``: resource r's orbit."""

    shifts: np.ndarray  # [shifts, devices]
    twin: np.ndarray  # [devices]
    members: tuple[tuple[int, ...], ...]
    classes: np.ndarray  # [resources]

    @property
    def orbits(self) -> int:
        """The number of classes of resources the symmetry leaves."""
        return int(self.classes.max()) + 1

    def expand(self, path: tuple[int, ...]) -> list[tuple[int, float, tuple[int, ...]]]:
        """(shift k, share, path) for every image of ``path`` (device indices): shifted by k, then
        one path per choice of twins along it; each shift's shares sum to 1."""
        split = [self.members[self.twin[d]] if self.twin[d] >= 0 else (d,) for d in path]
        choices = list(product(*split))
        share = 1.0 / len(choices)
        return [
            (k, share, tuple(int(x) for x in shift[list(choice)]))
            for k, shift in enumerate(self.shifts)
            for choice in choices
        ]


def find_symmetry(topology: Topology, workers: list[str]) -> Symmetry:
    """The twins and the server shift of ``topology`` (module docstring), and the orbits of the
    resources under the group they generate."""
    n = len(topology.devices)
    worker_set = set(workers)
    links = _LinkIndex(topology)
    twin, members = _twins(topology, worker_set)
    shift = _server_shift(topology, worker_set, links)
    parent = np.arange(2 * len(topology.links))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def join(a: int, b: int) -> None:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    generators = [(np.asarray(shift), None)] if shift is not None else []
    for group in members:
        for a, b in zip(group, group[1:]):
            swap = np.arange(n)
            swap[a], swap[b] = b, a
            generators.append((swap, links.incident[a] + links.incident[b]))  # the other links stay
    for perm, moved in generators:
        for resource, image in links.images(perm, moved):
            join(resource, image)
    roots = np.array([root(r) for r in range(parent.size)])
    _, classes = np.unique(roots, return_inverse=True)
    shifts = [np.arange(n)]
    if shift is not None:
        while True:
            following = np.asarray(shift)[shifts[-1]]
            if np.array_equal(following, shifts[0]):
                break
            shifts.append(following)
    return Symmetry(np.array(shifts), twin, tuple(members), classes.astype(np.int64))


def no_symmetry(topology: Topology) -> Symmetry:
    """The trivial group: every resource its own orbit (the plain LP)."""
    n = len(topology.devices)
    return Symmetry(np.arange(n)[None, :], np.full(n, -1), (), np.arange(2 * len(topology.links)))


class _LinkIndex:
    """The links by their two ends and attributes, to find a link's image under a permutation."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.by_key: dict[tuple, list[int]] = {}
        self.incident: list[list[int]] = [[] for _ in topology.devices]
        for k, link in enumerate(topology.links):
            a, b = topology.index[link.a], topology.index[link.b]
            self.by_key.setdefault(self.key(a, b, k), []).append(k)
            self.incident[a].append(k)
            self.incident[b].append(k)

    def key(self, a: int, b: int, k: int) -> tuple:
        link = self.topology.links[k]
        return (min(a, b), max(a, b), link.kind, link.count, link.bandwidth_gbps, link.latency_us)

    def images(self, perm: np.ndarray, links: list[int] | None = None) -> list[tuple[int, int]] | None:
        """(resource, its image) for the resources of ``links`` (default: all) under the device
        permutation ``perm``, or None when one of them has no image (``perm`` is not an
        automorphism). ``links`` must be closed under ``perm``: all the links that it moves."""
        topology, pairs, used = self.topology, [], {}
        for k in range(len(topology.links)) if links is None else links:
            link = topology.links[k]
            a, b = topology.index[link.a], topology.index[link.b]
            key = self.key(int(perm[a]), int(perm[b]), k)
            candidates = self.by_key.get(key, [])
            nth = used.get(key, 0)
            if nth >= len(candidates):
                return None
            used[key] = nth + 1
            image = candidates[nth]
            flip = topology.index[topology.links[image].a] != perm[a]
            pairs += [(2 * k, 2 * image + flip), (2 * k + 1, 2 * image + (not flip))]
        return pairs


def _twins(topology: Topology, workers: set[str]) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Devices that are not workers, grouped by kind, host and their links' far ends and attributes."""
    neighbours: dict[int, list[tuple]] = {}
    for link in topology.links:
        a, b = topology.index[link.a], topology.index[link.b]
        attributes = (link.kind, link.count, link.bandwidth_gbps, link.latency_us)
        neighbours.setdefault(a, []).append((b, *attributes))
        neighbours.setdefault(b, []).append((a, *attributes))
    groups: dict[tuple, list[int]] = {}
    for i, device in enumerate(topology.devices):
        if device.id not in workers and i in neighbours:
            groups.setdefault((device.kind, device.host, tuple(sorted(neighbours[i]))), []).append(i)
    members = [tuple(g) for g in groups.values() if len(g) > 1]
    twin = np.full(len(topology.devices), -1)
    for c, group in enumerate(members):
        twin[list(group)] = c
    return twin, members


def _server_shift(topology: Topology, workers: set[str], links: _LinkIndex) -> np.ndarray | None:
    """The permutation moving every worker host's devices to the next host's, if it is an
    automorphism (module docstring); None otherwise or with fewer than two such hosts."""
    hosts: dict[str, list[int]] = {}
    for i, device in enumerate(topology.devices):
        hosts.setdefault(device.host, []).append(i)
    held = [devices for devices in hosts.values() if any(topology.devices[i].id in workers for i in devices)]
    if len(held) < 2:
        return None
    shape = [(topology.devices[i].kind, topology.devices[i].id in workers) for i in held[0]]
    if any([(topology.devices[i].kind, topology.devices[i].id in workers) for i in h] != shape for h in held):
        return None
    perm = np.arange(len(topology.devices))
    for h, devices in enumerate(held):
        perm[devices] = held[(h + 1) % len(held)]
    return perm if links.images(perm) is not None else None
