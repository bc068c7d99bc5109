"""Communication paths as data (LEO, thesis chapter 6.2.1: the *communication path* abstraction).

A :class:`CommPath` is the sequence of devices a request crosses inside one host, e.g. host memory
-> PCIe switch -> GPU (``cpu0 > pcie0 > gpu0``), or host -> another GPU -> NVLink -> GPU
(``cpu0 > pcie1 > gpu3 > gpu0``), or NIC -> GPU. Consecutive devices must share a link of the
topology; unlike the topology's own routes, a path may relay through a GPU (a chained copy).

A :class:`RequestType` gives a request's size, the compute it needs on each device
(``compute: {gpu0: 2.0e-5}`` seconds, paid where the chosen path first visits that device; a path
written as a mapping, ``{devices: [...], compute: {...}}``, gives its own compute instead), its
dependency (``ordered``: each request of the type follows the previous one, as a PUT and a GET of one
key must; ``none``, the default: requests are independent) and its candidate paths. A
:class:`PathSet` is the YAML a user reads and edits::

    types:
      - name: h2d
        bytes: 1048576
        compute: {gpu0: 2.0e-5}
        dependency: ordered
        paths:
          - [cpu0, pcie0, gpu0]
          - [cpu0, pcie1, gpu3, gpu0]
      - name: get                     # a key-value GET: two round trips, computed where the path says
        bytes: 72
        paths:
          - {devices: [nic0, fpga0, nic0, cpu0, nic0], compute: {fpga0: 2.0e-7}}
          - {devices: [nic0, cpu0, nic0, cpu0, nic0], compute: {cpu0: 4.8e-6}}

:func:`resolve_paths` checks a path set against a topology, naming the bad hop, and turns each path
into the data the selectors and the simulator use (:class:`ResolvedPath`): its links, its transfer
*segments* (a request streams through all links of a segment at once, at the slowest link's
bandwidth, as a DMA does) separated by the devices where it computes, and where the path comes back
over a link direction it already crossed (a second round trip starts a new segment).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from commgraph.atomic import atomic_write
from commgraph.errors import PlanError
from commgraph.topology import Topology
from commgraph.topology.files import load_yaml
from commgraph.topology.model import Hop

_NVLINK_KINDS = ("nvlink", "nvswitch")
DEPENDENCIES = ("none", "ordered")


@dataclass(frozen=True)
class CommPath:
    """One way through the host: ``devices`` in the order the request crosses them. ``compute``
    (device, seconds) pairs, when given, replace the request type's compute on this path (a GET
    served by the accelerator computes there, the same GET served by the CPU on the CPU)."""

    devices: tuple[str, ...]
    compute: tuple[tuple[str, float], ...] | None = None

    @property
    def name(self) -> str:
        """The devices joined by ``>``."""
        return ">".join(self.devices)

    def to_yaml(self):
        """The path as a path-set file holds it: its device list, or a mapping with its compute."""
        if self.compute is None:
            return list(self.devices)
        return {"devices": list(self.devices), "compute": dict(self.compute)}


@dataclass(frozen=True)
class RequestType:
    """A kind of request: ``bytes`` moved, ``compute`` seconds per device, candidate ``paths``
    (the first is the one ``direct`` takes), ``dependency`` (one of :data:`DEPENDENCIES`)."""

    name: str
    bytes: float
    paths: tuple[CommPath, ...]
    compute: dict[str, float] = field(default_factory=dict)
    dependency: str = "none"

    def to_dict(self) -> dict:
        """The type as a path-set file holds it (defaults left out)."""
        data = {"name": self.name, "bytes": self.bytes}
        if self.compute:
            data["compute"] = dict(self.compute)
        if self.dependency != "none":
            data["dependency"] = self.dependency
        data["paths"] = [p.to_yaml() for p in self.paths]
        return data


@dataclass(frozen=True)
class PathSet:
    """The request types of a workload and each type's candidate paths (a path-set YAML file)."""

    types: tuple[RequestType, ...]

    def type_index(self, name: str) -> int:
        """The index of the type called ``name``.

        Raises:
            PlanError: no type has that name.
        """
        for i, kind in enumerate(self.types):
            if kind.name == name:
                return i
        raise PlanError(f"unknown request type {name!r}; the path set has {', '.join(t.name for t in self.types)}")

    def to_dict(self) -> dict:
        """The path set as its YAML file holds it."""
        return {"types": [t.to_dict() for t in self.types]}

    @classmethod
    def from_dict(cls, data, *, source: str = "path set") -> PathSet:
        """A path set from parsed YAML, checked; ``source`` names it in errors.

        Raises:
            PlanError: the data is not a path set (the message says where and what).
        """
        if not isinstance(data, dict) or set(data) != {"types"} or not isinstance(data["types"], list):
            raise PlanError(f"{source}: expected a mapping with one key, 'types', holding a list")
        types = tuple(_request_type(entry, f"{source}: type {i}") for i, entry in enumerate(data["types"]))
        if not types:
            raise PlanError(f"{source}: 'types' is empty; give at least one request type")
        names = [t.name for t in types]
        if len(set(names)) != len(names):
            raise PlanError(f"{source}: request type names must be unique, got {names}")
        return cls(types)


