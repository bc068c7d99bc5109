"""``commgraph run``'s launcher: a user's own script as ``workers`` ranks on this machine, each
given the environment torchrun gives (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ``OMP_NUM_THREADS``), so that the script's
:func:`commgraph.pyg.init` joins them into one job.

Before any rank starts, every argument of the script that is a partition set's directory (as
given, or the value of ``--name=VALUE``) is checked against the workers (one part each) and its
memory estimated as a full-graph training job of ``train``'s default model
(:func:`~commgraph.plan.memory.estimate_memory`); a job that cannot fit is refused. Under
``--memory-budget`` the estimate is sampled training's of that model (``train``'s default batch and
fanouts: what a budget streams is a sampled loader's features), and the budget gets ``train
--memory-budget``'s checks: refused below a set's minimum, warned about above the machine's
memory, the job run in a memory cgroup of that limit where one can be made (one line saying the
code keeps it otherwise), and handed to the ranks as ``COMMGRAPH_MEMORY_BUDGET``, the default
``memory_budget`` of :class:`~commgraph.pyg.NeighborLoader`. ``--dry-run``
prints what is known before launch and exits: the job (ranks, device and backend, the topology
``cg.full_graph`` plans on by default), and for each set its memory estimate and the exchange
``cg.full_graph`` makes before each ``MessagePassing`` layer (the halo rows, and their price by the
plan the simulator picks: layer 0 at the set's feature width, a hidden layer at ``train``'s default
width). The script's model and loop are not known before it runs, so its step time is not
predicted. The ranks are forked from a warmed interpreter where that is safe, fresh
interpreters where not (:func:`~commgraph.runtime.launch_local`), and each runs the script through
:mod:`commgraph.launch.script_rank`, which reports an uncaught exception to the job's store.

How the job ends: a rank that raises or exits non-zero stops the others (they get
:data:`~commgraph.runtime.launch.STOP_SECONDS`, then they are killed) and is named with its
reason, ``rank 1 failed: ValueError: boom (train.py, line 12)``; the job's exit code is that
rank's (1 for an exception or a signal). A job whose ranks all exit 0 without one having called
:func:`commgraph.pyg.init` is refused as a script not written for it. A rank's code before its
:func:`commgraph.pyg.init`, and the join itself, may each take ``--timeout`` seconds
(:mod:`commgraph.phases`); from the join on, each collective is bounded by it.
"""

from __future__ import annotations

from pathlib import Path

from commgraph.errors import BridgeError, JobError
from commgraph.launch.launcher import check_budget, check_fits, enforce_budget, warn_above_machine
from commgraph.launch.options import RunOptions
from commgraph.logs import get_logger
from commgraph.partition import PartitionSet, is_partition_set, load_partition_set
from commgraph.phases import bounded
from commgraph.plan.memory import JobShape, MemoryEstimate, estimate_memory
from commgraph.render import render
from commgraph.render.runs import script_report
from commgraph.runtime.options import DEVICE_ENV, MEMORY_BUDGET_ENV, TIMEOUT_ENV
from commgraph.runtime.zygote import ForkedZygote
from commgraph.topology.model import Topology

BACKENDS = {"cpu": "Gloo", "cuda": "NCCL"}
RANK_MODULE = "commgraph.launch.script_rank"  # what each rank runs: the script, its failure reported
ADVICE = "use a machine with more memory, or fewer workers with a partition set of as many parts"

log = get_logger(__name__)


def run_script(options: RunOptions, script: str, args: list[str], output: str = "text") -> int:
    """Run ``python SCRIPT ARGS...`` as ``options.workers`` ranks (``--dry-run``: print the memory
    estimates instead, in ``output``, one of :data:`~commgraph.render.FORMATS`); the job's exit code.

    Raises:
        BridgeError: SCRIPT does not exist, or its ranks never called :func:`commgraph.pyg.init`.
        JobError: a partition set among ARGS has not one part per worker, or the job would not fit
            in this machine's memory.
    """
    if not Path(script).exists():
        raise BridgeError(f"{script}: no such script")
    if options.dry_run:
        print(render(script_report(dry_run(options, args)), output))
        return 0
    zygote = ForkedZygote.fork()  # before any work: it shares this process's imports
    try:
        with bounded("estimating memory", options.timeout):
            found = estimates(options.workers, args, options.memory_budget)
        check_run_budget(options, found)
        for estimate in found.values():
            check_fits(estimate, options, ADVICE)
        return _launch(options, script, args, zygote)
    finally:
        if zygote is not None and zygote.returncode is None and not zygote.started:
            zygote.discard()


def _launch(options: RunOptions, script: str, args: list[str], zygote: ForkedZygote | None) -> int:
    """Start the ranks (forked by ``zygote`` if given) and watch them; the job's exit code."""
    from commgraph.runtime import launch_local, pick_device

    device = pick_device(options.device, options.workers, say=log.warning)
    budget = options.memory_budget
    cap = None if budget is None else enforce_budget(budget, zygote, say)
    env = {TIMEOUT_ENV: str(options.timeout), DEVICE_ENV: device}
    try:
        return launch_local(
            [script, *args],
            options.workers,
            threads_per_worker=options.threads,
            module=RANK_MODULE,
            zygote=zygote,
            env=env if budget is None else {**env, MEMORY_BUDGET_ENV: str(budget)},
            verdict=verdict,
            phase_seconds=options.timeout,
        )
    finally:
        if cap is not None:
            cap.release()


