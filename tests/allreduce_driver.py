"""Test helper run as every rank of a local job: all-reduces the same random tensors with torch's
all_reduce and with every planned schedule, and writes what this rank saw.

Usage (through ``launch_local(..., module="allreduce_driver")``): ``python -m allreduce_driver
SPEC.json``, the spec naming an output folder, the topologies (``{"name", "reverse"}``: rank r runs
on the topology's (a preset's or a YAML file's) r-th worker, or the r-th from the end), the tensor
sizes and the chunk size. Rank r's tensors are uniform in [0, 1) from seed (r, size). All sizes of a
planner are started at once and waited for together, as the gradient sync does with its buckets.
Rank r writes
``<out>/rank<r>.json``: per case (``topology/planner/size``) the largest error relative to native and
the bytes charged to ``comm.bytes["allreduce"]``; per topology the error of an ``lp`` ``GradientSync``
of a small model (several buckets) against the native one; and the message of the PlanError a gradient
sync with a schedule for another number of workers gets.
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from commgraph.errors import PlanError
from commgraph.plan import PLANNERS, make_allreduce
from commgraph.runtime import Communicator, GradientSync, ScheduledAllReduce, join
from commgraph.topology import load_preset, load_topology


def tensor(rank: int, size: int) -> torch.Tensor:
    return torch.rand(size, generator=torch.Generator().manual_seed(1000 * size + rank))


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest elementwise error relative to the value (the tensors are sums of positive numbers)."""
    return float(((got - want).abs() / want.abs()).max())


def scaled_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest error relative to the largest value (gradients have either sign)."""
    return float((got - want).abs().max() / want.abs().max())


def gradients(model: torch.nn.Module, sync: GradientSync, rank: int) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    x = torch.rand(16, 32, generator=torch.Generator().manual_seed(rank))
    model(x).square().sum().backward()
    sync.finish()
    return [p.grad.clone() for p in model.parameters()]


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    torch.set_num_threads(1)
    world = join(60, "cpu")
    comm = Communicator(world)
    result = {"cases": {}, "sync": {}}
    for case in spec["topologies"]:
        topology = load_topology(case["name"])
        devices = [d.id for d in topology.workers][:: -1 if case["reverse"] else 1]
        native = {}
        for size in spec["sizes"]:
            native[size] = tensor(world.rank, size)
            dist.all_reduce(native[size], group=world.grad_group)
        for planner in PLANNERS["allreduce"]:
            executor = ScheduledAllReduce(make_allreduce(planner, topology, 4e6), devices, comm, spec["chunk_bytes"])
            before = comm.bytes["allreduce"]
            tensors = {size: tensor(world.rank, size) for size in spec["sizes"]}
            works = [executor.start(t) for t in tensors.values()]
            for work in works:
                work.wait()
            for size, t in tensors.items():
                result["cases"][f"{case['name']}/{planner}/{size}"] = {"error": relative_error(t, native[size])}
            result["cases"][f"{case['name']}/{planner}/bytes"] = comm.bytes["allreduce"] - before
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3)
        )
        want = gradients(model, GradientSync(list(model.parameters()), comm, bucket_bytes=8192), world.rank)
        sync = GradientSync(
            list(model.parameters()),
            comm,
            make_allreduce("lp", topology, 4e6),
            devices=devices,
            bucket_bytes=8192,
            chunk_bytes=1024,
        )
        got = gradients(model, sync, world.rank)
        result["sync"][case["name"]] = {
            "buckets": len(sync.buckets),
            "error": max(scaled_error(g, w) for g, w in zip(got, want)),
        }
    wrong = make_allreduce("lp", load_preset(f"localhost-cpu:{world.size + 1}"), 4e6)
    try:
        GradientSync(list(model.parameters()), comm, wrong)
    except PlanError as exc:
        result["refused"] = str(exc)
    Path(spec["out"], f"rank{world.rank}.json").write_text(json.dumps(result))
    world.close()


if __name__ == "__main__":
    main()
