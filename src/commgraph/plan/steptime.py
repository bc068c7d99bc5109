"""What one training step of a job does, read from its partition set and options before it runs,
and its time priced (:mod:`commgraph.sim.steptime`).

The busiest worker's step, for a GNN of ``L`` layers from width ``F`` through ``H`` (GAT: ``H``
times its heads) to ``C`` classes:

- **full-graph**: every layer computes the largest part's owned rows from its in-edges; its table
  is the part and its halo. Layers ``1..L-1`` exchange their halo rows (and layer 0 too with
  ``--first-layer owner``: its owners' transforms), forward and again backward, each priced as one
  layer's all-gather on the plan (``plan_seconds``);
- **sampled**: a batch of ``B`` seeds with fanouts ``f_1..f_L``, its rows and edges by hop
  (:class:`SampledHops`) the mean of a few batches drawn before launch (a graph's degrees and its
  clustering decide how many distinct nodes a batch reaches, which no product of fanouts gives);
  its input rows are gathered (``4 F`` bytes a row), and where they come from other machines
  (``--peer-rows network``, or workers on several hosts) the remote share crosses the slowest link
  between two workers. On several workers each step first runs its request round,
  :data:`REQUEST_COLLECTIVES` collectives (:meth:`~commgraph.train.fetch.FeatureFetch.request`:
  every worker's counts and seeds gathered through ``all_gather_object``, itself an all-reduce of
  the payloads' sizes and an all-gather of the payloads), each priced at the topology's calibrated
  collective latency. An epoch runs the largest part's training nodes over ``B`` steps
  (``--steps-per-epoch`` caps them).

The busiest machine's workers share its cores (the cost model's ``cores``): a worker's threads
default to its share, and busy cores slow one another, beyond the cores taking turns
(:func:`~commgraph.topology.compute.contention`, with the cost model's measured ``corun``).

A layer aggregates at the narrower of its widths where the model transforms before it aggregates
(GCN, GraphSAGE, GAT: its output width), else at its input width (GIN).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from commgraph.errors import PlanError
from commgraph.nn.options import LINEAR_FIRST
from commgraph.partition import PartitionSet
from commgraph.plan.memory import JobShape, label_classes, part_sizes
from commgraph.sim.steptime import (
    LayerWork,
    StepTime,
    StepWork,
    collective_seconds,
    predict_step,
    threads_per_worker,
    work_terms,
)
from commgraph.topology.compute import DEFAULT_CORUN, ComputeModel, contention
from commgraph.topology.model import Topology

REQUEST_COLLECTIVES = 2  # a sampled step's request round: all_gather_object's size all-reduce, then its all-gather


@dataclass(frozen=True)
class SampledHops:
    """A sampled batch's mean sizes by hop from its seeds (hop 0 samples the seeds' neighbours):
    each hop's destinations, its table (the destinations, then the new sources drawn) and its edges."""

    destinations: tuple[float, ...]
    sources: tuple[float, ...]
    edges: tuple[float, ...]


def step_work(
    pset: PartitionSet,
    shape: JobShape,
    *,
    heads: int = 4,
    threads: int | None = None,
    steps_cap: int | None = None,
    cores: int = 1,
    machine_workers: int | None = None,
    corun: float = DEFAULT_CORUN,
    hops: SampledHops | None = None,
) -> StepWork:
    """The busiest worker's step of ``shape``'s job on ``pset`` (see the module's description), its
    machine's ``cores`` shared by ``machine_workers`` (default: the shape's), slowing one another
    ``corun`` times with every core busy; a sampled job's batch as ``hops`` measured it.

    Raises:
        PlanError: a sampled job without ``hops``, or hops that do not match its fanouts.
    """
    first = pset.part(0, check=False)
    width = int(first.features.shape[1])
    classes = label_classes(pset)
    widths = _widths(shape, width, classes, heads)
    machine_workers = shape.machine_workers if machine_workers is None else machine_workers
    threads = threads_per_worker(machine_workers, cores, threads)
    share = contention(machine_workers, cores, corun)
    if shape.sampler is None:
        sizes = [part_sizes(pset, k) for k in range(pset.num_parts)]
        owned = max(s[0] for s in sizes)
        local = max(s[0] + s[1] for s in sizes)
        edges = max(s[2] for s in sizes)
        layers = tuple(
            _layer(shape.model, edges, owned if (l == 0 and shape.first_layer == "owner") else local, owned, w, o)
            for l, (w, o) in enumerate(widths)
        )
        return StepWork(shape.model, layers, threads=threads, contention=share)
    if hops is None or len(hops.edges) != len(shape.fanouts):
        raise PlanError(
            f"a sampled step's work needs its batch measured hop by hop ({len(shape.fanouts)} hops): "
            "pass the SampledHops of a few drawn batches"
        )
    by_layer = list(zip(hops.destinations, hops.sources, hops.edges))[::-1]  # layer 0 reads the last hop
    layers = tuple(_layer(shape.model, e, src, dst, w, o) for (dst, src, e), (w, o) in zip(by_layer, widths))
    trained = max(int(np.count_nonzero(pset.part(k, check=False).train_mask)) for k in range(pset.num_parts))
    steps = max(1, math.ceil(trained / shape.batch_size))
    return StepWork(
        shape.model,
        layers,
        sampled=True,
        sampled_edges=float(sum(hops.edges)),
        gathered_bytes=4 * width * hops.sources[-1],
        gathered_rows=hops.sources[-1],
        threads=threads,
        steps=steps if steps_cap is None else min(steps, steps_cap),
        contention=share,
        collectives=REQUEST_COLLECTIVES if shape.workers > 1 else 0,
    )


