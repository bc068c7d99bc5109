"""Coflow schedulers for LLM training: each maps a DAG's coflows to strict priority classes of the
flow-level simulator (class 0 first, max-min sharing within a class), and may rewrite the flows of
an all-to-all into matching sub-phases (:mod:`commgraph.plan.matching`).

- ``megatron``: vanilla Megatron-LM: one class (the fabric serves flows FIFO-fairly, no priorities)
  and each rank's DP collectives serialised on its one communication stream, in the order the rank
  issues them: a DP coflow's flow from a rank starts after that rank's previous DP coflow sent and
  received its part.
- ``fair``: one class, per-flow max-min sharing, every DP coflow free to run at once (a reference,
  not a published system).
- ``lina``: expert-parallel all-to-all first, everything else after (Li et al., ATC'23). Lina
  partitions DP all-reduces into small chunks so that an all-to-all preempts them at a chunk
  boundary; the flow model's strict priority preempts at once, the limit of that partitioning.
- ``dp-first``, ``pp-first``, ``ep-first``: Table 5.2's naive heuristics: that type's coflows in
  one class above every other coflow, per-flow max-min sharing within each class.
- ``varys``: smallest effective bottleneck first (SEBF) with MADD rates: a coflow's bottleneck
  :math:`\\Gamma = \\max_{port} bytes_{port} / B_{port}`; coflows in ascending Γ, each flow capped at
  ``bytes / Γ`` so all of a coflow's flows finish together (Chowdhury et al., SIGCOMM'14).
- ``sincronia``: Bottleneck-Select-Scale-Iterate over the ports' loads, unit weights (Agarwal et al.,
  SIGCOMM'18), one class per coflow in its order.
- ``hermod``: microbatch ID, then coflow type (EP & PP before DP; EP before PP before DP for
  interleaved 1F1B), then layer ID, lower first (thesis-dgs-g3-hermod-leo, Tables 5.3-5.4), one class
  per distinct key. DP coflows carry the last microbatch's ID, so against an EP or PP coflow of their
  iteration the type decides; among DP coflows, the lower layer goes first. Table 5.4's rule where DP
  is present across iterations: a DP coflow of iteration ``k`` is "micro-batch 0" of iteration
  ``k + 1`` and there the layer ID decides (ties to DP): it runs after every coflow of iteration
  ``k``, before micro-batch 0's coflows of its layer and above, after those of lower layers. A strict
  order cannot also put it after later micro-batches' lower layers (the pairwise rule is not
  transitive there); it goes before them, as MID says.
- ``hermod-dscp``: the same key in 6 bits as deployed: 3 bits microbatch (capped at 7), 1 bit type
  (DP or not), 2 bits layer quartile.

The offline orders (varys, sincronia) see every coflow of the iteration at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from commgraph.errors import PlanError
from commgraph.plan.matching import MATCHERS
from commgraph.plan.phases import copy_transfer, split_all_to_alls
from commgraph.sim.coflow import Coflow, check_coflows
from commgraph.sim.dag import Task, Transfer
from commgraph.topology.model import Topology

SCHEDULERS = (
    "megatron",
    "fair",
    "lina",
    "dp-first",
    "pp-first",
    "ep-first",
    "varys",
    "sincronia",
    "hermod",
    "hermod-dscp",
)
FIRST = {"dp-first": "dp", "pp-first": "pp", "ep-first": "ep"}  # Table 5.2's heuristics: the type they favour
MATCHINGS = ("direct", *MATCHERS)


@dataclass(frozen=True)
class Schedule:
    """The DAG as one scheduler runs it: tasks with priorities (and split all-to-alls), and the
    coflows pointing at them."""

    name: str
    tasks: list[Task]
    coflows: list[Coflow]
    classes: int


def schedule(
    name: str,
    tasks: list[Task],
    coflows: list[Coflow],
    topology: Topology,
    *,
    interleaved: bool = False,
    matching: str | None = None,
) -> Schedule:
    """Priorities of ``name`` for every coflow; ``matching`` (default ``alg3`` for the Hermod
    schedulers, ``direct`` otherwise) says how expert-parallel all-to-alls send."""
    if name not in SCHEDULERS:
        raise PlanError(f"unknown scheduler {name!r}; choose one of {', '.join(SCHEDULERS)}")
    check_coflows(tasks, coflows)
    matching = matching or ("alg3" if name.startswith("hermod") else "direct")
    if matching not in MATCHINGS:
        raise PlanError(f"unknown matching {matching!r}; choose one of {', '.join(MATCHINGS)}")
    rates = None
    if name in ("fair", "megatron"):
        classes = np.zeros(len(coflows), dtype=np.int64)
    elif name == "lina":
        classes = _first("ep", coflows)
    elif name in FIRST:
        classes = _first(FIRST[name], coflows)
    elif name == "varys":
        bottleneck = _bottlenecks(tasks, coflows, topology)
        classes = _dense_rank(bottleneck)
        rates = bottleneck
    elif name == "sincronia":
        classes = bssi_order(tasks, coflows)
    else:
        keys = hermod_keys(coflows, interleaved=interleaved)
        classes = _dense_rank_rows(keys) if name == "hermod" else dscp(keys, _layers(coflows), interleaved=interleaved)
    if name == "megatron":
        tasks = one_stream(tasks, coflows)
    new_tasks, new_coflows = _apply(tasks, coflows, classes, rates, matching)
    return Schedule(name, new_tasks, new_coflows, int(classes.max(initial=-1)) + 1)


# -- Hermod ----------------------------------------------------------------------------------------


def hermod_keys(coflows: list[Coflow], *, interleaved: bool = False) -> np.ndarray:
    """Rows ``(microbatch, type rank, layer)``: Table 5.3's factors, compared in that order, behind
    an iteration column and with a last column that breaks Table 5.4's DP ties when a DAG holds
    several iterations (module docstring). One iteration gives the three factors alone."""
    rank = {"ep": 0, "tp": 0, "pp": 1 if interleaved else 0, "dp": 2 if interleaved else 1}
    iterations = _iterations(coflows)
    rows = []
    for c in coflows:
        if c.kind == "dp" and c.iteration + 1 < iterations:  # micro-batch 0 of the next iteration,
            rows.append((c.iteration + 1, 0, 0, c.layer, 0))  # lowest type: the layer decides
        else:
            rows.append((c.iteration, c.microbatch, rank[c.kind], c.layer, 0 if c.kind == "dp" else 1))
    keys = np.array(rows, dtype=np.int64).reshape(-1, 5)
    return keys[:, 1:4] if iterations == 1 else keys


def dscp(keys: np.ndarray, layers: int, *, interleaved: bool = False) -> np.ndarray:
    """6-bit DSCP classes of :func:`hermod_keys` rows: ``mid[3] | dp[1] | layer quartile[2]`` (the
    iteration does not fit in the 6 bits and is dropped)."""
    keys = keys[:, 1:4] if keys.shape[1] == 5 else keys
    mid = np.minimum(keys[:, 0], 7)
    is_dp = keys[:, 1] == (2 if interleaved else 1)
    quartile = np.minimum(keys[:, 2] * 4 // max(layers, 1), 3)
    return (mid << 3) | (is_dp.astype(np.int64) << 2) | quartile


def _iterations(coflows: list[Coflow]) -> int:
    return max((c.iteration for c in coflows), default=0) + 1


# -- Megatron-LM -----------------------------------------------------------------------------------


def one_stream(tasks: list[Task], coflows: list[Coflow]) -> list[Task]:
    """Megatron-LM's one communication stream per rank for DP: DP coflows over the same ranks run
    in the order they appear (the order ranks issue them); a rank's flow of one waits for that
    rank's flows, out and in, of the one before."""
    out = list(tasks)
    previous: dict[frozenset, dict[str, list[str]]] = {}
    for coflow in coflows:
        if coflow.kind != "dp":
            continue
        flows = [tasks[i] for i in coflow.flows]
        group = frozenset(f.src for f in flows) | frozenset(f.dst for f in flows)
        before = previous.get(group, {})
        for i, f in zip(coflow.flows, flows):
            extra = tuple(before.get(f.src, ()))
            if extra:
                out[i] = replace(f, deps=tuple(dict.fromkeys((*f.deps, *extra))))
        mine: dict[str, list[str]] = {}
        for f in flows:
            mine.setdefault(f.src, []).append(f.id)
            mine.setdefault(f.dst, []).append(f.id)
        previous[group] = mine
    return out


