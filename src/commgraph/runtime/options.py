"""What a job is given, light to import (no torch): its topology and plan options
(:class:`JobOptions`, the same flags in every command that runs a job), whether the environment
already describes a world to join (:func:`in_torchrun`), and the variables that hand a user's
script its launcher's options."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commgraph.errors import JobError
from commgraph.options import DATA_ENV as DATA_ENV  # the launcher's workers' variable, named here too
from commgraph.options import Options, option
from commgraph.plan.choose import PLAN_CHOICES
from commgraph.plan.exchange import ORDERINGS
from commgraph.topology import DETECT, SPEED_KEYS, parse_speeds

if TYPE_CHECKING:
    from commgraph.partition import PartitionSet
    from commgraph.topology.model import Topology

# ``commgraph run`` hands its ``--timeout`` and ``--device`` to the ranks in these variables, which
# :func:`commgraph.pyg.init` reads as its defaults
TIMEOUT_ENV = "COMMGRAPH_TIMEOUT"
DEVICE_ENV = "COMMGRAPH_DEVICE"
# ``commgraph run --memory-budget`` hands its budget (bytes) to the ranks in this variable, which
# :class:`commgraph.pyg.NeighborLoader` reads as its default ``memory_budget``
MEMORY_BUDGET_ENV = "COMMGRAPH_MEMORY_BUDGET"
# the store key a rank of ``commgraph run`` writes when its script calls ``commgraph.pyg.init``
INIT_KEY = "commgraph/bridge-init/"
# our launcher hands its ranks their options as data (JSON) under this key of the job's store, and
# sets :data:`commgraph.options.DATA_ENV` to 1 in their environment (:func:`commgraph.runtime.launch.job_data`)
DATA_KEY = "commgraph/job-data"


@dataclass(frozen=True)
class JobOptions(Options):
    """How a job communicates: ``--topology``, ``--speeds``, ``--plan``, ``--placement`` and
    ``--ordering``, the same flags in every command that runs a job."""

    error = JobError
    topology: str = option(
        "detect (this machine: its GPUs, else one CPU worker per rank), a preset (commgraph topo "
        "list) or a topology YAML (e.g. from commgraph topo calibrate)",
        metavar="TOPOLOGY",
        default=DETECT,
    )
    speeds: str | None = option(
        f"override a preset's link speeds in GB/s, e.g. nv2=40,pcie=24 (keys: {SPEED_KEYS})",
        metavar="K=GBPS,...",
        default=None,
    )
    plan: str = option(
        "the all-gather plan of the job's exchanges: auto (the one the simulator prices fastest), "
        "a planner, or a plan file from `commgraph plan`",
        metavar="|".join(PLAN_CHOICES) + "|FILE.json",
        default="auto",
    )
    placement: str | None = option(
        "the topology device of each worker, comma-separated (default: its worker devices in order)",
        metavar="DEV,DEV,...",
        default=None,
    )
    ordering: str = option(
        "how messages are matched: tagged (any order; Gloo), ordered (in plan order, as "
        "NCCL needs), or auto (ordered on NCCL, else tagged)",
        choices=("auto", *ORDERINGS),
        default="auto",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.plan not in PLAN_CHOICES and Path(self.plan).suffix not in (".json", ".npz"):
            self.refuse(
                f"plan {self.plan!r}: choose one of {', '.join(PLAN_CHOICES)} or a file (.json or .npz) "
                "that `commgraph plan` wrote",
                "plan",
            )
        parse_speeds(self.speeds)


@dataclass(frozen=True)
class JobSite:
    """What the launcher knows of a job before its workers start, from which it decides what the
    job's options leave ``auto``.

    Args:
        options: the job's options as the launcher resolved them (its plan and topology files).
        pset: the partition set, one part per rank.
        topology: the topology the job's plans are made on.
        devices: rank ``r``'s device on ``topology``.
        device: ``cuda`` or ``cpu``, every rank's.
        free_bytes: each of this machine's GPUs' free memory (None: a CPU job, or not known).
    """

    options: JobOptions
    pset: PartitionSet
    topology: Topology
    devices: list[str]
    device: str
    free_bytes: tuple[int, ...] | None = None


def in_torchrun() -> bool:
    """True when the environment already describes a world to join (torchrun or our launcher)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))
