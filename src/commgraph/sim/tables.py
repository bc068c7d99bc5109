"""The arrays the compiled event loop (:mod:`commgraph.sim.events`) reads and mutates: the flow
and task tables, the outcome, the loop's state, the index resource -> active flows and max-min
filling's scratch, with the functions that make them empty. Interpreted code only: the compiled
functions live in :mod:`commgraph.sim.events` (numba's disk cache of a function is refreshed only
when its own file changes)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Index(NamedTuple):
    """Binding resource -> active flows, kept incrementally. Resource ``r``'s active flows are
    ``flow[first[r] : first[r] + count[r]]``. Flow ``f``'s binding route entries have the slots
    ``slot_ptr[f]`` onwards, one each in route order; ``entry`` holds, beside each active flow, its
    slot, and ``slot[s]`` is where slot ``s`` sits among its resource's active flows while its flow is
    active."""

    first: np.ndarray
    flow: np.ndarray
    entry: np.ndarray
    count: np.ndarray
    slot: np.ndarray
    slot_ptr: np.ndarray


def make_index(flows: Flows) -> Index:
    """An empty index with room for every flow's binding resources at once."""
    n_res, n_rows = flows.binding.shape[0], flows.ptr.shape[0] - 1
    lengths = np.diff(flows.ptr)
    row = np.repeat(np.arange(n_rows), lengths)
    ahead = np.arange(flows.resources.shape[0]) < flows.bound[row]  # a row's binding entries
    row_flows = np.bincount(flows.path, minlength=n_rows)  # flows per row
    first = np.zeros(n_res + 1, dtype=np.int64)
    first[1:] = np.cumsum(np.bincount(flows.resources[ahead], weights=row_flows[row[ahead]], minlength=n_res))
    slot_ptr = np.zeros(flows.path.shape[0] + 1, dtype=np.int64)
    np.cumsum((flows.bound - flows.ptr[:-1])[flows.path], out=slot_ptr[1:])
    n = int(first[-1])
    return Index(
        first=first,
        flow=np.empty(n, dtype=np.int64),
        entry=np.empty(n, dtype=np.int64),
        count=np.zeros(n_res, dtype=np.int64),
        slot=np.full(int(slot_ptr[-1]), -1, dtype=np.int64),
        slot_ptr=slot_ptr,
    )


class Scratch(NamedTuple):
    """:func:`~commgraph.sim.events.fill`'s working arrays: per resource its residual capacity,
    the weights (``counts``) and number (``unfrozen``) of its unfrozen flows, and room for the
    resources in play and the saturated ones; per flow its filling state (``flag``:
    :data:`~commgraph.sim.events.UNFROZEN` while its rate rises, else
    :data:`~commgraph.sim.events.SETTLED`), and room for those a round freezes."""

    residual: np.ndarray
    counts: np.ndarray
    unfrozen: np.ndarray
    flag: np.ndarray
    live: np.ndarray
    saturated: np.ndarray
    frozen: np.ndarray


def make_scratch(n_res: int, n_flows: int) -> Scratch:
    return Scratch(
        residual=np.empty(n_res),
        counts=np.zeros(n_res),
        unfrozen=np.zeros(n_res, np.int64),
        flag=np.zeros(n_flows, np.int64),
        live=np.empty(n_res, np.int64),
        saturated=np.empty(n_res, np.int64),
        frozen=np.empty(n_flows, np.int64),
    )


class Flows(NamedTuple):
    """Routes as rows (``ptr``, ``resources``, the share of a flow's rate on each: ``weights``);
    per flow its row (``path``; None outside the event loop when row ``f`` is flow ``f``'s),
    size, latency, class, task, owner (its data flow for a setup flow, -1 for a data flow) and
    setup-flow count; per resource: capacity, and whether it can limit a rate (``binding``; a
    resource whose capacity the others imply only counts its busy time: its load is above zero
    while one of its flows has a rate above zero); per row, where its binding resources end
    (``bound``: a row lists them first, ``ptr[p]:bound[p]``, then the others up to
    ``ptr[p + 1]``)."""

    ptr: np.ndarray
    resources: np.ndarray
    weights: np.ndarray
    sizes: np.ndarray
    latency: np.ndarray
    priority: np.ndarray
    task_of: np.ndarray
    owner: np.ndarray
    setups: np.ndarray
    capacity: np.ndarray
    binding: np.ndarray
    bound: np.ndarray
    path: np.ndarray | None


class Tasks(NamedTuple):
    """Per task: computation or transfer, seconds and device (computations), data flow (transfers),
    dependents (CSR ``dep_ptr``, ``dep_idx``) and dependency count; per device: servers and the
    room of its ready queue (CSR ``queue_ptr``)."""

    compute: np.ndarray
    seconds: np.ndarray
    device: np.ndarray
    flow: np.ndarray
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    waiting: np.ndarray
    cores: np.ndarray
    queue_ptr: np.ndarray


class Outcome(NamedTuple):
    """Per task start and finish, per resource busy seconds, and the utilisation change points
    (time, resource, utilisation; empty unless recorded)."""

    start: np.ndarray
    finish: np.ndarray
    busy: np.ndarray
    record_time: np.ndarray
    record_resource: np.ndarray
    record_utilisation: np.ndarray


class State(NamedTuple):
    """What the loop mutates: the clock, per flow its rate, lazy byte count and projected finish (a
    heap indexed by flow), per resource its load and busy time, per task its times, per device its
    queue, and scratch (epoch stamps)."""

    time: np.ndarray  # [now]
    rates: np.ndarray
    left: np.ndarray  # bytes left at `since`
    since: np.ndarray
    due: np.ndarray  # the heap of projected finishes: times, their flows, per flow its entry (-1: none)
    due_flow: np.ndarray
    due_at: np.ndarray
    due_count: np.ndarray  # [entries]
    setting_up: np.ndarray
    load: np.ndarray
    positive: np.ndarray  # per resource: its flows with a rate above zero
    busy: np.ndarray
    busy_since: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    waiting: np.ndarray
    running: np.ndarray  # computations running per device
    queue: np.ndarray
    queue_head: np.ndarray
    queue_tail: np.ndarray
    changed: np.ndarray  # [count, resources...] changed since the last reallocation
    changed_mark: np.ndarray
    marks: np.ndarray  # [epoch]
    res_mark: np.ndarray
    flow_mark: np.ndarray
    touched: np.ndarray
    picked: np.ndarray
    old_rates: np.ndarray
    scratch: Scratch
