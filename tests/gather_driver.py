"""Test helper run as every rank of a local job: all-gathers and reduce-scatters random tensors with
the ``ring`` and ``lp`` schedules of commgraph.plan.gather, executed by ScheduledAllReduce, and
writes what this rank saw.

Usage (through ``launch_local(..., module="gather_driver")``): ``python -m gather_driver SPEC.json``,
the spec naming an output folder, a topology (rank r on its r-th worker), the tensor sizes and the
chunk size. The gathered tensor of a size is uniform in [0, 1) from seed size, rank r's
reduce-scatter input from seed (r, size). Rank r writes ``<out>/rank<r>.json``: per case
(``collective/planner/size``) the largest error of its result (the whole gathered tensor; its own
shard of the sum).
"""

import json
import sys
from pathlib import Path

import torch

from commgraph.plan import allreduce_schedule
from commgraph.plan.gather import plan_collective
from commgraph.runtime import Communicator, ScheduledAllReduce, join
from commgraph.runtime.allreduce import shard_bounds
from commgraph.topology import load_topology


def uniform(seed: int, size: int) -> torch.Tensor:
    return torch.rand(size, generator=torch.Generator().manual_seed(seed))


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    torch.set_num_threads(1)
    world = join(60, "cpu")
    comm = Communicator(world)
    topology = load_topology(spec["topology"])
    devices = [d.id for d in topology.workers]
    me, result = devices[world.rank], {}
    for collective in ("allgather", "reducescatter"):
        for planner in ("ring", "lp"):
            schedule = allreduce_schedule(plan_collective(collective, planner, topology, 4e6))
            executor = ScheduledAllReduce(schedule, devices, comm, spec["chunk_bytes"])
            for size in spec["sizes"]:
                lo, hi = shard_bounds(schedule, size)[me]
                if collective == "allgather":
                    want = uniform(size, size)
                    data = torch.zeros(size)
                    data[lo:hi] = want[lo:hi]
                    executor.start(data).wait()
                    error = float((data - want).abs().max())
                else:
                    data = uniform(1000 * size + world.rank, size)
                    want = sum(uniform(1000 * size + r, size) for r in range(world.size))
                    executor.start(data).wait()
                    error = float((data[lo:hi] - want[lo:hi]).abs().max() / want[lo:hi].abs().max()) if hi > lo else 0.0
                result[f"{collective}/{planner}/{size}"] = error
    Path(spec["out"], f"rank{world.rank}.json").write_text(json.dumps(result))
    world.close()


if __name__ == "__main__":
    main()