def say(line: str) -> None:
    log.warning(line)


def check_run_budget(options: RunOptions, found: dict[Path, MemoryEstimate]) -> None:
    """``--memory-budget``'s checks before launch: refused below a set's minimum, warned about
    above the machine's memory (also with no set among the arguments).

    Raises:
        JobError: the budget is below a set's minimum.
    """
    if options.memory_budget is None:
        return
    for estimate in found.values():
        check_budget(estimate, say, ADVICE)
    if not found:
        warn_above_machine(options.memory_budget, say)


def partition_sets(args: list[str]) -> list[Path]:
    """The partition sets' directories among a script's arguments: an argument itself, or the
    value of ``--name=VALUE``."""
    values = [arg.partition("=")[2] if arg.startswith("-") else arg for arg in args]
    return [Path(value) for value in values if value and is_partition_set(value)]


def estimates(workers: int, args: list[str], budget: int | None = None) -> dict[Path, MemoryEstimate]:
    """The memory estimate of each partition set among ``args``, run by ``workers`` ranks here
    (under a ``budget``, sampled training's: see the module's description).

    Raises:
        JobError: a set has not one part per worker.
    """
    from commgraph.train.config import ModelOptions
    from commgraph.train.sampling_options import BATCH_SIZE, FANOUT

    model = ModelOptions()
    fanouts = (FANOUT,) * model.layers
    sampled = {} if budget is None else {"sampler": "neighbor", "batch_size": BATCH_SIZE, "fanouts": fanouts}
    found = {}
    for path in partition_sets(args):
        pset = load_partition_set(path, verify=False)
        if pset.num_parts != workers:
            raise JobError(
                f"{path} has {pset.num_parts} parts but the job has {workers} ranks: run with "
                f"--workers {pset.num_parts} or make a set of {workers} parts"
            )
        shape = JobShape(
            workers, workers, model.hidden, model.layers, model=model.model, memory_budget=budget, **sampled
        )
        found[path] = estimate_memory(pset, shape)
    return found


def dry_run(options: RunOptions, args: list[str]) -> dict:
    """What ``--dry-run`` prints, as data: the ``job`` (ranks, device, backend, threads, the
    topology ``cg.full_graph`` plans on), then each partition set's ``memory`` estimate and
    ``exchange`` (:func:`halo_exchange`); :func:`~commgraph.render.runs.script_report` renders it.

    Raises:
        JobError: a set has not one part per worker.
    """
    from commgraph.runtime import pick_device
    from commgraph.topology import resolve_topology

    device = pick_device(options.device, options.workers, say=log.warning)
    topology = resolve_topology("detect", workers=options.workers, device=device)
    job = {
        "ranks": options.workers,
        "device": device,
        "backend": BACKENDS[device],
        "threads": options.threads,
        "topology": topology.name,
    }
    found = estimates(options.workers, args, options.memory_budget)
    check_run_budget(options, found)
    how = "full-graph" if options.memory_budget is None else "sampled"
    sets = [
        {
            "path": str(path),
            "training": how,
            "memory": estimate.to_dict(),
            "exchange": halo_exchange(load_partition_set(path, verify=False), topology),
        }
        for path, estimate in found.items()
    ]
    return {"job": job, "sets": sets}


def halo_exchange(pset: PartitionSet, topology: Topology) -> dict:
    """The halo refresh ``cg.full_graph`` makes on ``pset`` before each ``MessagePassing`` layer
    (forward; its gradients go back the same rows): its ``halo_rows``, and per width (``layers``)
    one refresh priced by the plan the simulator picks on ``topology``, at the set's feature width
    and at ``train``'s default hidden width (none for a set of one part)."""
    from commgraph.plan.choose import choose_allgather
    from commgraph.train.config import ModelOptions

    rows = sum(pset.part(k, check=False).num_halo for k in range(pset.num_parts))
    features = pset.part(0, check=False).features
    widths = [] if features is None else [(int(features.shape[1]), "layer 0, the set's features")]
    layers = []
    for columns, what in [*widths, (ModelOptions().hidden, "a hidden layer")] if pset.num_parts > 1 else []:
        choice = choose_allgather("auto", pset, topology, 4 * columns)
        layers.append(
            {
                "layer": what,
                "columns": columns,
                "bytes": 4 * rows * columns,
                "modeled_seconds": choice.modeled_seconds,
                "planner": choice.plan.planner,
            }
        )
    return {"halo_rows": rows, "layers": layers}


def verdict(end) -> int:
    """The job's exit code from how it ended (a :class:`~commgraph.runtime.launch.JobEnd`): the
    first failed rank's, after naming it with its reason (a rank that never called
    :func:`commgraph.pyg.init` failed with exit code 2, saying so), else 0."""
    from commgraph.runtime.launch import describe_exit

    if end.failed is None:
        return 0
    rank, code = end.failed
    how = f"failed: {end.reason}" if end.reason else describe_exit(code)
    log.error(f"commgraph: error: rank {rank} {how}")
    return code if code > 0 else 1
