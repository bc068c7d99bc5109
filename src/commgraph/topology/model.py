"""The hardware as plain data: devices, full-duplex links, and the routes real transfers take.

A link entry joins two devices with ``count`` parallel physical links (an NV2 GPU pair is one entry
with count 2) and ``bandwidth_gbps`` for the whole entry in each direction, so a simulator or
planner treats each (link, direction) as one resource. A message crossing a link waits its
``latency_us`` (in flight: other messages proceed meanwhile) and occupies the link direction for
``overhead_us`` (per-message software cost: packing, a copy set-up, a Gloo round through the
sending process), so the messages sharing a link pay their overheads one after another. Routes
relay through a GPU only when the topology says GPUs forward (``gpu_forwarding``: NCCL's PXN, where
a GPU hands a message over NVLink to the GPU beside the NIC on the right rail); otherwise a
GPU-to-GPU transfer without NVLink goes through PCIe switches, CPUs and NICs, as the hardware does.

Where several cheapest paths tie (a fat-tree's many paths through its core), the fabric's
``routing`` decides what a flow uses: ``ecmp`` (per-flow hashing: each (src, dst) pair takes one of
them by a stable hash, so two flows may collide on one link while another idles) or ``spray``
(packet spraying: a flow's bytes split evenly over every equal-cost path, so a link carries the
share of the flow's paths that cross it; :meth:`Topology.spread`, in :mod:`commgraph.topology.routing`).

A device may give ``copy_gbps``, the rate at which it gathers rows into a message and scatters a
received message into its table (measured by calibration; unset, copies are not priced), and a
switch may give ``forward_gbps``, the most it forwards, all its links together: one resource that
every message crossing it shares (worker processes on one machine share its cores and memory, so
what they move all at once is less than the sum of what each moves alone). A topology
whose figures were measured (``commgraph topo calibrate``) carries a ``Calibration``: when, on which
host and how it was measured, and what the fit found.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from functools import cached_property

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from commgraph.errors import TopologyError
from commgraph.topology.compute import ComputeModel
from commgraph.topology.routing import Hop, Routes  # noqa: F401 (Hop: re-exported, routes' steps)

ROUTINGS = ("ecmp", "spray")  # how the fabric spreads a flow over equal-cost paths (Topology.routing)
DEVICE_KINDS = ("gpu", "cpu", "nic", "pcie_switch", "nvswitch", "switch", "accelerator")
LINK_KINDS = ("nvlink", "pcie", "qpi", "infiniband", "ethernet", "nvswitch", "shared_memory", "loopback")
# Devices that forward traffic between their neighbours; GPUs only send and receive.
FORWARDING_KINDS = frozenset({"cpu", "nic", "pcie_switch", "nvswitch", "switch"})


@dataclass(frozen=True)
class Device:
    """One device of a topology: a GPU, a CPU socket, a NIC, or a switch.

    Args:
        id: unique within the topology (``gpu0``; ``n1.gpu0`` in a cluster preset).
        kind: one of :data:`DEVICE_KINDS`: ``gpu`` and ``cpu`` run workers (GPUs only send and
            receive); ``nic``, ``pcie_switch``, ``nvswitch``, ``switch`` and ``cpu`` forward; an
            ``accelerator`` (an FPGA or a smartNIC's cores) only computes, sends and receives.
        host: the machine it belongs to.
        copy_gbps: the rate (GB/s) at which it gathers rows into a message and scatters a received
            one into its table, when measured (unset: copies are not priced).
        forward_gbps: the most (GB/s) a switch forwards, all its links together, when measured.
    """

    id: str
    kind: str
    host: str = "node0"
    copy_gbps: float | None = None
    forward_gbps: float | None = None

    def to_dict(self) -> dict:
        """Plain data; ``copy_gbps`` and ``forward_gbps`` only when measured, so unmeasured
        topologies read as before."""
        return {k: v for k, v in asdict(self).items() if v is not None or k not in ("copy_gbps", "forward_gbps")}


@dataclass(frozen=True)
class Link:
    """``count`` parallel full-duplex physical links between devices ``a`` and ``b``, as one entry:
    each direction is one resource of ``bandwidth_gbps`` for the whole entry. A message alone
    on it takes ``latency_us + overhead_us`` microseconds plus its bytes over the bandwidth
    (:meth:`seconds`).

    Args:
        a, b: the joined devices' ids (two different devices).
        kind: one of :data:`LINK_KINDS`.
        count: physical links in the entry (an NV2 GPU pair is one entry with ``count=2``).
        bandwidth_gbps: GB/s per direction, all ``count`` links together.
        latency_us: time in flight; other messages proceed meanwhile.
        overhead_us: per-message time the direction is occupied (packing, a copy set-up, a Gloo
            round through the sending process), so messages sharing a link pay it one after another.
    """

    a: str
    b: str
    kind: str
    count: int
    bandwidth_gbps: float
    latency_us: float
    overhead_us: float = 0.0

    def seconds(self, nbytes: float) -> float:
        """Time for one message of ``nbytes`` alone on this link in one direction."""
        return (self.latency_us + self.overhead_us) * 1e-6 + nbytes / (self.bandwidth_gbps * 1e9)

    def to_dict(self) -> dict:
        """Plain data; ``overhead_us`` only when set, so unmeasured topologies read as before."""
        data = asdict(self)
        if not self.overhead_us:
            del data["overhead_us"]
        return data


@dataclass(frozen=True)
class Calibration:
    """Where a topology's figures come from when they were measured: ``when`` (ISO 8601 time),
    ``host`` (the machine), ``how`` (the tool, backend, workers and message sizes) and ``details``
    (plain numbers and strings the fit reports, such as its worst relative error). ``allreduce``,
    when measured, prices the engine's own all-reduce across every worker (Gloo's or NCCL's
    algorithm, which is not a plan of ours): ``latency_us + bytes / bandwidth_gbps``.
    ``collective_us``, when measured, is one small collective across every worker (an 8-byte
    all-reduce): the fixed cost each of the runtime's own collectives pays. ``compute``,
    when measured, holds the step-time cost model's coefficients
    (:class:`~commgraph.topology.compute.ComputeModel`'s fields)."""

    when: str
    how: str
    host: str
    details: dict = field(default_factory=dict)
    allreduce: dict | None = None
    compute: dict | None = None
    collective_us: float | None = None

    def to_dict(self) -> dict:
        """Plain data; ``allreduce``, ``compute`` and ``collective_us`` only when measured."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    def allreduce_seconds(self, nbytes: float) -> float | None:
        """The measured all-reduce of ``nbytes`` across every worker, or None when not measured."""
        if self.allreduce is None:
            return None
        return self.allreduce["latency_us"] * 1e-6 + nbytes / (self.allreduce["bandwidth_gbps"] * 1e9)

    def validate(self) -> None:
        """Raise :class:`TopologyError` naming the first field that is wrong."""
        for name in ("when", "how", "host"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise TopologyError(f"calibrated.{name} must be a non-empty string")
        try:
            datetime.fromisoformat(self.when)
        except ValueError:
            raise TopologyError(
                f"calibrated.when must be an ISO 8601 time such as 2024-05-01T12:00:00+00:00, got {self.when!r}"
            ) from None
        if not isinstance(self.details, dict):
            raise TopologyError(f"calibrated.details must be a mapping, got {self.details!r}")
        if self.allreduce is not None:
            fit = self.allreduce
            if (
                not isinstance(fit, dict)
                or set(fit) != {"latency_us", "bandwidth_gbps"}
                or not all(isinstance(v, (int, float)) for v in fit.values())
                or not fit["latency_us"] >= 0
                or not fit["bandwidth_gbps"] > 0
            ):
                raise TopologyError(
                    f"calibrated.allreduce must be a mapping {{latency_us: >= 0, bandwidth_gbps: > 0}}, got {fit!r}"
                )
        if self.compute is not None:
            ComputeModel.from_dict(self.compute)
        collective = self.collective_us
        if collective is not None and (
            not isinstance(collective, (int, float)) or isinstance(collective, bool) or not collective >= 0
        ):
            raise TopologyError(f"calibrated.collective_us must be microseconds >= 0, got {collective!r}")


@dataclass
class Topology(Routes):
    """Devices and links of one machine or cluster, as plain data: what planners plan against and
    the simulator prices. Built by :func:`~commgraph.topology.load_preset`, read from YAML
    (:func:`~commgraph.topology.read_yaml`), detected from ``nvidia-smi topo -m``, or made by hand;
    validated on construction. :meth:`to_dict` and :meth:`from_dict` round-trip exactly.

    Args:
        name: the topology's name.
        devices: its devices, ids unique; worker rank ``r`` runs on ``workers[r]``.
        links: its links; one entry per device pair and kind.
        calibrated: where its figures come from when they were measured (``commgraph topo
            calibrate``).
        routing: ``ecmp`` (default) or ``spray``: how a flow uses equal-cost paths (module docstring).

    Raises:
        TopologyError: unknown kinds, duplicate ids or links, non-positive speeds, a device no link
            reaches.
    """

    name: str
    devices: list[Device]
    links: list[Link]
    calibrated: Calibration | None = None
    gpu_forwarding: bool = False  # routes may relay through GPUs (PXN); see the module docstring
    routing: str = "ecmp"
    _route_cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.devices = list(self.devices)
        self.links = list(self.links)
        self.validate()

    # -- lookups -------------------------------------------------------------------------------

    @cached_property
    def index(self) -> dict[str, int]:
        """Device id to its position in :attr:`devices`."""
        return {d.id: i for i, d in enumerate(self.devices)}

    def device(self, device_id: str) -> Device:
        """The device named ``device_id``; a :class:`TopologyError` names an unknown one."""
        try:
            return self.devices[self.index[device_id]]
        except KeyError:
            raise TopologyError(f"topology {self.name!r} has no device {device_id!r}") from None

    @property
    def gpus(self) -> list[Device]:
        """GPUs in declaration order: worker rank r runs on ``gpus[r]``."""
        return [d for d in self.devices if d.kind == "gpu"]

    @property
    def workers(self) -> list[Device]:
        """Devices that each run one worker: the GPUs, or the CPUs of a GPU-less topology."""
        return self.gpus or [d for d in self.devices if d.kind == "cpu"]

    @property
    def hosts(self) -> list[str]:
        """The machines, in the order their first devices appear."""
        return list(dict.fromkeys(d.host for d in self.devices))

    @cached_property
    def _adjacency(self) -> list[list[tuple[int, int]]]:
        """Per device: (neighbour index, link index), in link order (deterministic routes)."""
        adjacency: list[list[tuple[int, int]]] = [[] for _ in self.devices]
        for k, link in enumerate(self.links):
            a, b = self.index[link.a], self.index[link.b]
            adjacency[a].append((b, k))
            adjacency[b].append((a, k))
        return adjacency

    def forwards(self, device: Device) -> bool:
        """Whether routes may pass through ``device``: switches, CPUs and NICs always; GPUs only
        when the topology allows ``gpu_forwarding``."""
        return device.kind in FORWARDING_KINDS or (self.gpu_forwarding and device.kind == "gpu")

    def links_between(self, a: str, b: str) -> list[int]:
        ia, ib = self.index[a], self.index[b]
        return [k for n, k in self._adjacency[ia] if n == ib]

    def validate(self) -> None:
        """Raise :class:`TopologyError` naming the first device or link that is wrong."""
        seen: set[str] = set()
        for device in self.devices:
            if not device.id or not isinstance(device.id, str):
                raise TopologyError(f"device {device!r}: id must be a non-empty string")
            if device.id in seen:
                raise TopologyError(f"duplicate device id {device.id!r}")
            for name in ("copy_gbps", "forward_gbps"):
                value = getattr(device, name)
                if value is not None and not value > 0:
                    raise TopologyError(f"device {device.id!r}: {name} must be > 0 (or left out), got {value}")
            if device.kind not in DEVICE_KINDS:
                raise TopologyError(
                    f"device {device.id!r}: unknown kind {device.kind!r}; use one of {', '.join(DEVICE_KINDS)}"
                )
            seen.add(device.id)
        index = {d.id: i for i, d in enumerate(self.devices)}
        ends = self._link_ends(index)
        if self.links:
            self._check_links(ends)
        if self.calibrated is not None:
            self.calibrated.validate()
        if self.routing not in ROUTINGS:
            raise TopologyError(
                f"topology {self.name!r}: routing must be one of {', '.join(ROUTINGS)}, got {self.routing!r}"
            )
        self._check_connected(ends)

    def _link_ends(self, index: dict[str, int]) -> np.ndarray:
        """Per link its two devices' positions (``-1`` for an id no device has), shape ``[links, 2]``."""
        ends = np.fromiter(
            (index.get(end, -1) for link in self.links for end in (link.a, link.b)), np.int64, 2 * len(self.links)
        )
        return ends.reshape(-1, 2)

    def _check_links(self, ends: np.ndarray) -> None:
        """Raise :class:`TopologyError` for the first link that is wrong (one vectorised pass per
        check; among a link's faults, the first in the order below)."""
        links = self.links
        kinds = np.array([link.kind for link in links])
        figures = np.array([(link.bandwidth_gbps, link.latency_us, link.overhead_us) for link in links], np.float64)
        counts = np.array([link.count if isinstance(link.count, int) else 0 for link in links], dtype=object)
        low, high = ends.min(axis=1), ends.max(axis=1)
        kind_code = np.unique(kinds, return_inverse=True)[1].reshape(-1)
        pair = (low * len(self.devices) + high) * len(LINK_KINDS) + kind_code
        duplicate = np.ones(len(links), dtype=bool)
        duplicate[np.unique(pair, return_index=True)[1]] = False
        checks = [
            (low < 0, lambda k: f"unknown device {(links[k].a if ends[k, 0] < 0 else links[k].b)!r}"),
            (ends[:, 0] == ends[:, 1], lambda k: "a link must join two different devices"),
            (
                ~np.isin(kinds, LINK_KINDS),
                lambda k: f"unknown kind {links[k].kind!r}; use one of {', '.join(LINK_KINDS)}",
            ),
            (~(figures[:, 0] > 0), lambda k: f"bandwidth_gbps must be > 0, got {links[k].bandwidth_gbps}"),
            (~(figures[:, 1] >= 0), lambda k: f"latency_us must be >= 0, got {links[k].latency_us}"),
            (~(figures[:, 2] >= 0), lambda k: f"overhead_us must be >= 0, got {links[k].overhead_us}"),
            ((counts < 1).astype(bool), lambda k: f"count must be an integer >= 1, got {links[k].count!r}"),
            (duplicate, lambda k: f"duplicate {links[k].kind} link; merge them into one entry with a count"),
        ]
        failing = [(int(np.argmax(bad)), c) for c, (bad, _) in enumerate(checks) if bad.any()]
        if failing:
            k, c = min(failing)
            raise TopologyError(f"link {k} ({links[k].a} - {links[k].b}): {checks[c][1](k)}")

    def _check_connected(self, ends: np.ndarray) -> None:
        if not self.devices:
            raise TopologyError(f"topology {self.name!r} has no devices")
        n = len(self.devices)
        adjacency = csr_matrix((np.ones(len(ends)), (ends[:, 0], ends[:, 1])), shape=(n, n))
        labels = connected_components(adjacency, directed=False)[1]
        lost = np.flatnonzero(labels != labels[0])
        if lost.size:
            raise TopologyError(
                f"device {self.devices[lost[0]].id!r} is disconnected from {self.devices[0].id!r}: add a link to it"
            )

    # -- plain data ----------------------------------------------------------------------------

    def to_dict(self) -> dict:
        """Plain data (``name``, ``gpu_forwarding`` and ``routing`` when not the defaults, ``calibrated``,
        ``devices``, ``links``), as the YAML file holds it."""
        data = {"name": self.name}
        if self.gpu_forwarding:
            data["gpu_forwarding"] = True
        if self.routing != "ecmp":
            data["routing"] = self.routing
        if self.calibrated is not None:
            data["calibrated"] = self.calibrated.to_dict()
        data["devices"] = [d.to_dict() for d in self.devices]
        data["links"] = [link.to_dict() for link in self.links]
        return data

    @classmethod
    def from_dict(cls, data: dict, *, source: str = "topology") -> Topology:
        """The topology plain ``data`` describes (:meth:`to_dict`'s form; a link's ``count`` defaults
        to 1, its ``latency_us`` to 0); errors name ``source`` and the entry at fault."""
        if not isinstance(data, dict) or not {"devices", "links"} <= data.keys():
            raise TopologyError(f"{source}: expected a mapping with 'devices' and 'links'")
        unknown = sorted(set(data) - {"name", "calibrated", "gpu_forwarding", "routing", "devices", "links"})
        if unknown:
            raise TopologyError(
                f"{source}: unknown field(s) {unknown}; expected name, calibrated, gpu_forwarding, "
                "routing, devices, links"
            )
        if not isinstance(data.get("gpu_forwarding", False), bool):
            raise TopologyError(f"{source}: gpu_forwarding must be true or false, got {data['gpu_forwarding']!r}")
        devices = [_entry(Device, d, f"{source}: device {i}") for i, d in enumerate(data["devices"] or [])]
        links = [_entry(Link, link, f"{source}: link {i}") for i, link in enumerate(data["links"] or [])]
        calibrated = (
            None if data.get("calibrated") is None else _entry(Calibration, data["calibrated"], f"{source}: calibrated")
        )
        return cls(
            name=str(data.get("name", source)),
            devices=devices,
            links=links,
            calibrated=calibrated,
            gpu_forwarding=data.get("gpu_forwarding", False),
            routing=str(data.get("routing", "ecmp")),
        )

    def with_routing(self, routing: str) -> Topology:
        """The same fabric under another ``routing`` (``ecmp`` or ``spray``)."""
        return Topology(self.name, self.devices, self.links, self.calibrated, self.gpu_forwarding, routing)

    def same_as(self, other: Topology) -> bool:
        """Whether ``other`` has the same name, calibration, devices and links."""
        return self.to_dict() == other.to_dict()


_REQUIRED = {Device: ("id", "kind"), Link: ("a", "b", "kind", "bandwidth_gbps"), Calibration: ("when", "how", "host")}


def _entry(cls, values, where: str):
    """One YAML/JSON mapping -> Device or Link, naming the entry when a field is wrong."""
    if not isinstance(values, dict):
        raise TopologyError(f"{where}: expected a mapping, got {values!r}")
    names = list(cls.__dataclass_fields__)
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise TopologyError(f"{where}: unknown field(s) {unknown}; expected {names}")
    missing = [n for n in _REQUIRED[cls] if n not in values]
    if missing:
        raise TopologyError(f"{where}: missing field(s) {missing}")
    try:
        if cls is Link:
            return Link(
                a=str(values["a"]),
                b=str(values["b"]),
                kind=str(values["kind"]),
                count=values.get("count", 1),
                bandwidth_gbps=float(values["bandwidth_gbps"]),
                latency_us=float(values.get("latency_us", 0.0)),
                overhead_us=float(values.get("overhead_us", 0.0)),
            )
        if cls is Calibration:
            return Calibration(
                when=str(values["when"]),
                how=str(values["how"]),
                host=str(values["host"]),
                details=values.get("details") or {},
                allreduce=values.get("allreduce"),
                compute=values.get("compute"),
                collective_us=values.get("collective_us"),
            )
        copy, forward = values.get("copy_gbps"), values.get("forward_gbps")
        return Device(
            id=str(values["id"]),
            kind=str(values["kind"]),
            host=str(values.get("host", "node0")),
            copy_gbps=None if copy is None else float(copy),
            forward_gbps=None if forward is None else float(forward),
        )
    except (TypeError, ValueError) as exc:
        raise TopologyError(f"{where}: {exc}") from None
