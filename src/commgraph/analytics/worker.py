"""One worker of a multi-process analytics job: its part of a partition set, its share of the job's
all-gather plan, and the runtime's executor moving boundary values (a column of float64 per row).

Owner -> halo is ``gather_halo`` of the plan (layer-wise, every message of the plan); halo -> owner
(summing, for whole-graph out-degrees) is the same plan's reverse direction, ``scatter_back``.
Iterations are separated by the program's all-reduce, so one message tag space serves them all.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from commgraph.analytics.job import Analysis, AnalyzeOptions, combine, execute, part_graph, stats_dict
from commgraph.phases import RUNNING
from commgraph.runtime import Communicator, ExchangeRunner, World, gather_halo, scatter_back
from commgraph.runtime.job import Job, JobOptions

ROW_BYTES = 8  # one float64 per boundary row
LAYER = 1  # the message tags' layer (0 is set-up)


class PlanBoundary:
    """The :class:`~commgraph.analytics.program.Boundary` of a worker of a job: the executor of its
    share of the job's all-gather plan."""

    def __init__(self, comm: Communicator, runner: ExchangeRunner):
        self.comm, self.runner = comm, runner
        exchange = runner.exchange
        rows = [m.index[m.index < exchange.num_owned] for m in exchange.sends]
        self.boundary_rows = np.unique(np.concatenate(rows)) if rows else np.empty(0, dtype=np.int64)

    def _tensor(self, values: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64)).view(-1, 1).to(self.runner.device)

    def exchange(self, owned: np.ndarray) -> np.ndarray:
        return gather_halo(self.runner, self._tensor(owned), LAYER).view(-1).cpu().numpy()

    def return_sum(self, halo: np.ndarray) -> np.ndarray:
        return scatter_back(self.runner, self._tensor(halo), LAYER).view(-1).cpu().numpy()

    def global_sum(self, values: list[float]) -> list[float]:
        return self.comm.global_sum(values)

    def sent_bytes(self) -> int:
        return int(sum(self.comm.bytes.values()))


def run_worker(world: World, partition_dir: Path, options: AnalyzeOptions, job_options: JobOptions) -> Analysis | None:
    """This rank's part of the job; rank 0 gets the whole :class:`Analysis` (the others None)."""
    job = Job(world, partition_dir, job_options)
    part = job.part
    num_nodes = int(job.pset.manifest["graph"]["num_nodes"])
    wiring = job.wire(ROW_BYTES)
    boundary = PlanBoundary(job.comm, job.layerwise(job.exchange(wiring.plan, part.owned, part.halo)))
    graph = part_graph(part, num_nodes, options)
    job.comm.barrier()  # set-up (loading, planning) is not the run's time
    world.report_phase(RUNNING)
    program, stats, seconds = execute(options, graph, boundary)
    reports = job.comm.all_gather_object(stats_dict(program, stats, seconds, np.asarray(part.owned)))
    return combine(options.algo, num_nodes, reports) if world.is_leader else None