def _first(kind: str, coflows: list[Coflow]) -> np.ndarray:
    """Class 0 for the coflows of ``kind``, class 1 for the rest."""
    return np.array([0 if c.kind == kind else 1 for c in coflows], dtype=np.int64)


def _layers(coflows: list[Coflow]) -> int:
    return max((c.layer for c in coflows), default=0) + 1


def _dense_rank_rows(keys: np.ndarray) -> np.ndarray:
    if not keys.size:
        return np.zeros(0, dtype=np.int64)
    _, inverse = np.unique(keys, axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def _dense_rank(values: np.ndarray) -> np.ndarray:
    return np.unique(values, return_inverse=True)[1].astype(np.int64).reshape(-1)


# -- Varys and Sincronia -----------------------------------------------------------------------------


def _port_loads(tasks: list[Task], coflows: list[Coflow], topology: Topology | None = None) -> sp.csr_matrix:
    """Coflows x ports (a device's egress, then its ingress): seconds at the port's bottleneck rate
    (bytes when ``topology`` is None)."""
    devices: dict[str, int] = {}
    rows, cols, values = [], [], []
    for c, coflow in enumerate(coflows):
        for i in coflow.flows:
            task = tasks[i]
            rate = _route_rate(topology, task) if topology is not None else 1.0
            for port in (
                2 * devices.setdefault(task.src, len(devices)),
                2 * devices.setdefault(task.dst, len(devices)) + 1,
            ):
                rows.append(c), cols.append(port), values.append(task.bytes / rate)
    return sp.csr_matrix((values, (rows, cols)), shape=(len(coflows), 2 * len(devices)))


def _route_rate(topology: Topology, task: Transfer) -> float:
    hops = topology.route(task.src, task.dst)
    return min((topology.links[h.link].bandwidth_gbps for h in hops), default=np.inf) * 1e9


def _bottlenecks(tasks: list[Task], coflows: list[Coflow], topology: Topology) -> np.ndarray:
    loads = _port_loads(tasks, coflows, topology)
    if not loads.shape[1]:  # no coflow moves a byte (pp = dp = 1): nothing is a bottleneck
        return np.zeros(len(coflows))
    return np.asarray(loads.max(axis=1).todense()).reshape(-1)


def bssi_order(tasks: list[Task], coflows: list[Coflow]) -> np.ndarray:
    """Sincronia's BSSI: find the most loaded port; of the coflows on it, the one with the largest
    load per weight goes last; the others' weights shrink by its weight times their load ratio;
    repeat on what is left. Returns each coflow's position (0 first)."""
    loads = _port_loads(tasks, coflows)
    by_port = loads.tocsc()
    total = np.asarray(loads.sum(axis=0)).reshape(-1)
    weight = np.ones(len(coflows))
    left = np.ones(len(coflows), dtype=bool)
    position = np.empty(len(coflows), dtype=np.int64)
    for slot in range(len(coflows) - 1, -1, -1):
        port = int(np.argmax(total))
        on = by_port.indices[by_port.indptr[port] : by_port.indptr[port + 1]]
        load = by_port.data[by_port.indptr[port] : by_port.indptr[port + 1]]
        keep = left[on] & (load > 0)
        on, load = on[keep], load[keep]
        if not on.size:  # only empty coflows are left
            rest = np.flatnonzero(left)
            position[rest] = np.arange(slot - rest.size + 1, slot + 1)
            break
        pick = int(np.argmin(weight[on] / load))
        last = on[pick]
        weight[on] -= weight[last] * load / load[pick]
        position[last] = slot
        left[last] = False
        row = slice(loads.indptr[last], loads.indptr[last + 1])
        np.subtract.at(total, loads.indices[row], loads.data[row])
    return position


# -- turning classes into tasks ----------------------------------------------------------------------


def _apply(
    tasks: list[Task], coflows: list[Coflow], classes: np.ndarray, bottleneck: np.ndarray | None, matching: str
) -> tuple[list[Task], list[Coflow]]:
    out = list(tasks)
    for c, coflow in enumerate(coflows):
        priority = int(classes[c])
        for i in coflow.flows:
            task = tasks[i]
            cap = (
                task.bytes / bottleneck[c] if bottleneck is not None and bottleneck[c] > 0 and task.bytes > 0 else None
            )
            out[i] = copy_transfer(task, priority=priority, max_rate=cap)
    if matching == "direct":
        return out, list(coflows)
    return split_all_to_alls(out, coflows, matching)
