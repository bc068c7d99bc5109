"""The launcher's own options, and ``commgraph run``'s, light to import (no torch): a command's parser is
built from them."""

from __future__ import annotations

from dataclasses import dataclass

from commgraph.errors import JobError
from commgraph.options import Options, option
from commgraph.partition import METHODS
from commgraph.units import size

DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class LaunchOptions(Options):
    """The launcher's own options, the same flags in every command that runs a job."""

    error = JobError
    workers: int | None = option(
        "local worker processes, one per part (default: the partition set's parts, else 1); "
        "ignored under torchrun, which sets the world size",
        type=int,
        default=None,
    )
    partition: str = option("how to split a GRAPH into parts", choices=METHODS, default="g3")
    partition_seed: int = option(
        "seed of the partitioner's random choices when a GRAPH is partitioned (--seed leaves the partition as it is)",
        type=int,
        default=0,
    )
    partition_dir: str | None = option(
        "where to keep the partition set of a GRAPH (default: a cache under $COMMGRAPH_HOME/partitions)",
        metavar="DIR",
        default=None,
    )
    timeout: float = option(
        "seconds any exchange may wait, and any set-up phase (loading, partitioning, checking the set, planning, "
        "each rank's start, join and set-up) may take, before the job stops",
        type=float,
        default=120.0,
    )
    device: str = option(
        "auto: one GPU per worker with NCCL if there are GPUs, else CPU with Gloo", choices=DEVICES, default="auto"
    )
    threads: int | None = option("compute threads per worker (default: cores / local workers)", type=int, default=None)
    quiet: bool = option("no progress bar or progress lines; only the result", type=bool, default=False)
    dry_run: bool = option(
        "check the job as a run would (partition set, workers, checkpoint, masks), print the memory "
        "it will hold per worker and per machine, by part, and exit without starting workers "
        "(--format json: one JSON object)",
        type=bool,
        default=False,
    )
    ignore_memory: bool = option(
        "start even when the memory estimate exceeds what the machine has available", type=bool, default=False
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.workers is not None and self.workers < 1:
            self.refuse("workers must be >= 1", "workers")
        if not self.timeout > 0:
            self.refuse("timeout must be positive", "timeout")
        if self.threads is not None and self.threads < 1:
            self.refuse("threads must be >= 1", "threads")


@dataclass(frozen=True)
class RunOptions(Options):
    """``commgraph run``'s options: how many ranks to start on this machine, and what each rank's
    :func:`commgraph.pyg.init` takes by default."""

    error = JobError
    workers: int = option("ranks to start on this machine (the job's WORLD_SIZE)", type=int, metavar="N")
    device: str = option(
        "what cg.init() runs on: auto (one GPU per rank with NCCL if there are enough, else CPU with Gloo), "
        "cpu or cuda",
        choices=DEVICES,
        default="auto",
    )
    threads: int | None = option(
        "compute threads per rank, as OMP_NUM_THREADS (default: cores / workers)", type=int, default=None
    )
    timeout: float = option(
        "seconds any collective may wait, and a rank may take to reach and finish cg.init(), before the job "
        "stops; cg.init's default, given to the ranks as COMMGRAPH_TIMEOUT",
        type=float,
        default=300.0,
    )
    dry_run: bool = option(
        "print the job (ranks, device, topology) and, for each partition set among the script's arguments, "
        "its memory estimate and halo exchange, and exit",
        type=bool,
        default=False,
    )
    ignore_memory: bool = option(
        "start even when the memory estimate exceeds what the machine has available", type=bool, default=False
    )
    memory_budget: int | None = option(
        "bytes the whole job may hold on this machine, page cache included (K/M/G suffixes: 8G, 512M), as train's: "
        "checked before launch against each partition set among the script's arguments, the job run in a memory "
        "cgroup where the machine allows one, and cg.NeighborLoader's default memory_budget (docs/out-of-core.md)",
        type=size,
        metavar="SIZE",
        default=None,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.workers < 1:
            self.refuse("workers must be >= 1", "workers")
        if self.memory_budget is not None and self.memory_budget < 1:
            self.refuse("memory_budget must be a size > 0, such as 8G", "memory_budget")
        if not self.timeout > 0:
            self.refuse("timeout must be positive", "timeout")
        if self.threads is not None and self.threads < 1:
            self.refuse("threads must be >= 1", "threads")
