"""Workloads of multi-path selection: a request stream (:mod:`commgraph.workload.requests`) bound
to the path table its types may take, from a ``poisson:``, ``kvs:`` or CSV-trace spec."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commgraph.errors import PlanError
from commgraph.plan.multipath.model import PathTable
from commgraph.plan.paths import CommPath, PathSet, RequestType, auto_path_set, read_paths
from commgraph.topology import Topology
from commgraph.workload.requests import (
    KvsSpec,
    RequestStream,
    kvs_stream,
    parse_kvs,
    parse_poisson,
    poisson_stream,
    read_trace,
    trace_rows,
    with_ordered_types,
)


@dataclass
class Workload:
    """A request stream and the paths its types may take; ``rate`` is the Poisson rate (requests
    per second), None for a trace; ``shares`` each type's share of the requests; ``keys`` each
    request's key (a KVS workload) or None."""

    table: PathTable
    stream: RequestStream
    rate: float | None
    label: str = ""
    shares: np.ndarray | None = None
    keys: np.ndarray | None = None

    @property
    def sizes(self) -> np.ndarray:
        """Each request type's size in bytes."""
        return np.array([t.bytes for t in self.table.path_set.types])

    def direct_rate(self) -> float:
        """The all-direct assignment's capacity (requests per second)."""
        return self.table.direct_rate(self._shares(), self.sizes)

    def combined_rate(self) -> float:
        """Every path's capacity together (requests per second)."""
        return self.table.combined_rate(self._shares(), self.sizes)

    def _shares(self) -> np.ndarray:
        if self.shares is not None:
            return self.shares
        return np.bincount(self.stream.kind, minlength=len(self.table.path_set.types)) / len(self.stream)


def load_workload(topology: Topology, spec: str, paths: PathSet | str | None = None) -> Workload:
    """A request stream and its paths from a spec.

    Args:
        topology: the host.
        spec: ``poisson:...``, ``kvs:...`` or a CSV trace (:mod:`commgraph.workload.requests`).
        paths: a path set or its YAML file, whose type names the stream uses; None: the types are
            ``SRC:DST`` specs with candidate paths from the topology (a ``kvs:`` spec builds its own).

    Returns:
        The workload, with its Poisson rate (None for a trace).

    Raises:
        PlanError: a bad spec, or ``paths`` given with a ``kvs:`` spec.
    """
    path_set = read_paths(paths) if isinstance(paths, str) else paths
    if spec.startswith("kvs"):
        if path_set is not None:
            raise PlanError("a kvs workload builds its own paths: leave out --paths")
        return kvs_workload(topology, parse_kvs(spec))
    if spec.startswith("poisson"):
        poisson = parse_poisson(spec)
        if path_set is None:
            if not poisson.types:
                raise PlanError("give the request types: types=SRC:DST[+SRC:DST...], or a path set with --paths")
            path_set = auto_path_set(topology, list(poisson.types), poisson.size, poisson.compute)
        elif poisson.compute:
            raise PlanError("compute= applies to SRC:DST types; a path set gives each type's compute itself")
        names = list(poisson.types) or [t.name for t in path_set.types]
        kinds = np.array([path_set.type_index(name) for name in names])
        table = PathTable(topology, PathSet(tuple(path_set.types[k] for k in kinds)))
        sizes = np.array([t.bytes for t in table.path_set.types])
        shares = np.full(len(kinds), 1.0 / len(kinds))
        rate = poisson.rate or poisson.load * table.direct_rate(shares, sizes)
        return Workload(table, _ordered(table, poisson_stream(poisson, sizes, rate)), rate, spec, shares)
    if path_set is None:
        rows = trace_rows(spec)
        if any(not row.get("bytes") for row in rows):
            raise PlanError(f"{spec}: without --paths, every row needs bytes (types are SRC:DST)")
        path_set = auto_path_set(topology, list(dict.fromkeys(row["type"] for row in rows)), 0.0)
    table = PathTable(topology, path_set)
    sizes = np.array([t.bytes for t in path_set.types])
    return Workload(table, _ordered(table, read_trace(spec, [t.name for t in path_set.types], sizes)), None, spec)


def _ordered(table: PathTable, stream: RequestStream) -> RequestStream:
    """Requests of ``ordered`` types follow the previous one of their type."""
    return with_ordered_types(stream, np.array([t.dependency == "ordered" for t in table.path_set.types]))


@dataclass(frozen=True)
class KvsPaths:
    """The key-value store's request types (``get``, ``put``) and the cores of its CPU."""

    path_set: PathSet
    cores: dict[str, int]


def kvs_paths(topology: Topology, spec: KvsSpec) -> KvsPaths:
    """The key-value store's request types on ``topology``. A GET is served by the accelerator (its
    first path, ``direct``) or by the CPU, a PUT by the CPU only; each is two round trips from the
    NIC: the index lookup where the path computes, then the value read (or written) in host memory
    by the NIC, which no core serves. Each request moves ``key + value`` bytes over every link it
    crosses.

    Args:
        topology: the host.
        spec: the workload; its ``nic``, ``acc`` and ``cpu`` name the devices, by default the first
            NIC, the first accelerator (else the first GPU) and the first CPU.

    Returns:
        The two request types and the CPU's cores.

    Raises:
        PlanError: the topology lacks one of the devices.
    """

    def first(kinds: tuple[str, ...], given: str | None, what: str) -> str:
        if given is not None:
            topology.device(given)
            return given
        for kind in kinds:
            found = [d.id for d in topology.devices if d.kind == kind]
            if found:
                return found[0]
        raise PlanError(f"topology {topology.name!r} has no {what} for the kvs workload; name one with {what}=")

    nic, cpu = first(("nic",), spec.nic, "nic"), first(("cpu",), spec.cpu, "cpu")
    acc = first(("accelerator", "gpu"), spec.acc, "acc")

    def via(a: str, b: str) -> tuple[str, ...]:
        return (a, *(h.dst for h in topology.route(a, b)))

    value_trip = via(nic, cpu)[1:] + via(cpu, nic)[1:]  # the second round trip: host memory, no core
    on_acc = via(nic, acc) + via(acc, nic)[1:] + value_trip
    on_cpu = via(nic, cpu) + via(cpu, nic)[1:] + value_trip
    nbytes = spec.key + spec.value
    get = RequestType(
        "get", nbytes, (CommPath(on_acc, ((acc, spec.acc_us * 1e-6),)), CommPath(on_cpu, ((cpu, spec.cpu_us * 1e-6),)))
    )
    put = RequestType("put", nbytes, (CommPath(on_cpu, ((cpu, spec.put_us * 1e-6),)),))
    return KvsPaths(PathSet((get, put)), {cpu: spec.cores})


def kvs_workload(topology: Topology, spec: KvsSpec) -> Workload:
    """The thesis's key-value store on ``topology`` (:func:`kvs_paths`).

    Args:
        topology: the host.
        spec: the workload, at ``spec.rate`` or at ``spec.load`` times the direct paths' capacity
            (GETs on the accelerator, PUTs on the CPU).

    Returns:
        The workload with each request's key.
    """
    kvs = kvs_paths(topology, spec)
    path_set = kvs.path_set
    table = PathTable(topology, path_set, kvs.cores)
    shares, sizes = np.array([spec.get, spec.put]), np.array([t.bytes for t in path_set.types])
    rate = spec.rate or spec.load * table.direct_rate(shares, sizes)
    stream, keys = kvs_stream(spec, sizes, rate)
    return Workload(table, stream, rate, spec.name, shares, keys)
