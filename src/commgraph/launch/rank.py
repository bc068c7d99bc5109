"""One rank of a multi-process job (started by our launcher or by torchrun): prepare, join the world,
work; and on any failure tell the other ranks, name this rank and exit at once, since tearing down a
process group after a peer died could itself wait forever. The one rank of a job the launcher runs
in its own process (:func:`~commgraph.runtime.launch.run_here`) has no peer: it leaves its world
and returns its exit code to the launcher instead."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import TypeVar

from commgraph.errors import CommgraphError, WorkerFailed
from commgraph.logs import get_logger
from commgraph.phases import STARTING, inject
from commgraph.runtime import World, join
from commgraph.runtime.launch import HERE_ENV
from commgraph.sizes import gigabytes

T = TypeVar("T")
log = get_logger(__name__)


def run_rank(
    timeout: float, device: str, debug: bool, prepare: Callable[[], T], work: Callable[[World, T], None]
) -> int:
    """``prepare`` runs before joining (partitioning may take longer than the join may wait);
    ``work`` gets the world (joined with ``timeout`` on ``device``) and what ``prepare`` returned;
    ``debug`` prints a bug's traceback."""
    rank = int(os.environ["RANK"])
    world = None
    try:
        inject(rank, STARTING)
        prepared = prepare()
        world = join(timeout, device)
        work(world, prepared)
        world.close()
        return 0
    except WorkerFailed as exc:
        if world is not None:
            world.report_stopped()
        return _die(world, f"commgraph: error: rank {rank} stopped: {exc}", 1)
    except CommgraphError as exc:
        if world is not None:
            world.report_failure(str(exc))
        return _die(world, f"commgraph: error: rank {rank}: {exc}", 2)
    except Exception as exc:  # noqa: BLE001 - a bug or an engine error: name it, tell the others, stop
        if world is not None:
            world.report_failure(f"{type(exc).__name__}: {exc}")
        short = out_of_memory(exc)
        if short is not None:
            return _die(world, f"commgraph: error: rank {rank} ran out of memory: {short}; {OOM_ADVICE}", 2)
        if debug:
            import traceback

            traceback.print_exc()
        return _die(world, f"commgraph: internal error on rank {rank}: {type(exc).__name__}: {exc}", 1)


OOM_ADVICE = (
    "lower --hidden, --batch-size or --fanout, or use more machines (without --ignore-memory the "
    "estimate refuses a job that does not fit before it starts)"
)
_ASKED = re.compile(
    r"tried to allocate (\d+) bytes|Tried to allocate ([\d.]+ [KMGT]?i?B)|allocate ([\d.]+ [KMGTPE]i?B)"
)


def out_of_memory(exc: BaseException) -> str | None:
    """What a failed allocation asked for, in a few words (None when ``exc`` is not one): numpy's
    ``MemoryError``, torch's CPU allocator (``can't allocate memory``) or its CUDA ``OutOfMemoryError``."""
    text = str(exc)
    if not (
        isinstance(exc, MemoryError) or "can't allocate memory" in text or type(exc).__name__ == "OutOfMemoryError"
    ):
        return None
    asked = _ASKED.search(text)
    if asked is None:
        return "an allocation failed"
    return f"an allocation of {gigabytes(int(asked[1])) if asked[1] else asked[2] or asked[3]} failed"


def _die(world: World | None, message: str, code: int) -> int:
    """Say ``message`` and end the rank with ``code``: the process at once, or, in the launcher's
    process (:data:`~commgraph.runtime.launch.HERE_ENV`), by leaving the world and returning ``code``."""
    log.critical(message)
    if os.environ.get(HERE_ENV) == "1":
        if world is not None:
            world.close()
        return code
    sys.stdout.flush()
    os._exit(code)