def exchanged_layers(shape: JobShape) -> int:
    """Layers whose halo rows a full-graph step exchanges (each forward and backward)."""
    if shape.sampler is not None:
        return 0
    return shape.layers - 1 + (shape.first_layer == "owner")


def predict_job(
    pset: PartitionSet,
    shape: JobShape,
    model: ComputeModel,
    topology: Topology,
    devices: list[str],
    plan_seconds: float,
    allreduce_seconds: float | None,
    *,
    heads: int = 4,
    threads: int | None = None,
    steps_cap: int | None = None,
    hops: SampledHops | None = None,
) -> StepTime:
    """``shape``'s step on ``pset`` priced: compute, sampling and fetch by ``model``, the halo
    exchange as ``2 x exchanged_layers`` of the plan's one-layer ``plan_seconds``, the all-reduce as
    priced (None, not modelled: 0), and a sampled batch (``hops``) its request round at
    ``topology``'s collective latency and its remote rows across ``topology``; the busiest host of
    ``devices`` shares the model's cores among its workers."""
    busiest = max(Counter(topology.device(d).host for d in devices).values()) if devices else shape.machine_workers
    work = step_work(
        pset,
        shape,
        heads=heads,
        threads=threads,
        steps_cap=steps_cap,
        cores=model.machine_cores(),
        machine_workers=busiest,
        corun=model.corun,
        hops=hops,
    )
    halo = 2 * exchanged_layers(shape) * plan_seconds
    step = predict_step(work, model, halo, allreduce_seconds or 0.0, collective_seconds(topology))
    remote = _remote_fetch_seconds(work, shape, topology, devices)
    return StepTime(
        step.compute,
        step.sampling,
        step.feature_fetch + remote,
        step.halo_exchange,
        step.allreduce,
        step.steps,
        step.defaults,
    )


def _remote_fetch_seconds(work: StepWork, shape: JobShape, topology: Topology, devices: list[str]) -> float:
    """A sampled batch's rows owned on other machines (all other workers' with ``--peer-rows
    network``), across the slowest link between two of the job's workers on different hosts."""
    if shape.sampler is None or len(devices) < 2:
        return 0.0
    hosts = [topology.device(d).host for d in devices]
    remote_share = 1 - (1 if shape.peer_rows == "network" else hosts.count(hosts[0])) / len(devices)
    if remote_share <= 0:
        return 0.0
    other = next((d for d, h in zip(devices, hosts) if h != hosts[0]), devices[1])
    hops = topology.route(devices[0], other)
    seconds_per_byte = max(1 / (topology.links[h.link].bandwidth_gbps * 1e9) for h in hops)
    latency = sum(topology.links[h.link].latency_us for h in hops) * 1e-6
    return latency + work.gathered_bytes * remote_share * seconds_per_byte


def _widths(shape: JobShape, width: int, classes: int, heads: int) -> list[tuple[int, int]]:
    """Each layer's input and output widths."""
    hidden = shape.hidden * (heads if shape.model == "gat" else 1)
    ins = [width] + [hidden] * (shape.layers - 1)
    outs = [hidden] * (shape.layers - 1) + [classes]
    return list(zip(ins, outs))


def layer_terms(model: str, layers: list[tuple[float, float, float, int, int]]) -> tuple[float, float]:
    """The edge and row terms of ``model``'s layers, each given as (edges, sources, destinations,
    input width, output width)."""
    return work_terms(tuple(_layer(model, *layer) for layer in layers))


def _layer(model: str, edges: float, sources: float, destinations: float, width_in: int, width_out: int) -> LayerWork:
    """One layer's work: a model that transforms before it aggregates transforms its sources."""
    first = model in LINEAR_FIRST or model == "gat"
    aggregated = min(width_in, width_out) if model in LINEAR_FIRST else (width_out if model == "gat" else width_in)
    rows = sources if first and (model == "gat" or width_out < width_in) else destinations
    return LayerWork(float(edges), aggregated, float(rows), width_in, width_out)
