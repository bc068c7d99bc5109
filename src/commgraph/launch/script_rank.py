"""One rank of ``commgraph run``: ``python -m commgraph.launch.script_rank SCRIPT ARGS...`` runs
SCRIPT as ``python SCRIPT ARGS...`` would, whether the rank was forked from the zygote
(:mod:`commgraph.runtime.zygote` runs this module) or started as a fresh interpreter: the script
runs as ``__main__`` with ``sys.argv = [SCRIPT, *ARGS]`` and its folder first on ``sys.path``, and
its ``sys.exit(n)`` is the rank's exit code. A rank whose script ends without having called
:func:`commgraph.pyg.init` fails (exit 2, its reason in the store), so that ranks that did join do
not wait for it.

An exception the script does not catch is printed as the interpreter prints it, and its last line
with the script's line that raised it (``ValueError: boom (train.py, line 12)``) is written to the
job's store (:func:`~commgraph.runtime.world.failed_key`), where the launcher and the other ranks
read why the job stopped; then the rank exits with code 1. A rank whose error comes from another
rank's failure (a collective whose peer died) says only that it stopped, so that the job is not
blamed on it.

Nothing here imports torch before the script does: a script may set its environment first.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
import traceback
from datetime import timedelta
from pathlib import Path

from commgraph.logs import get_logger

STORE_SECONDS = 5.0  # how long reporting a failure may wait for the launcher's store

log = get_logger("commgraph.launch.script_rank")  # run as __main__ (runpy): named, a child of commgraph


def main(argv: list[str]) -> int:
    """Run ``argv[0]`` with the arguments ``argv[1:]``; the rank's exit code (``sys.exit`` in the
    script raises through)."""
    script, args = argv[0], argv[1:]
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - what the interpreter does with an uncaught error, and tell the job
        _report(exc, script)
        return 1
    if not _joined():
        from commgraph.runtime.world import failed_key

        # its peers, if they called init, would wait for it until their timeout
        _tell(
            failed_key(int(os.environ["RANK"])),
            f"{script} never called commgraph.pyg.init(): add `import commgraph.pyg as cg; cg.init()` at its "
            "start, which joins its ranks into one job",
        )
        return 2
    return 0


def _joined() -> bool:
    """Whether this rank called :func:`commgraph.pyg.init` (it says so in the job's store)."""
    from commgraph.runtime.options import INIT_KEY

    try:
        return _store().check([f"{INIT_KEY}{os.environ['RANK']}"])
    except Exception:  # noqa: BLE001 - no store to ask: the launcher is gone, nothing waits for this rank
        return True


def _tell(key: str, value: str) -> None:
    """Write ``value`` under ``key`` in the job's store and print it (best effort)."""
    log.error(f"commgraph: {value}")
    with contextlib.suppress(Exception):  # the store's host may be gone
        _store().set(key, value[:500])


def describe_error(exc: BaseException, script: str) -> str:
    """The exception as its traceback's last line says it (its message's first line), with the
    script's innermost line in the traceback, if any (not for a script that does not compile)."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    own = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if os.path.abspath(frame.filename) == os.path.abspath(script)
    ]
    return f"{text} ({Path(script).name}, line {own[-1].lineno})" if own else text


def _report(exc: BaseException, script: str) -> None:
    """Print the error and tell the job how this rank failed (best effort: the launcher may be
    gone): why, or, when another rank failed first, only that this one stopped because of it."""
    from commgraph.runtime.world import failed_key, stopped_key

    rank = int(os.environ["RANK"])
    try:
        store = _store()
        others = [other for other in range(int(os.environ["WORLD_SIZE"])) if other != rank]
        first = next((other for other in others if store.check([failed_key(other)])), None)
    except Exception:  # noqa: BLE001 - no store to tell: the traceback alone says it
        store, first = None, None
    if first is None:
        _print(exc, script)
        key, value = failed_key(rank), describe_error(exc, script)[:500]
    else:
        log.error(f"commgraph: rank {rank} stopped: rank {first} failed")
        key, value = stopped_key(rank), "1"
    if store is not None:
        with contextlib.suppress(Exception):  # the store's host itself may be gone
            store.set(key, value)


def _print(exc: BaseException, script: str) -> None:
    """Print the traceback as ``python SCRIPT`` would: from the script's first frame on (this
    module's and runpy's frames left out)."""
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != os.path.abspath(script):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb or exc.__traceback__)


def _store():
    """A client of the job's store, at the address every rank was given."""
    import torch.distributed as dist

    return dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=timedelta(seconds=STORE_SECONDS),
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
