"""Test helper run as every rank of a local job: executes the all-gather plans of a partition set
on Gloo, forward and in reverse, and writes what this rank got.

Usage (through ``launch_local(..., module="exchange_driver")``): ``python -m exchange_driver SPEC.json``,
the spec naming the partition set, an output folder, the topology and the planners. Rows carry
their global id, so rank r writes ``<out>/<planner>-<ordering>-<r>.npz`` with the halo rows it
received (ids), the gradient it got back for each owned row when every halo row sends 1 back, the
bytes it sent and the rows the plan makes it send, and whether it relayed rows for others.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch

from commgraph.partition import load_partition_set
from commgraph.plan import plan_allgather
from commgraph.plan.exchange import Exchange
from commgraph.runtime import Communicator, gather_halo, join, layerwise, scatter_back
from commgraph.topology import load_preset


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    world = join(60, "cpu")
    pset = load_partition_set(spec["partdir"])
    part = pset.part(world.rank)
    topology = load_preset(spec["topology"])
    devices = [d.id for d in topology.workers][: pset.num_parts]
    owned, halo = np.asarray(part.owned), np.asarray(part.halo)
    for planner in spec["planners"]:
        plan = plan_allgather(planner, pset, topology, row_bytes=16)
        exchange = Exchange.from_plan(plan, world.rank, devices, owned, halo)
        for ordering in ("tagged", "ordered"):
            comm = Communicator(world)
            runner = layerwise(comm, exchange, torch.device("cpu"), ordering)
            rows = torch.from_numpy(np.stack([owned, -owned], axis=1).astype(np.float64))
            received = gather_halo(runner, rows, layer=1)
            grad = scatter_back(runner, torch.ones(exchange.num_halo, 2, dtype=torch.float64), layer=1)
            np.savez(
                Path(spec["out"]) / f"{planner}-{ordering}-{world.rank}.npz",
                received=received.numpy(),
                grad=grad.numpy(),
                relayed=any(m.relays for m in exchange.sends),
                sent_bytes=comm.bytes["halo_forward:1"],
                plan_rows=exchange.sent_rows(),
            )
    world.close()


if __name__ == "__main__":
    main()
