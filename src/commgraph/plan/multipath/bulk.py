"""Bulk host -> GPU copies split over paths: a max-flow LP over every target GPU's candidate paths
at once (``docs/multipath.md``, "Bulk host -> GPU copies")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from commgraph.errors import PlanError
from commgraph.plan.paths import candidate_paths
from commgraph.sim import Transfer
from commgraph.topology import Topology

BULK_PLANNERS = ("direct", "lp")


@dataclass(frozen=True)
class BulkPart:
    """``bytes`` of ``gpu``'s copy carried on the route ``devices`` (source first)."""

    gpu: str
    devices: tuple[str, ...]
    bytes: float

    def to_dict(self) -> dict:
        """The part as JSON-ready data."""
        return {"gpu": self.gpu, "devices": list(self.devices), "bytes": self.bytes}


@dataclass(frozen=True)
class BulkPlan:
    """``parts`` carrying each GPU's bytes; ``bound_seconds`` is the max-flow bound (the LP's
    optimum, latencies left out) for ``lp`` and the route's own for ``direct``."""

    planner: str
    parts: tuple[BulkPart, ...]
    bound_seconds: float

    def tasks(self) -> list[Transfer]:
        """Transfers for the simulator; the ``lp`` split caps each part at its LP rate, so the
        simulator runs the LP's flow rather than its own max-min shares."""
        capped = self.planner == "lp" and self.bound_seconds > 0
        return [
            Transfer(
                f"{part.gpu}.{n}",
                part.devices[0],
                part.devices[-1],
                part.bytes,
                route=part.devices,
                max_rate=part.bytes / self.bound_seconds if capped else None,
            )
            for n, part in enumerate(self.parts)
            if part.bytes > 0
        ]


def plan_bulk(topology: Topology, src: str, gpus: list[str], nbytes: float, planner: str) -> BulkPlan:
    """``nbytes`` from ``src`` to each of ``gpus`` at once.

    Args:
        topology: the host.
        src: the source device (a CPU: host memory).
        gpus: the target devices, each once.
        nbytes: bytes for each target (> 0).
        planner: ``direct`` (each GPU's route) or ``lp``: the split over every GPU's candidate paths
            (:func:`~commgraph.plan.paths.candidate_paths`) minimising the time ``T`` by which all
            arrive, every link direction (and every switch with a forwarding limit) carrying at most
            its bandwidth x ``T``, all GPUs' parts together.

    Returns:
        The parts and the plan's bound in seconds.

    Raises:
        PlanError: an unknown planner, ``nbytes <= 0``, a GPU named twice, or the LP failing.
    """
    if planner not in BULK_PLANNERS:
        raise PlanError(f"unknown bulk planner {planner!r}; choose from {', '.join(BULK_PLANNERS)} or all")
    if not nbytes > 0:
        raise PlanError(f"--bytes must be > 0, got {nbytes}")
    if not gpus or len(set(gpus)) != len(gpus):
        raise PlanError(f"give each target GPU once, got {gpus}")
    per_gpu = {gpu: candidate_paths(topology, src, gpu) for gpu in gpus}
    if planner == "direct":
        parts = tuple(BulkPart(gpu, paths[0].devices, nbytes) for gpu, paths in per_gpu.items())
        return BulkPlan("direct", parts, _bound(topology, parts))
    columns = [(gpu, p.devices) for gpu, paths in per_gpu.items() for p in paths]
    counts = _resource_counts(topology, [devices for _, devices in columns])  # [resources, columns]
    capacity = _capacities(topology)
    limited = np.isfinite(capacity) & (counts.sum(axis=1) > 0)
    n = len(columns)
    # variables: each column's share of a GPU's bytes, then T (seconds)
    objective = np.concatenate([np.zeros(n), [1.0]])
    a_ub = np.hstack([counts[limited], -(capacity[limited] / nbytes)[:, None]])
    a_eq = np.zeros((len(gpus), n + 1))
    for j, (gpu, _) in enumerate(columns):
        a_eq[gpus.index(gpu), j] = 1.0
    result = linprog(
        objective,
        A_ub=a_ub,
        b_ub=np.zeros(a_ub.shape[0]),
        A_eq=a_eq,
        b_eq=np.ones(len(gpus)),
        bounds=[(0, None)] * (n + 1),
        method="highs",
    )
    if result.status != 0:
        raise PlanError(f"the bulk-split LP failed: {result.message}")
    parts = tuple(
        BulkPart(gpu, devices, float(share * nbytes))
        for (gpu, devices), share in zip(columns, result.x[:n])
        if share > 1e-9
    )
    return BulkPlan("lp", parts, float(result.x[n]))


def _capacities(topology: Topology) -> np.ndarray:
    """Bytes per second of each link direction, then of each device (a forwarding limit, or none)."""
    links = np.repeat([link.bandwidth_gbps * 1e9 for link in topology.links], 2)
    devices = np.array([d.forward_gbps * 1e9 if d.forward_gbps else np.inf for d in topology.devices])
    return np.concatenate([links, devices])


def _resource_counts(topology: Topology, routes: list[tuple[str, ...]]) -> np.ndarray:
    """[resources, routes]: how many times each route crosses each link direction, and each device
    it forwards through (intermediate devices)."""
    counts = np.zeros((2 * len(topology.links) + len(topology.devices), len(routes)))
    for j, devices in enumerate(routes):
        for a, b in zip(devices, devices[1:]):
            k = max(topology.links_between(a, b), key=lambda i: topology.links[i].bandwidth_gbps)
            counts[2 * k + (0 if topology.links[k].a == a else 1), j] += 1
        for device in devices[1:-1]:
            counts[2 * len(topology.links) + topology.index[device], j] += 1
    return counts


def _bound(topology: Topology, parts: tuple[BulkPart, ...]) -> float:
    """The time the busiest resource needs for everything the parts put on it."""
    load = _resource_counts(topology, [p.devices for p in parts]) @ np.array([p.bytes for p in parts])
    return float((load / _capacities(topology)).max())
