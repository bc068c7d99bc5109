"""The one launcher of multi-process jobs (``train``, ``predict``, ``analyze``).

A command builds a :class:`JobSpec` (what to run, on which graph, with which options) and a
``work`` function (what one rank does with its :class:`~commgraph.runtime.World` and partition
set), and calls :func:`launch`. The launcher then:

1. takes GRAPH as it is when it is a partition set's directory, else loads the graph and
   partitions it into a cached set (:mod:`commgraph.launch.cache`);
2. checks the set's structure (:meth:`~commgraph.partition.PartitionSet.validate`: dtypes, shapes,
   lengths, counts and id ranges), then its files' checksums, once, and that it has one part per
   worker;
3. resolves the topology (:func:`~commgraph.topology.resolve_topology`) and chooses or checks the
   job's all-gather plan once, before any worker starts, handing the workers the plan and the
   topology it was made on as files;
4. starts the workers, each running the same command on the partition set, and watches them
   (:func:`~commgraph.runtime.launch_local`: a dead worker stops the job, its rank named), and
   hands each worker its options as data through the job's store (:func:`received`: the
   launcher's options, the job's resolved ones and the command's, nothing to parse again).

Each of these phases, and each rank's own set-up phases, may take ``--timeout`` seconds
(:mod:`commgraph.phases`); one that overruns stops the job in one line naming it.

Under torchrun (or in a worker our launcher started) the same call is the worker's side: each
machine's local rank 0 partitions a GRAPH, the others wait for its set, and every rank joins the
world and runs ``work`` (:func:`~commgraph.launch.rank.run_rank`).
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from commgraph.errors import JobError
from commgraph.graph import Graph
from commgraph.launch.cache import cached_partition_set, partition_cache_entry
from commgraph.launch.cgroup import MemoryCap, cap_memory, job_cgroup_name
from commgraph.launch.options import LaunchOptions, RunOptions
from commgraph.logs import get_logger
from commgraph.options import DATA_ENV
from commgraph.partition import PartitionSet, is_partition_set, load_partition_set
from commgraph.phases import TIMEOUT_FIX, bounded
from commgraph.plan.allgather import placement
from commgraph.plan.choose import check_allreduce, choose_allgather, parse_placement
from commgraph.plan.memory import MemoryEstimate
from commgraph.render import render
from commgraph.render.runs import estimate_report
from commgraph.runtime.memory import release_free_memory
from commgraph.runtime.options import JobOptions, JobSite, in_torchrun
from commgraph.runtime.zygote import ForkedZygote
from commgraph.sim.steptime import StepTime
from commgraph.sizes import available_bytes, gpu_free_bytes, machine_bytes
from commgraph.topology import parse_speeds, resolve_topology, write_yaml
from commgraph.topology.resolve import DETECT

if TYPE_CHECKING:
    from commgraph.runtime import World
    from commgraph.topology.model import Topology

log = get_logger(__name__)


@dataclass
class JobSpec:
    """What a command asks the launcher to run.

    Args:
        command: the subcommand each worker runs (``train``, ``predict``, ``analyze``).
        graph: GRAPH as given: a partition set's directory, or what ``load`` loads.
        load: the graph GRAPH names, loaded (called only when GRAPH is not a partition set).
        launch: the launcher's options.
        job: the job's topology and plan options.
        row_bytes: bytes of one exchanged row, for choosing the plan once here (None: the job
            exchanges nothing per layer, and its options go to the workers as given).
        data: the command's options as JSON-ready data: each worker receives them, with the
            launcher's options and the job's resolved ones, through the job's store (:func:`received`).
        resolve: the command's options as that data, with what they left ``auto`` decided for
            the job (:class:`~commgraph.runtime.options.JobSite`); given, it takes ``data``'s place.
        extra_argv: further worker arguments (e.g. a file the launcher wrote).
        allreduce: a gradient all-reduce to check against the topology (training).
        check: refuses a graph (before partitioning it) or a part the command cannot run on.
        prepare: any further check of the partition set before the workers start.
        memory: the job's memory estimate on the set with so many workers on this machine
            (:func:`~commgraph.plan.memory.estimate_memory`): printed by ``--dry-run``, and a job that
            would not fit is refused before any worker starts.
        step_time: the job's step priced on the set, its topology, its devices and one layer's
            all-gather as the plan's simulator prices it (:func:`~commgraph.plan.steptime.predict_job`):
            printed by ``--dry-run`` beside the memory.
        memory_budget: ``--memory-budget`` in bytes: a job whose ``memory`` estimate needs more
            at its minimum is refused, one above the machine's memory warned about, and the job
            runs inside a memory cgroup of that limit where one can be made (:mod:`commgraph.launch.cgroup`).
        output: the format ``--dry-run`` prints its estimates in (:data:`~commgraph.render.FORMATS`).
        debug: workers show tracebacks.
        entry: the command's entry (``argv`` -> exit code), given where this process ends with
            the command: a job of one worker on a machine without CUDA, with no memory budget and
            not beyond the machine's memory, runs its rank in the launcher's process through it
            (:func:`~commgraph.runtime.launch.run_here`).
    """

    command: str
    graph: str
    load: Callable[[], Graph]
    launch: LaunchOptions
    job: JobOptions = field(default_factory=JobOptions)
    row_bytes: int | None = None
    data: dict | None = None
    resolve: Callable[[JobSite], dict] | None = None
    extra_argv: list[str] = field(default_factory=list)
    allreduce: str | None = None
    check: Callable[[str, object], None] | None = None
    prepare: Callable[[PartitionSet], None] | None = None
    memory: Callable[[PartitionSet, int], MemoryEstimate] | None = None
    step_time: Callable[[PartitionSet, Topology, list[str], float], StepTime] | None = None
    memory_budget: int | None = None
    output: str = "text"
    debug: bool = False
    entry: Callable[[list[str]], int] | None = None

    def say(self, line: str) -> None:
        if not self.launch.quiet:
            log.info(line)


def launch(
    spec: JobSpec, work: Callable[[World, Path], None], describe: Callable[[Path, int], str] | None = None
) -> int:
    """Run ``spec`` as a multi-process job: start and watch its workers here, or, in a worker
    (ours or torchrun's), be one rank of it. ``describe`` gives the line said before the workers
    start. The job's exit code."""
    if in_torchrun():
        from commgraph.launch.rank import run_rank

        if spec.launch.threads is not None:  # under torchrun; our launcher passes it as COMMGRAPH_THREADS
            os.environ["COMMGRAPH_THREADS"] = str(spec.launch.threads)
        return run_rank(spec.launch.timeout, spec.launch.device, spec.debug, lambda: shared_partition_set(spec), work)
    zygote = None if spec.launch.dry_run else ForkedZygote.fork()  # before any work: it shares our imports
    try:
        return _launch_here(spec, work, describe, zygote)
    finally:
        if zygote is not None and zygote.returncode is None and not zygote.started:
            zygote.discard()


def _launch_here(
    spec: JobSpec,
    work: Callable[[World, Path], None],
    describe: Callable[[Path, int], str] | None,
    zygote: ForkedZygote | None,
) -> int:
    """Prepare the job here, then start and watch its workers (forked by ``zygote`` if given)."""
    seconds = spec.launch.timeout
    partition_dir = partition_set(spec, spec.launch.workers or 1)
    with bounded("checking the partition set", seconds):
        pset = load_partition_set(partition_dir, verify=False)
        pset.validate()  # before the memory estimate reads an array, and before any file is hashed
    with bounded("estimating memory", seconds):
        estimate = None if spec.memory is None else spec.memory(pset, pset.num_parts)
    if estimate is not None and spec.memory_budget is not None:
        check_budget(estimate, spec.say)
    if estimate is not None and not spec.launch.dry_run:
        check_fits(estimate, spec.launch)
    with bounded("checking the partition set's checksums", seconds):
        check_set(spec, pset)
        if spec.prepare is not None:
            spec.prepare(pset)
    if estimate is not None and spec.launch.dry_run:  # after the checks a run would meet
        step = None if spec.step_time is None else predict_step_time(spec, pset)
        data = {**estimate.to_dict(), **({} if step is None else {"step_time": step.to_dict()})}
        print(render(estimate_report(data), spec.output))
        return 0
    from commgraph.runtime import launch_local, pick_device  # torch: not needed for a --dry-run

    workers = pset.num_parts
    device = pick_device(spec.launch.device, workers, say=None if spec.launch.quiet else spec.say)
    with tempfile.TemporaryDirectory(prefix=f"commgraph-{spec.command}-") as scratch:
        with bounded("planning the exchanges", seconds):
            site = resolve_job(spec, pset, workers, device, Path(scratch))
            data = (spec.data or {}) if spec.resolve is None else spec.resolve(site)
        job = site.options
        if describe is not None:
            spec.say(describe(partition_dir, workers))
        del pset, site
        release_free_memory()  # the graph and its partitioning, if this process made the set
        short = beyond_memory(estimate, spec.launch)
        cap = None if spec.memory_budget is None else enforce_budget(spec.memory_budget, zygote, spec.say)
        try:
            return launch_local(
                worker_argv(spec, partition_dir),
                workers,
                data=handed_over(spec, job, data, device),
                threads_per_worker=spec.launch.threads,
                zygote=zygote,
                phase_seconds=seconds,
                here=spec.entry if short is None and cap is None else None,
                # a job that may meet the kernel's OOM killer: its ranks stop at once, the kill is explained
                **({} if short is None else dict(grace=0.0, verdict=short.verdict)),
            )
        finally:
            if cap is not None:
                cap.release()


# what a refused training job may change (train's and predict's options)
TRAIN_ADVICE = "lower --hidden, --batch-size or --fanout, use fewer --workers or --features host"
# what a job the kernel killed for memory may change
OOM_ADVICE = "lower --hidden, --batch-size or --fanout"


def check_fits(estimate: MemoryEstimate, options: LaunchOptions | RunOptions, advice: str = TRAIN_ADVICE) -> None:
    """Refuse a job whose estimate exceeds the memory this machine has available (unless
    ``--ignore-memory``); ``advice`` says what to change."""
    available = available_bytes()
    if options.ignore_memory or available is None or estimate.machine_peak_bytes <= available:
        return
    raise JobError(
        f"this job needs about {estimate.machine_peak_bytes / 1e9:.1f} GB on this machine "
        f"({estimate.machine_workers} worker(s) of {estimate.worker_peak_bytes / 1e9:.1f} GB and "
        f"{sum(estimate.machine.values()) / 1e9:.1f} GB shared) but {available / 1e9:.1f} GB is "
        f"available: {advice} (--dry-run shows the estimate by part; --ignore-memory starts it anyway)"
    )


def check_budget(estimate: MemoryEstimate, say: Callable[[str], None], advice: str = TRAIN_ADVICE) -> None:
    """Refuse a ``--memory-budget`` below the job's minimum (what it holds with no feature cache;
    ``advice`` says what else to change); warn about one above the machine's memory."""
    budget, minimum = estimate.budget, estimate.minimum_bytes
    if budget < minimum:
        raise JobError(
            f"--memory-budget {budget / 1e9:.2f} GB is below this job's minimum of {minimum / 1e9:.2f} GB "
            f"(the parts it holds resident; --dry-run lists them): raise the budget to at least "
            f"{minimum / 1e9:.2f} GB or {advice}"
        )
    warn_above_machine(budget, say)


def warn_above_machine(budget: int, say: Callable[[str], None]) -> None:
    """Warn about a ``--memory-budget`` above the machine's memory."""
    total = machine_bytes()
    if total is not None and budget > total:
        say(
            f"commgraph: warning: --memory-budget {budget / 1e9:.2f} GB is above this machine's "
            f"{total / 1e9:.2f} GB of memory: the budget cannot hold the job back"
        )


def enforce_budget(budget: int, zygote: ForkedZygote | None, say: Callable[[str], None]) -> MemoryCap | None:
    """Put the launcher and the interpreter its workers fork from into a memory cgroup of
    ``budget`` bytes (the whole process tree from here on), or say in one line why the code alone
    keeps the budget. The cgroup made, to release when the job ends."""
    cap = cap_memory(budget, job_cgroup_name())
    if isinstance(cap, str):
        say(f"commgraph: {cap}: the budget is kept by the code (the feature cache is sized to it)")
        return None
    try:
        for pid in (os.getpid(), *(() if zygote is None else (zygote.pid,))):
            cap.join(pid)
    except OSError as exc:
        cap.release()
        say(f"commgraph: cannot join the memory cgroup {cap.path} ({exc.strerror}): the budget is kept by the code")
        return None
    say(f"commgraph: {cap.describe()}")
    return cap


@dataclass(frozen=True)
class BeyondMemory:
    """A job started with ``--ignore-memory`` whose estimate, ``needs`` bytes on this machine,
    exceeds the ``available`` bytes: a rank killed by SIGKILL was most likely killed by the
    kernel's out-of-memory killer, and :meth:`verdict` says so."""

    needs: int
    available: int

    def verdict(self, end) -> int:
        """The job's exit code from how it ended (a :class:`~commgraph.runtime.launch.JobEnd`):
        2 after naming a rank killed by SIGKILL as killed for memory; 2 for a rank that refused
        (exit code 2) and said why itself (its allocation failed: it named the size); else the
        default verdict."""
        from commgraph.runtime.launch import name_failed_rank

        if end.failed is not None and end.failed[1] == 2 and end.reason is not None:
            return 2
        if end.failed is None or end.failed[1] != -signal.SIGKILL:
            return name_failed_rank(end)
        log.error(
            f"commgraph: error: rank {end.failed[0]} was killed by the kernel (out of memory?): the job needs "
            f"about {self.needs / 1e9:.1f} GB, this machine has {self.available / 1e9:.1f} GB available; drop "
            f"--ignore-memory or {OOM_ADVICE}"
        )
        return 2


def beyond_memory(estimate: MemoryEstimate | None, options: LaunchOptions) -> BeyondMemory | None:
    """The job's memory shortfall when ``--ignore-memory`` started a job its estimate refuses."""
    available = available_bytes()
    if estimate is None or not options.ignore_memory or available is None:
        return None
    if estimate.machine_peak_bytes <= available:
        return None
    return BeyondMemory(estimate.machine_peak_bytes, available)


def partition_set(spec: JobSpec, parts: int) -> Path:
    """The partition set to run on: GRAPH itself if it is one, else a (cached) fresh one of ``parts``."""
    if is_partition_set(spec.graph):
        return Path(spec.graph)
    check_topology_holds(spec, parts)  # before minutes of partitioning, and no cache entry for a refused job
    launch = spec.launch
    with bounded("loading the graph", launch.timeout):
        graph = spec.load()
    if spec.check is not None:
        spec.check(graph.name, graph)
    folder = Path(spec.launch.partition_dir) if spec.launch.partition_dir else None
    log = None if launch.quiet else spec.say
    with bounded("partitioning", launch.timeout, PARTITION_FIX):
        return cached_partition_set(graph, parts, launch.partition, launch.partition_seed, folder, log=log)


# what a job whose partitioning overran may do instead
PARTITION_FIX = f"{TIMEOUT_FIX}, or make the set once with `commgraph partition make` and run on it"


def check_topology_holds(spec: JobSpec, parts: int) -> None:
    """Refuse a preset or file ``--topology`` with fewer worker devices than the job's ``parts``
    (a detected one is made for the job's workers)."""
    job = spec.job
    if str(job.topology) == DETECT:
        return
    topology = resolve_topology(job.topology, speeds=parse_speeds(job.speeds))
    have = len(topology.workers)
    if parts > have:
        raise JobError(
            f"{parts} workers but topology {topology.name!r} has only {have} worker devices: "
            f"pass --workers {have} or a --topology with more"
        )


def check_set(spec: JobSpec, pset: PartitionSet) -> None:
    """Check the set's files against their checksums once here (a damaged set: one message, not one
    per worker), and that it has one part per worker."""
    pset.verify_all()
    if spec.check is not None:
        spec.check(str(pset.path), pset.part(0))
    if spec.launch.workers is not None and spec.launch.workers != pset.num_parts:
        raise JobError(
            f"{pset.path} has {pset.num_parts} parts; pass --workers {pset.num_parts} or another partition set"
        )


def resolve_job(spec: JobSpec, pset: PartitionSet, workers: int, device: str, scratch: Path) -> JobSite:
    """Check the topology and placement, and choose (or check) the all-gather plan once, before any
    worker starts; the workers get the plan itself and the topology it was made on, as files in
    ``scratch`` (a job that exchanges nothing per layer gets its topology and plan as given), and
    the message ordering ``device``'s backend takes."""
    from commgraph.runtime.comm import match_ordering

    job = spec.job
    job = replace(job, ordering=match_ordering(job.ordering, "nccl" if device == "cuda" else "gloo"))
    topology = resolve_topology(job.topology, workers=workers, device=device, speeds=parse_speeds(job.speeds))
    devices = placement(pset, topology, parse_placement(job.placement))
    if spec.allreduce is not None:
        check_allreduce(spec.allreduce, topology, devices)
    free = gpu_free_bytes() if device == "cuda" else None
    if spec.row_bytes is None:
        return JobSite(job, pset, topology, devices, device, free)
    choice = choose_allgather(job.plan, pset, topology, spec.row_bytes, devices)
    if Path(job.plan).suffix not in (".json", ".npz"):
        spec.say(f"commgraph: {choice.describe()}")
    plan_file, topology_file = scratch / "plan.npz", scratch / "topology.yaml"
    choice.plan.save(plan_file)
    write_yaml(topology, topology_file)
    job = replace(
        job, plan=str(plan_file), topology=str(topology_file), speeds=None, placement=",".join(choice.devices)
    )
    return JobSite(job, pset, topology, list(choice.devices), device, free)


def predict_step_time(spec: JobSpec, pset: PartitionSet) -> StepTime:
    """The job's step priced before launch (``--dry-run``): its topology resolved as a run would
    (a detected one for the job's workers on ``--device``, CPU when ``auto``), the all-gather plan
    chosen and priced on it, and the rest by ``spec.step_time``."""
    job = spec.job
    device = "cuda" if spec.launch.device == "cuda" else "cpu"
    topology = resolve_topology(job.topology, workers=pset.num_parts, device=device, speeds=parse_speeds(job.speeds))
    devices = placement(pset, topology, parse_placement(job.placement))
    plan_seconds = 0.0
    if spec.row_bytes is not None and pset.num_parts > 1:
        plan_seconds = choose_allgather(job.plan, pset, topology, spec.row_bytes, devices).modeled_seconds
    return spec.step_time(pset, topology, devices, plan_seconds)


def worker_argv(spec: JobSpec, partition_dir: Path) -> list[str]:
    """The command line each worker runs: the same command on the partition set (its options come
    as data, :func:`received`)."""
    return [spec.command, str(partition_dir), *spec.extra_argv, *["--debug"] * spec.debug]


def _worker_launch(launch: LaunchOptions) -> LaunchOptions:
    """The launcher's options as a worker takes them (what only the launcher does left out)."""
    return replace(launch, workers=None, partition_dir=None, dry_run=False, ignore_memory=False)


@dataclass(frozen=True)
class Received:
    """What a worker's launcher handed it as data: the launcher's options, the job's options as
    the launcher resolved them (its plan and topology files), and the command's own."""

    launch: LaunchOptions
    job: JobOptions
    options: dict

    @classmethod
    def from_json(cls, text: str) -> Received:
        data = json.loads(text)
        return cls(LaunchOptions(**data["launch"]), JobOptions(**data["job"]), data["options"])


def handed_over(spec: JobSpec, job: JobOptions, data: dict, device: str) -> str:
    """What each worker of ``spec`` receives (:class:`Received`, as JSON): the launcher's options
    with the ``device`` it picked, the job's options resolved as ``job``, the command's as ``data``."""
    launch = replace(_worker_launch(spec.launch), device=device)
    return json.dumps({"launch": asdict(launch), "job": asdict(job), "options": data})


def received() -> Received | None:
    """In a worker our launcher started with a spec's ``data``: what it handed over (None
    elsewhere: the launcher itself, a worker of another command, torchrun's ranks)."""
    if os.environ.get(DATA_ENV) != "1":
        return None
    from commgraph.runtime.launch import job_data  # torch: only in a worker

    return Received.from_json(job_data())


def shared_partition_set(spec: JobSpec) -> Path:
    """Under torchrun with a GRAPH, each machine's local rank 0 partitions (deterministically, so
    every machine gets the same set) and the other local ranks wait for it."""
    if is_partition_set(spec.graph):
        return Path(spec.graph)
    workers = int(os.environ["WORLD_SIZE"])
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        return partition_set(spec, workers)
    graph = spec.load()
    target = (
        Path(spec.launch.partition_dir)
        if spec.launch.partition_dir
        else partition_cache_entry(graph, spec.launch.partition, workers, spec.launch.partition_seed)
    )
    deadline = time.monotonic() + max(spec.launch.timeout, 600)
    while not is_partition_set(target):
        if time.monotonic() > deadline:
            raise JobError(f"local rank 0 did not produce the partition set {target} in time")
        time.sleep(0.5)
    return target