def _request_type(entry, where: str) -> RequestType:
    if not isinstance(entry, dict):
        raise PlanError(f"{where}: expected a mapping with name, bytes, paths and optional compute, dependency")
    unknown = sorted(set(entry) - {"name", "bytes", "paths", "compute", "dependency"})
    if unknown:
        raise PlanError(f"{where}: unknown field(s) {unknown}; expected name, bytes, paths, compute, dependency")
    missing = [k for k in ("name", "bytes", "paths") if k not in entry]
    if missing:
        raise PlanError(f"{where}: missing field(s) {missing}")
    where = f"{where} ({entry['name']})"
    try:
        nbytes = float(entry["bytes"])
        compute = {str(k): float(v) for k, v in (entry.get("compute") or {}).items()}
    except (TypeError, ValueError, AttributeError):
        raise PlanError(f"{where}: bytes must be a number and compute a mapping of device to seconds") from None
    if not nbytes >= 0 or any(not v >= 0 for v in compute.values()):
        raise PlanError(f"{where}: bytes and compute seconds must be >= 0")
    paths = entry["paths"]
    if not isinstance(paths, list) or not paths:
        raise PlanError(f"{where}: paths must be a non-empty list of device lists such as [cpu0, pcie0, gpu0]")
    dependency = str(entry.get("dependency", "none"))
    if dependency not in DEPENDENCIES:
        raise PlanError(f"{where}: dependency must be one of {', '.join(DEPENDENCIES)}, got {dependency!r}")
    comm_paths = tuple(_comm_path(p, f"{where}, path {i}") for i, p in enumerate(paths))
    return RequestType(str(entry["name"]), nbytes, comm_paths, compute, dependency)


def _comm_path(entry, where: str) -> CommPath:
    """A path: a device list, or ``{devices: [...], compute: {device: seconds}}``."""
    if isinstance(entry, list):
        return CommPath(tuple(str(d) for d in entry))
    if not isinstance(entry, dict) or set(entry) - {"devices", "compute"} or not isinstance(entry.get("devices"), list):
        raise PlanError(
            f"{where}: a path is a device list such as [cpu0, pcie0, gpu0], or a mapping with devices and compute"
        )
    try:
        compute = tuple((str(k), float(v)) for k, v in (entry.get("compute") or {}).items())
    except (TypeError, ValueError, AttributeError):
        raise PlanError(f"{where}: compute must be a mapping of device to seconds") from None
    if any(not v >= 0 for _, v in compute):
        raise PlanError(f"{where}: compute seconds must be >= 0")
    return CommPath(tuple(str(d) for d in entry["devices"]), compute)


def read_paths(path: str | Path) -> PathSet:
    """A path set from its YAML file.

    Args:
        path: the file.

    Returns:
        The path set, checked (not yet against a topology: :func:`resolve_paths`).
    """
    return PathSet.from_dict(load_yaml(path, PlanError), source=str(path))


def write_paths(paths: PathSet, path: str | Path) -> None:
    """Write a path set to a YAML file, atomically.

    Args:
        paths: the path set.
        path: the file.
    """
    with atomic_write(path) as handle:
        handle.write(paths_yaml(paths).encode())


def paths_yaml(paths: PathSet) -> str:
    """A path set as YAML text.

    Args:
        paths: the path set.

    Returns:
        The text :func:`read_paths` reads back.
    """
    return yaml.safe_dump(paths.to_dict(), sort_keys=False, default_flow_style=None, width=120)


# -- resolving against a topology ----------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """Devices a request streams through at once, and that stretch's links."""

    devices: tuple[str, ...]
    hops: tuple[Hop, ...]
    resources: np.ndarray  # (link, direction) ids, as the simulator numbers them
    inv_bandwidth: np.ndarray  # seconds per byte on each of those resources
    latency_s: float  # link latencies, plus the largest per-message overhead

    @property
    def seconds_per_byte(self) -> float:
        """At the slowest link's bandwidth."""
        return float(self.inv_bandwidth.max())


