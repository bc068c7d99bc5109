"""``Job``: one worker's share of a distributed job over a partition set, the one context every
consumer (training, prediction, analytics) opens, as DGL's ``initialize()`` and ``DistGraph`` are.

A job is set up in the same steps whoever runs it:

1. the worker's part of the partition set, checked against the world (one part per rank);
2. its :class:`~commgraph.runtime.Communicator`;
3. the topology (:func:`~commgraph.topology.resolve_topology`); ``detect`` under torchrun across
   machines joins every machine's own topology with a network switch (its first rank detects it),
   the ranks of a machine on its worker devices in rank order;
4. the placement (the topology device of each rank) and, asked for a row width, the all-gather
   plan the job's exchanges follow (:func:`~commgraph.plan.choose.choose_allgather`), with the
   message matching (``ordered`` on NCCL, else ``tagged``);
5. runners of that plan (:meth:`layerwise`, :meth:`binned`) and the gradient all-reduce
   (:meth:`allreduce`).

A new consumer is ``Job(world, partition_dir, options)`` and the calls it needs.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from commgraph.errors import JobError
from commgraph.logs import get_logger
from commgraph.partition import PartitionSet, load_partition_set
from commgraph.plan.allgather import placement
from commgraph.plan.choose import AllReduceChoice, PlanChoice, choose_allgather, choose_job_allreduce, parse_placement
from commgraph.plan.exchange import Exchange
from commgraph.plan.model import CommPlan
from commgraph.runtime.comm import Communicator, match_ordering
from commgraph.runtime.grads import GradientSync
from commgraph.runtime.halo import layerwise
from commgraph.runtime.options import JobOptions
from commgraph.runtime.stream import ExchangeRunner
from commgraph.runtime.world import World
from commgraph.topology import DETECT, Topology, join_hosts, parse_speeds, resolve_topology

log = get_logger(__name__)


@dataclass(frozen=True)
class Wiring:
    """How a job's exchanges run: the all-gather ``plan``, the plan device of each rank
    (``devices[rank]``), how messages are matched (``tagged`` or ``ordered``), and the
    ``choice`` that picked the plan (its modelled seconds, the other planners' prices)."""

    plan: CommPlan
    devices: list[str]
    ordering: str
    choice: PlanChoice


class Job:
    """One worker's job (see the module docstring).

    Args:
        world: this process's place in the job (:func:`~commgraph.runtime.join`, or
            :meth:`World.alone <commgraph.runtime.World.alone>` for one process).
        partition: the partition set (its directory, or the set loaded), one part per rank.
        options: topology, plan, placement and message matching.
    """

    def __init__(self, world: World, partition: str | Path | PartitionSet, options: JobOptions = JobOptions()):
        self.world, self.options = world, options
        # every worker checks its own files
        self.pset = partition if isinstance(partition, PartitionSet) else load_partition_set(partition)
        if self.pset.num_parts != world.size:
            raise JobError(
                f"{self.pset.path} has {self.pset.num_parts} parts but the job has {world.size} workers; "
                f"use --workers {self.pset.num_parts} or re-partition"
            )
        self.part = self.pset.part(world.rank)
        self.comm = Communicator(world)
        if world.size > 1:
            self._check_one_set()
        self.ordering = match_ordering(options.ordering, world.backend)
        self.topology, self.placement = self._topology()
        self.devices = placement(self.pset, self.topology, parse_placement(self.placement))
        self._machine: np.ndarray | None = None
        log.debug(
            f"commgraph: job: rank {world.rank} of {world.size} on {world.device} reads part {world.rank} of "
            f"{self.pset.path} ({self.part.num_owned} nodes, {self.part.num_halo} halo rows), topology "
            f"{self.topology.name}"
        )

    def _check_one_set(self) -> None:
        """Every rank must read the same partition set (agents of a multi-machine job each name
        their own copy): refuse, on every rank, before any work."""
        every = self.comm.all_gather_object((self.pset.digest, str(self.pset.path)))
        other = next((r for r, (digest, _) in enumerate(every) if digest != every[0][0]), None)
        if other is not None:
            raise JobError(
                f"rank {other} joined with partition set {every[other][1]}, whose files differ from rank "
                f"0's {every[0][1]}: give every agent the same set (or a copy of it)"
            )

    @property
    def device(self) -> torch.device:
        return self.world.device

    def machine_ranks(self) -> np.ndarray:
        """The ranks on this rank's machine (itself included), which map the same partition set
        files: one host name and torchrun ``GROUP_RANK`` (so the agents of an emulated multi-machine
        job on one host are machines of their own). A collective, cached."""
        if self._machine is None:
            here = (socket.gethostname(), os.environ.get("GROUP_RANK", "0"))
            places = self.comm.all_gather_object(here) if self.world.size > 1 else [here]
            self._machine = np.array([r for r, place in enumerate(places) if place == here], dtype=np.int64)
        return self._machine

    def _topology(self) -> tuple[Topology, str | None]:
        """The topology the plans are made for, and the placement (given, or the joined one)."""
        options, world = self.options, self.world
        speeds = parse_speeds(options.speeds)
        if options.topology != DETECT or world.size == 1:
            return resolve_topology(
                options.topology, workers=world.size, device=world.device.type, speeds=speeds
            ), options.placement
        places = self.comm.all_gather_object(socket.gethostname())
        hosts = list(dict.fromkeys(places))
        if len(hosts) == 1:
            return resolve_topology(
                DETECT, workers=world.size, device=world.device.type, speeds=speeds
            ), options.placement
        here = [r for r, host in enumerate(places) if host == places[world.rank]]
        mine = (
            resolve_topology(DETECT, workers=len(here), device=world.device.type, speeds=speeds).to_dict()
            if here[0] == world.rank
            else None
        )
        local = {
            places[r]: Topology.from_dict(t) for r, t in enumerate(self.comm.all_gather_object(mine)) if t is not None
        }
        workers = {host: [d.id for d in local[host].workers] for host in hosts}
        nth = [places[:r].count(host) for r, host in enumerate(places)]  # the rank's place on its machine
        joined = ",".join(f"{host}/{workers[host][k]}" for host, k in zip(places, nth))
        return join_hosts([(host, local[host]) for host in hosts]), options.placement or joined

    def wire(self, row_bytes: int) -> Wiring:
        """The all-gather plan the job's exchanges of ``row_bytes``-byte rows follow. A plan file was
        checked by the launcher; each rank checks its own share as it builds its exchange."""
        choice = choose_allgather(
            self.options.plan, self.pset, self.topology, row_bytes, parse_placement(self.placement), verify=False
        )
        return Wiring(choice.plan, choice.devices, self.ordering, choice)

    def exchange(self, plan: CommPlan, owned: np.ndarray, halo: np.ndarray) -> Exchange:
        """This rank's share of ``plan`` over table rows ``owned`` (global ids, in table order),
        then ``halo``."""
        return Exchange.from_plan(plan, self.world.rank, self.devices, np.asarray(owned), np.asarray(halo))

    def layerwise(self, exchange: Exchange) -> ExchangeRunner:
        """A runner of ``exchange`` with every owned row in one bin."""
        return layerwise(self.comm, exchange, self.device, self.ordering)

    def binned(self, exchange: Exchange, edges: np.ndarray) -> ExchangeRunner:
        """A runner of ``exchange`` streamed bin by bin (``edges``: the bins' row boundaries)."""
        return ExchangeRunner(self.comm, exchange, edges, self.device, self.ordering)

    def allreduce(self, spec: str, nbytes: int) -> AllReduceChoice:
        """The gradient all-reduce ``spec`` names (``native``, a planner or ``auto``) for ``nbytes``."""
        return choose_job_allreduce(spec, self.topology, self.devices, nbytes)

    def gradient_sync(self, params: list[torch.nn.Parameter], choice: AllReduceChoice) -> GradientSync:
        """Sums ``params``' gradients over the workers as ``choice`` says."""
        return GradientSync(
            params, self.comm, choice.schedule, devices=self.devices if choice.schedule is not None else None
        )
