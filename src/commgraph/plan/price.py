"""Pricing a plan: run it through the flow-level simulator on the topology it was made for
(stages in order, the sends of a stage concurrent)."""

from __future__ import annotations

import numpy as np

from commgraph.plan.methods import METHODS
from commgraph.plan.model import CommPlan
from commgraph.sim import Compute, Transfer, simulate
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


def price(plan: CommPlan, topology: Topology) -> dict:
    """Modelled seconds, bytes and busy time per link direction, the busiest link, per-stage time."""
    tasks: list[Transfer | Compute] = []
    barrier: tuple[str, ...] = ()
    anchor = topology.devices[0].id  # barriers are zero-second tasks; any device will do
    for i, stage in enumerate(plan.stages):
        names = []
        for j, send in enumerate(stage):
            names.append(f"s{i}.{j}")
            tasks.append(Transfer(names[-1], send.src, send.dst, send.nbytes, send.priority,
                                  send.route or None, barrier, *_method_terms(send, topology)))
        tasks.append(Compute(f"stage{i}", anchor, 0.0, tuple(names) + barrier))
        barrier = (f"stage{i}",)
    if not tasks:
        return {"modeled_seconds": 0.0, "bytes": 0.0, "stages": 0, "stage_seconds": [], "busiest_link": None,
                "links": []}
    result = simulate(topology, tasks, timeline=False)
    rows = result.link_rows()
    busiest = max(rows, key=lambda row: row["busy_seconds"]) if rows else None
    ends = [result.finish[k] for k, t in enumerate(tasks) if isinstance(t, Compute)]
    return {
        "modeled_seconds": result.makespan,
        "bytes": plan.total_bytes,
        "stages": len(plan.stages),
        "stage_seconds": [b - a for a, b in zip([0.0, *ends[:-1]], ends)],
        "busiest_link": None if busiest is None else {"link": busiest["link"], "kind": busiest["kind"],
                                                      "bytes": busiest["bytes"],
                                                      "busy_seconds": busiest["busy_seconds"]},
        "links": rows,
    }