@dataclass(frozen=True)
class ComputeStep:
    """``seconds`` of compute at ``device`` on a request's way."""

    device: str
    seconds: float


@dataclass(frozen=True)
class ResolvedPath:
    """A request type's path checked against a topology: ``steps`` alternate transfer segments and
    compute at a device, in the order the request meets them."""

    kind: int  # index of the request type
    path: CommPath
    steps: tuple[Segment | ComputeStep, ...]

    @property
    def segments(self) -> list[Segment]:
        """The transfer steps, in order."""
        return [s for s in self.steps if isinstance(s, Segment)]

    @property
    def computes(self) -> list[ComputeStep]:
        """The compute steps, in order."""
        return [s for s in self.steps if isinstance(s, ComputeStep)]

    @property
    def fixed_seconds(self) -> float:
        """Latency of every segment plus every compute step."""
        return sum(s.latency_s for s in self.segments) + sum(c.seconds for c in self.computes)

    @property
    def seconds_per_byte(self) -> float:
        """Each segment at its bottleneck, one after another."""
        return sum(s.seconds_per_byte for s in self.segments)

    def traverse_seconds(self, nbytes: float) -> float:
        """T(p, r): the request alone on this path (links' latency and bytes at each segment's
        bottleneck, plus its compute)."""
        return self.fixed_seconds + nbytes * self.seconds_per_byte

    @property
    def toll_per_byte(self) -> float:
        """Seconds per byte summed over every link of every segment (the toll's byte term)."""
        return sum(float(s.inv_bandwidth.sum()) for s in self.segments)

    def toll_seconds(self, nbytes: float) -> float:
        """Q_toll(p, r) of equation 6.5: what the request adds to every queue it joins,
        sum of S / BW over its links plus its compute."""
        return nbytes * self.toll_per_byte + sum(c.seconds for c in self.computes)


def resolve_paths(paths: PathSet, topology: Topology) -> list[list[ResolvedPath]]:
    """Every type's paths checked against ``topology``: known devices, a link for every hop, compute
    only on known devices.

    Args:
        paths: the path set.
        topology: the host.

    Returns:
        Per request type, its paths resolved into transfer segments and compute steps.

    Raises:
        PlanError: naming the type, the path and the bad hop or device.
    """
    resolved = []
    for k, kind in enumerate(paths.types):
        for device in [*kind.compute, *(d for p in kind.paths for d, _ in p.compute or ())]:
            if device not in topology.index:
                raise PlanError(
                    f"request type {kind.name!r}: compute on unknown device {device!r} (topology {topology.name!r})"
                )
        resolved.append([_resolve(k, kind, path, topology) for path in kind.paths])
    return resolved


def _resolve(k: int, kind: RequestType, path: CommPath, topology: Topology) -> ResolvedPath:
    where = f"request type {kind.name!r}, path {path.name}"
    if len(path.devices) < 2:
        raise PlanError(f"{where}: a path needs at least two devices")
    for n, device in enumerate(path.devices):
        if device not in topology.index:
            raise PlanError(f"{where}: device {n} {device!r} is not in topology {topology.name!r}")
    hops = []
    for n, (a, b) in enumerate(zip(path.devices, path.devices[1:]), start=1):
        links = topology.links_between(a, b) if a != b else []
        if not links:
            raise PlanError(f"{where}: hop {n} {a} -> {b} has no link in topology {topology.name!r}")
        j = max(links, key=lambda i: topology.links[i].bandwidth_gbps)
        hops.append(Hop(j, a, b, topology.links[j].a == a))
    compute = kind.compute if path.compute is None else dict(path.compute)
    steps: list[Segment | ComputeStep] = []
    start, seen, used = 0, set(), set()
    for n, device in enumerate(path.devices):
        if n > start and hops[n - 1].resource in used:  # back over a link: a new segment from the device before
            steps.append(_segment(path.devices[start:n], hops[start : n - 1], topology))
            start, used = n - 1, set()
        if n > 0:
            used.add(hops[n - 1].resource)
        seconds = compute.get(device, 0.0) if device not in seen else 0.0
        seen.add(device)
        if seconds <= 0:
            continue
        if n > start:
            steps.append(_segment(path.devices[start : n + 1], hops[start:n], topology))
        steps.append(ComputeStep(device, seconds))
        start, used = n, set()
    if start < len(path.devices) - 1:
        steps.append(_segment(path.devices[start:], hops[start:], topology))
    return ResolvedPath(k, path, tuple(steps))


