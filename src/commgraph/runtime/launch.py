"""Local launcher: ``commgraph train ... --workers N`` re-runs the same command in N processes.

The launcher hosts the job's key-value store (so the store outlives any one worker, and survivors can
still read who failed), gives every child the environment torchrun would give it, and watches
them. When a worker exits non-zero or is killed, the others are given ``grace`` seconds to notice
and exit with their own message, then they are killed; the launcher names the first failed rank and
returns non-zero. Under torchrun none of this runs: torchrun's agent does the watching.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time

import torch.distributed as dist

POLL_SECONDS = 0.1


def launch_local(argv: list[str], workers: int, *, grace: float, threads_per_worker: int | None = None,
                 module: str = "commgraph") -> int:
    """Run ``python -m <module> <argv>`` as ``workers`` ranks on this machine; the job's exit code."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=max(grace, 30)))
    threads = threads_per_worker or max(1, (os.cpu_count() or 1) // workers)
    children = []
    for rank in range(workers):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(workers), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(workers), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port),
                   TORCHELASTIC_USE_AGENT_STORE="True", OMP_NUM_THREADS=str(threads),
                   COMMGRAPH_THREADS=str(threads))
        children.append(subprocess.Popen([sys.executable, "-m", module, *argv], env=env))
    try:
        return _watch(children, grace)
    except KeyboardInterrupt:
        _kill(children)
        raise
    finally:
        del store


def _watch(children: list[subprocess.Popen], grace: float) -> int:
    first_failure: tuple[int, int] | None = None
    deadline = None
    while True:
        codes = [child.poll() for child in children]
        if first_failure is None:
            failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                first_failure = failed[0]
                deadline = time.monotonic() + grace
        if all(code is not None for code in codes):
            break
        if deadline is not None and time.monotonic() > deadline:
            _kill(children)
            for child in children:
                child.wait()
            break
        time.sleep(POLL_SECONDS)
    if first_failure is None:
        return 0
    rank, code = first_failure
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    print(f"commgraph: error: worker rank {rank} {how}; the job stopped", file=sys.stderr)
    return 1


def _kill(children: list[subprocess.Popen]) -> None:
    for child in children:
        if child.poll() is None:
            child.kill()
