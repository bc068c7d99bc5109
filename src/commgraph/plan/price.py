"""Pricing a plan: run it through the flow-level simulator on the topology it was made for
(stages in order, the sends of a stage concurrent).

Where a device has a measured ``copy_gbps``, the row copies the runtime makes are priced too: a
send of rows (``ids``) is gathered into one message by its sender and scattered into the table by
its receiver. A device's gathers for a stage are one computation on the device before its sends
leave, and its scatters one computation after all its receives of the stage have landed.
Sends of opaque bytes (all-reduce) copy nothing."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from commgraph.plan.methods import METHODS
from commgraph.plan.model import CommPlan
from commgraph.sim import Compute, Transfer, progress, simulate
from commgraph.topology import Topology


def _method_terms(send, topology: Topology) -> tuple[float, float | None]:
    """(overhead, rate cap) of the send's transfer method; plain sends have neither."""
    if send.method is None:
        return 0.0, None
    method = METHODS[send.method]
    hops = topology.route(send.src, send.dst)
    bottleneck = min((topology.links[h.link].bandwidth_gbps for h in hops), default=np.inf)
    cap = None if method.efficiency >= 1.0 else method.efficiency * bottleneck * 1e9
    return method.overhead_s, cap


def _copies(stage, topology: Topology, side: str) -> dict[str, float]:
    """Seconds each device spends copying the rows of a stage's sends (``side``: ``src`` gathers,
    ``dst`` scatters), for devices with a measured copy rate."""
    seconds: dict[str, float] = defaultdict(float)
    for send in stage:
        device = topology.device(getattr(send, side))
        if send.ids is not None and device.copy_gbps is not None and send.src != send.dst:
            seconds[device.id] += send.nbytes / (device.copy_gbps * 1e9)
    return dict(seconds)


def steady_seconds(sends, topology: Topology) -> float:
    """The busiest link direction's bytes over its bandwidth: how long a stage of ``sends`` takes
    when they all advance together (latencies left out)."""
    load = np.zeros(2 * len(topology.links))
    for send in sends:
        hops = (
            topology.route(send.src, send.dst)
            if not send.route
            else [h for x, y in zip(send.route, send.route[1:]) for h in topology.route(x, y)]
        )
        for hop in hops:
            load[hop.resource] += send.nbytes
    capacity = np.repeat([link.bandwidth_gbps * 1e9 for link in topology.links], 2)
    return float(np.max(load / capacity)) if len(load) else 0.0


def _paced(plan: CommPlan, stage, topology: Topology) -> float | None:
    """A pipelined all-reduce stage (one stage, not executed rounds) advances every tree and ring
    together, each at its share of the data: its sends are paced to finish in the stage's steady
    time (a cap on each send's rate) instead of sharing links max-min fairly and finishing apart.
    So do the all-gather and reduce-scatter of :mod:`commgraph.plan.gather` (``notes["pipelined"]``)."""
    pipelined = plan.kind == "allreduce" or plan.notes.get("pipelined")
    if not pipelined or plan.notes.get("rounds") or len(plan.stages) != 1:
        return None
    return steady_seconds(stage, topology) or None


def price(plan: CommPlan, topology: Topology) -> dict:
    """The modelled time of ``plan`` on ``topology``: its stages in order on the flow-level
    simulator (:func:`commgraph.sim.simulate`), each stage's sends concurrent, max-min fair
    sharing of every link direction, priority classes strict; row copies priced where devices
    have a measured ``copy_gbps`` (the module's description).

    Args:
        plan: the plan, made for ``topology``.
        topology: the hardware.

    Returns:
        dict: ``modeled_seconds`` (the makespan), ``bytes`` (:attr:`CommPlan.total_bytes`),
        ``stages``, ``stage_seconds`` (each stage's time), ``busiest_link`` (``link``, ``kind``,
        ``bytes``, ``busy_seconds``, or None) and ``links`` (a row per link direction used).
    """
    tasks: list[Transfer | Compute] = []
    barrier: tuple[str, ...] = ()
    anchor = topology.devices[0].id  # barriers are zero-second tasks; any device will do
    for i, stage in enumerate(plan.stages):
        gathers = _copies(stage, topology, "src")
        for device, seconds in gathers.items():
            tasks.append(Compute(f"gather{i}.{device}", device, seconds, barrier))
        names, into = [], defaultdict(list)
        paced = _paced(plan, stage, topology)
        for j, send in enumerate(stage):
            names.append(f"s{i}.{j}")
            into[send.dst].append(names[-1])
            deps = (f"gather{i}.{send.src}",) if send.src in gathers else barrier
            overhead, cap = _method_terms(send, topology)
            if paced is not None:
                cap = send.nbytes / paced * (1 + 1e-9)
            tasks.append(
                Transfer(
                    names[-1], send.src, send.dst, send.nbytes, send.priority, send.route or None, deps, overhead, cap
                )
            )
        scatters = _copies(stage, topology, "dst")
        for device, seconds in scatters.items():
            tasks.append(Compute(f"scatter{i}.{device}", device, seconds, tuple(into[device])))
        tasks.append(
            Compute(f"stage{i}", anchor, 0.0, tuple(names) + barrier + tuple(f"scatter{i}.{d}" for d in scatters))
        )
        barrier = (f"stage{i}",)
    if not tasks:
        return {
            "modeled_seconds": 0.0,
            "bytes": 0.0,
            "stages": 0,
            "stage_seconds": [],
            "busiest_link": None,
            "links": [],
        }
    progress.stage(f"pricing {plan.planner}")
    result = simulate(topology, tasks, timeline=False)
    rows = result.link_rows()
    busiest = max(rows, key=lambda row: row["busy_seconds"]) if rows else None
    ends = [result.finish[k] for k, t in enumerate(tasks) if t.id.startswith("stage")]
    return {
        "modeled_seconds": result.makespan,
        "bytes": plan.total_bytes,
        "stages": len(plan.stages),
        "stage_seconds": [b - a for a, b in zip([0.0, *ends[:-1]], ends)],
        "busiest_link": None
        if busiest is None
        else {
            "link": busiest["link"],
            "kind": busiest["kind"],
            "bytes": busiest["bytes"],
            "busy_seconds": busiest["busy_seconds"],
        },
        "links": rows,
    }
