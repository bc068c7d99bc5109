"""``commgraph run``'s launcher: a user's own script as ``workers`` ranks on this machine, each
given the environment torchrun gives (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ``OMP_NUM_THREADS``), so that the script's
:func:`commgraph.pyg.init` joins them into one job.

Before any rank starts, every argument of the script that is a partition set's directory (as
given, or the value of ``--name=VALUE``) is checked against the workers (one part each) and its
memory estimated as a full-graph training job of ``train``'s default model
(:func:`~commgraph.plan.memory.estimate_memory`); a job that cannot fit is refused (``--dry-run``
prints the estimates). The ranks are forked from a warmed interpreter where that is safe, fresh
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

import sys
from pathlib import Path

from commgraph.errors import BridgeError, JobError
from commgraph.launch.launcher import check_fits
from commgraph.launch.options import RunOptions
from commgraph.partition import is_partition_set, load_partition_set
from commgraph.phases import bounded
from commgraph.plan.memory import JobShape, MemoryEstimate, estimate_memory
from commgraph.runtime.options import DEVICE_ENV, TIMEOUT_ENV
from commgraph.runtime.zygote import ForkedZygote

RANK_MODULE = "commgraph.launch.script_rank"  # what each rank runs: the script, its failure reported
ADVICE = "use a machine with more memory, or fewer workers with a partition set of as many parts"


def run_script(options: RunOptions, script: str, args: list[str]) -> int:
    """Run ``python SCRIPT ARGS...`` as ``options.workers`` ranks (``--dry-run``: print the memory
    estimates instead); the job's exit code.

    Raises:
        BridgeError: SCRIPT does not exist, or its ranks never called :func:`commgraph.pyg.init`.
        JobError: a partition set among ARGS has not one part per worker, or the job would not fit
            in this machine's memory.
    """
    if not Path(script).exists():
        raise BridgeError(f"{script}: no such script")
    if options.dry_run:
        _print_estimates(options, args)
        return 0
    zygote = ForkedZygote.fork()  # before any work: it shares this process's imports
    try:
        with bounded("estimating memory", options.timeout):
            found = estimates(options.workers, args)
        for estimate in found.values():
            check_fits(estimate, options, ADVICE)
        return _launch(options, script, args, zygote)
    finally:
        if zygote is not None and zygote.returncode is None and not zygote.started:
            zygote.discard()


def _launch(options: RunOptions, script: str, args: list[str], zygote: ForkedZygote | None) -> int:
    """Start the ranks (forked by ``zygote`` if given) and watch them; the job's exit code."""
    from commgraph.runtime import launch_local, pick_device

    device = pick_device(options.device, options.workers, say=lambda line: print(line, file=sys.stderr))
    return launch_local(
        [script, *args],
        options.workers,
        threads_per_worker=options.threads,
        module=RANK_MODULE,
        zygote=zygote,
        env={TIMEOUT_ENV: str(options.timeout), DEVICE_ENV: device},
        verdict=verdict,
        phase_seconds=options.timeout,
    )


def partition_sets(args: list[str]) -> list[Path]:
    """The partition sets' directories among a script's arguments: an argument itself, or the
    value of ``--name=VALUE``."""
    values = [arg.partition("=")[2] if arg.startswith("-") else arg for arg in args]
    return [Path(value) for value in values if value and is_partition_set(value)]


def estimates(workers: int, args: list[str]) -> dict[Path, MemoryEstimate]:
    """The memory estimate of each partition set among ``args``, run by ``workers`` ranks here.

    Raises:
        JobError: a set has not one part per worker.
    """
    from commgraph.train.config import ModelOptions

    model = ModelOptions()
    found = {}
    for path in partition_sets(args):
        pset = load_partition_set(path, verify=False)
        if pset.num_parts != workers:
            raise JobError(
                f"{path} has {pset.num_parts} parts but the job has {workers} ranks: run with "
                f"--workers {pset.num_parts} or make a set of {workers} parts"
            )
        shape = JobShape(workers, workers, model.hidden, model.layers, model=model.model)
        found[path] = estimate_memory(pset, shape)
    return found


def _print_estimates(options: RunOptions, args: list[str]) -> None:
    found = estimates(options.workers, args)
    if not found:
        print("no partition set among the script's arguments: nothing to estimate")
    for path, estimate in found.items():
        print(f"{path}, as full-graph training of train's default model:")
        print("\n".join(estimate.lines()))


def verdict(end) -> int:
    """The job's exit code from how it ended (a :class:`~commgraph.runtime.launch.JobEnd`): the
    first failed rank's, after naming it with its reason (a rank that never called
    :func:`commgraph.pyg.init` failed with exit code 2, saying so), else 0."""
    from commgraph.runtime.launch import describe_exit

    if end.failed is None:
        return 0
    rank, code = end.failed
    how = f"failed: {end.reason}" if end.reason else describe_exit(code)
    print(f"commgraph: error: rank {rank} {how}", file=sys.stderr)
    return code if code > 0 else 1