def _segment(devices: tuple[str, ...], hops: list[Hop], topology: Topology) -> Segment:
    links = [topology.links[h.link] for h in hops]
    return Segment(
        devices=tuple(devices),
        hops=tuple(hops),
        resources=np.array([h.resource for h in hops], dtype=np.int64),
        inv_bandwidth=np.array([1.0 / (link.bandwidth_gbps * 1e9) for link in links]),
        latency_s=sum(link.latency_us for link in links) * 1e-6 + max(link.overhead_us for link in links) * 1e-6,
    )


# -- candidate paths from a topology -------------------------------------------------------------


def candidate_paths(topology: Topology, src: str, dst: str) -> list[CommPath]:
    """The ways from ``src`` to ``dst`` that the topology's routes allow: the route itself first,
    then one relay through each other GPU that reaches ``dst`` (or is reached from ``src``) over
    NVLink alone (a chained copy, host -> peer GPU -> NVLink -> GPU), then, between devices that
    are not CPUs, staging through each CPU's memory. A path is listed once, never crosses a link
    twice (there and back), and the relays are ordered by bottleneck bandwidth, then length.

    Args:
        topology: the host.
        src: where the bytes start.
        dst: where they go.

    Returns:
        The paths, the topology's route first.

    Raises:
        PlanError: ``src`` equals ``dst``; TopologyError: an unknown device.
    """
    for device in (src, dst):
        topology.device(device)  # raises, naming an unknown device
    if src == dst:
        raise PlanError(f"--src and --dst are both {src!r}: a path needs two different ends")
    direct = _through(topology, src, dst)
    others: list[tuple[str, ...]] = []
    for relay in topology.gpus:
        if relay.id in (src, dst):
            continue
        first, second = topology.route(src, relay.id), topology.route(relay.id, dst)
        if _nvlink_only(topology, second) or _nvlink_only(topology, first):
            others.append(_through(topology, src, relay.id) + _through(topology, relay.id, dst)[1:])
    if topology.device(src).kind != "cpu" and topology.device(dst).kind != "cpu":
        for cpu in (d.id for d in topology.devices if d.kind == "cpu" and d.host == topology.device(src).host):
            others.append(_through(topology, src, cpu) + _through(topology, cpu, dst)[1:])
    unique = list(dict.fromkeys(o for o in others if o != direct and _each_link_once(topology, o)))
    ordered = sorted(unique, key=lambda devices: _bottleneck_order(topology, devices))
    return [CommPath(direct), *(CommPath(d) for d in ordered)]


def _through(topology: Topology, src: str, dst: str) -> tuple[str, ...]:
    return (src, *(h.dst for h in topology.route(src, dst)))


def _each_link_once(topology: Topology, devices: tuple[str, ...]) -> bool:
    """A detour that crosses one link twice (there and back) only adds load to it."""
    pairs = [frozenset(pair) for pair in zip(devices, devices[1:])]
    return len(set(pairs)) == len(pairs)


def _nvlink_only(topology: Topology, hops: list[Hop]) -> bool:
    return bool(hops) and all(topology.links[h.link].kind in _NVLINK_KINDS for h in hops)


def _bottleneck_order(topology: Topology, devices: tuple[str, ...]) -> tuple[float, int]:
    gbps = min(
        max(topology.links[j].bandwidth_gbps for j in topology.links_between(a, b))
        for a, b in zip(devices, devices[1:])
    )
    return (-gbps, len(devices))


def auto_path_set(topology: Topology, specs: list[str], nbytes: float, compute_s: float = 0.0) -> PathSet:
    """Request types from ``SRC:DST`` specs, candidate paths from :func:`candidate_paths`.
    ``SRC:DST1|DST2`` lets a request be served at any of the destinations (its paths to each, the
    first destination's route first).

    Args:
        topology: the host.
        specs: one ``SRC:DST`` (or ``SRC:DST1|DST2``) per request type.
        nbytes: each request's size.
        compute_s: seconds of compute paid at the destination.

    Returns:
        The path set, one type per spec.

    Raises:
        PlanError: a malformed spec.
    """
    types = []
    for spec in specs:
        src, sep, dsts = spec.partition(":")
        if not sep or not src or not dsts:
            raise PlanError(f"bad request type {spec!r}: expected SRC:DST such as cpu0:gpu3 (or cpu0:gpu0|gpu2)")
        ends = dsts.split("|")
        paths = [p for dst in ends for p in candidate_paths(topology, src, dst)]
        compute = {dst: compute_s for dst in ends} if compute_s > 0 else {}
        types.append(RequestType(spec, nbytes, tuple(dict.fromkeys(paths)), compute))
    return PathSet(tuple(types))
