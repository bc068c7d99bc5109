"""Simulator fidelity: measured exchanges beside the simulator's price on a calibrated topology.

For each worker count the machine is calibrated first (``commgraph.runtime.calibrate``, the same
probes as ``commgraph topo calibrate``), then real worker processes run, on Gloo:

- the halo exchange of every layer (``gather_halo``: the plan's rows copied out, sent, copied in)
  of Cora and of an SBM graph, partitioned with g3, rows of ``--width`` float32 (256: 1 KB), for the
  ``p2p`` and ``spst`` plans (planned on the calibrated topology, where spst may fall back to p2p);
- all-reduce of 1, 10 and 100 MB: torch's own ``dist.all_reduce`` (Gloo's algorithm, priced by
  ``native_seconds``: the calibration's own all-reduce fit, or as our ring where a topology has
  none), and the executed ring and tree schedules of ``commgraph.runtime.allreduce``, each priced
  round by round as it runs (``rounds_plan``: every round pays its messages' latency and overhead).

Each case is timed ``--repeats`` times after :data:`WARMUPS` untimed runs, all ranks starting together after a barrier;
a repeat's time is the slowest rank's, and the table gives the median and the spread (fastest and
slowest repeat). Beside it: ``commgraph.plan.price`` of the same plan on the ``localhost-cpu:N``
preset (before calibration), on the calibrated topology without its per-message overheads,
row-copy rates and all-reduce fit (bandwidth and latency only) and on the calibrated topology
itself. The target is the last one within +-25% of the median for every case that moves 1 MB or more
in total.

    .venv/bin/python benchmarks/sim_fidelity.py [--quick] [--repeats 7]

``--quick``: 2 and 4 workers, all-reduce of 1 and 10 MB, 5 repeats. Every rank of a run is this same
file, started by the local launcher with ``RANK`` set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from commgraph.graph import load_graph
from commgraph.partition import load_partition_set, partition_graph, partition_metrics, write_partition_set
from commgraph.plan import plan_allgather, price
from commgraph.plan.allreduce import allreduce_schedule, native_seconds, plan_allreduce
from commgraph.plan.exchange import Exchange
from commgraph.runtime import Communicator, gather_halo, in_torchrun, join, keep_freed_memory, launch_local, layerwise
from commgraph.runtime.allreduce import CHUNK_BYTES, ScheduledAllReduce, rounds_plan
from commgraph.runtime.calibrate import ProbeSpec, calibrate
from commgraph.topology import Topology, load_preset, read_yaml, write_yaml

GRAPHS = {"cora": "cora", "sbm": "sbm:nodes=20000,classes=8,features=16,seed=0"}
PLANNERS = ("p2p", "spst")
TARGET = 0.25
MIN_BYTES = 1e6
WARMUPS = 3  # untimed runs of a case first: a new pair's first messages set up its connection


def _native(world, comm, topology, nbytes):
    """torch's dist.all_reduce (Gloo's own algorithm)."""
    return lambda tensor: dist.all_reduce(tensor, group=world.grad_group)


def _scheduled(planner: str):
    """An executed schedule of commgraph.runtime.allreduce, priced round by round."""

    def make(world, comm, topology, nbytes):
        plan = plan_allreduce(planner, topology, nbytes)
        executor = ScheduledAllReduce(allreduce_schedule(plan), [d.id for d in topology.workers], comm)
        return lambda tensor: executor.start(tensor).wait()

    return make


# name -> (world, comm, topology, bytes) -> run(tensor); made on every rank
ALLREDUCE_EXECUTORS = {"native": _native, "ring": _scheduled("ring"), "tree": _scheduled("tree")}


# -- every rank --------------------------------------------------------------------------------------


def worker(job_path: str) -> None:
    job = json.loads(Path(job_path).read_text())
    keep_freed_memory()  # as the trainer does: buffers are reused, not faulted in every call
    world = join(job["timeout"], "cpu")
    comm = Communicator(world)
    topology = read_yaml(job["topology"])
    devices = [d.id for d in topology.workers]
    results = []

    def timed(case: dict, once) -> None:
        for _ in range(WARMUPS):
            once()
        times = []
        for _ in range(job["repeats"]):
            dist.barrier(group=world.grad_group)
            start = time.perf_counter()
            once()
            times.append(time.perf_counter() - start)
        slowest = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=world.grad_group)
        results.append({**case, "times": slowest.tolist()})

    for name, partdir in job["partitions"].items():
        pset = load_partition_set(partdir)
        part = pset.part(world.rank)
        owned, halo = np.asarray(part.owned), np.asarray(part.halo)
        for width in job["widths"]:
            rows = torch.randn(owned.shape[0], width)
            for planner in job["planners"]:
                plan = plan_allgather(planner, pset, topology, row_bytes=4 * width)
                exchange = Exchange.from_plan(plan, world.rank, devices, owned, halo)
                runner = layerwise(comm, exchange, rows.device, "tagged")
                case = {"graph": name, "planner": planner, "width": width}
                timed(case, lambda: gather_halo(runner, rows, layer=1))
    for nbytes in job["allreduce_bytes"]:
        tensor = torch.ones(int(nbytes) // 4)
        for executor in job["executors"]:
            run = ALLREDUCE_EXECUTORS[executor](world, comm, topology, nbytes)
            timed({"graph": "all-reduce", "planner": executor, "bytes": nbytes}, lambda: run(tensor))
    if world.is_leader:
        Path(job["out"]).write_text(json.dumps(results))
    world.close()


# -- the parent: calibrate, partition, launch, price -----------------------------------------------


def partitions(workers: int, folder: Path, graphs: dict[str, str]) -> dict[str, str]:
    """Each of ``graphs`` (name -> spec) partitioned with g3 into ``workers`` parts under ``folder``
    (a set already there is kept)."""
    result = {}
    for name, spec in graphs.items():
        path = folder / f"{name}-{workers}"
        result[name] = str(path)
        if path.exists():
            continue
        graph = load_graph(spec)
        assignment, _ = partition_graph(graph, workers, "g3", 0)
        write_partition_set(
            graph,
            assignment,
            workers,
            path,
            method="g3",
            seed=0,
            seconds=0.0,
            metrics=partition_metrics(graph, assignment, workers),
        )
    return result


def links_only(topology: Topology) -> Topology:
    """The calibrated topology without per-message overheads and copy rates: bandwidth and latency."""
    return Topology(
        f"{topology.name}-links-only",
        [replace(d, copy_gbps=None) for d in topology.devices],
        [replace(link, overhead_us=0.0) for link in topology.links],
    )


def run_workers(
    workers: int,
    args,
    folder: Path,
    calibrated: Topology,
    graphs: dict[str, str] = GRAPHS,
    planners: tuple[str, ...] = PLANNERS,
) -> list[dict]:
    """Every case measured by ``workers`` processes (``args``: ``widths``, ``repeats``,
    ``allreduce_bytes``) beside its price on the preset, the links alone and ``calibrated``."""
    topology_path = folder / f"calibrated-{workers}.yaml"
    write_yaml(calibrated, topology_path)
    job = {
        "partitions": partitions(workers, folder, graphs),
        "topology": str(topology_path),
        "widths": args.widths,
        "planners": list(planners),
        "repeats": args.repeats,
        "allreduce_bytes": args.allreduce_bytes,
        "executors": list(ALLREDUCE_EXECUTORS),
        "timeout": 300,
        "out": str(folder / f"measured-{workers}.json"),
    }
    (folder / "job.json").write_text(json.dumps(job))
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    if launch_local([str(folder / "job.json")], workers, grace=30, module="sim_fidelity") != 0:
        raise SystemExit(f"the {workers}-worker measurement failed")
    measured = json.loads(Path(job["out"]).read_text())
    psets = {name: load_partition_set(path) for name, path in job["partitions"].items()}
    models = {
        "preset": load_preset(f"localhost-cpu:{workers}"),
        "no_overhead": links_only(calibrated),
        "calibrated": calibrated,
    }
    rows = []
    for case in measured:
        predicted = {}
        for label, topology in models.items():
            if case["planner"] == "native":
                predicted[label], moved = native_seconds(topology, case["bytes"]), case["bytes"]
                continue
            if case["graph"] == "all-reduce":  # priced round by round, as it runs
                schedule = allreduce_schedule(plan_allreduce(case["planner"], topology, case["bytes"]))
                plan = rounds_plan(schedule, [d.id for d in topology.workers], case["bytes"], CHUNK_BYTES["gloo"])
                moved = case["bytes"]
            else:
                plan = plan_allgather(case["planner"], psets[case["graph"]], topology, row_bytes=4 * case["width"])
                moved = plan.total_bytes
            predicted[label] = price(plan, topology)["modeled_seconds"]
        times = np.array(case["times"])
        rows.append(
            {
                "case": case["graph"],
                "planner": case["planner"],
                "width": case.get("width"),
                "workers": workers,
                "bytes": moved,
                "measured": float(np.median(times)),
                "low": float(times.min()),
                "high": float(times.max()),
                **predicted,
            }
        )
    return rows


def print_table(rows: list[dict]) -> None:
    print(
        "\n| case | plan | workers | MB | measured ms (spread) | preset ms (ratio) | bw+latency ms (ratio) "
        "| calibrated ms (ratio) | within +-25% |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratios = {k: r[k] / r["measured"] for k in ("preset", "no_overhead", "calibrated")}
        counted = r["bytes"] >= MIN_BYTES
        verdict = ("yes" if abs(ratios["calibrated"] - 1) <= TARGET else "**no**") if counted else "(< 1 MB)"
        print(
            f"| {r['case']} | {r['planner']} | {r['workers']} | {r['bytes'] / 1e6:.2f} | "
            f"{r['measured'] * 1e3:.2f} ({r['low'] * 1e3:.2f}-{r['high'] * 1e3:.2f}) | "
            + " | ".join(f"{r[k] * 1e3:.2f} ({ratios[k]:.2f})" for k in ("preset", "no_overhead", "calibrated"))
            + f" | {verdict} |"
        )
    counted = [r for r in rows if r["bytes"] >= MIN_BYTES]
    hits = sum(abs(r["calibrated"] / r["measured"] - 1) <= TARGET for r in counted)
    print(
        f"\n{hits}/{len(counted)} cases of 1 MB or more within +-25% on the calibrated topology "
        f"(preset: {sum(abs(r['preset'] / r['measured'] - 1) <= TARGET for r in counted)}/{len(counted)})"
    )


def main() -> None:
    if in_torchrun():
        worker(sys.argv[1])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default=None, help="worker counts, e.g. 2,4,8 (default; --quick: 2,4)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per case (default 9; --quick 5)")
    parser.add_argument("--width", type=int, default=256, help="floats per embedding row (default 256)")
    parser.add_argument("--quick", action="store_true", help="2 and 4 workers, all-reduce up to 10 MB, 5 repeats")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    counts = [int(w) for w in (args.workers or ("2,4" if args.quick else "2,4,8")).split(",")]
    args.repeats = args.repeats or (5 if args.quick else 9)
    args.widths = [args.width]
    args.allreduce_bytes = [1e6, 1e7] if args.quick else [1e6, 1e7, 1e8]
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="commgraph-fidelity-") as folder:
        for workers in counts:
            print(f"{workers} workers: calibrating", file=sys.stderr, flush=True)
            calibrated = calibrate(workers, ProbeSpec(repeats=args.repeats), device="cpu").topology()
            print(f"{workers} workers: measuring", file=sys.stderr, flush=True)
            rows += run_workers(workers, args, Path(folder), calibrated)
    print_table(rows)
    print(f"\n({time.perf_counter() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
