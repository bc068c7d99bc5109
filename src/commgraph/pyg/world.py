"""The world a user's script runs in: :func:`init` joins the job that ``torchrun`` or ``commgraph
run`` started (the environment says so: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``),
or makes a one-process world when the script runs alone. Either way torch's default process group
is initialised, so ``torch.nn.parallel.DistributedDataParallel`` and ``torch.distributed`` calls
work on the user's own tensors as they do everywhere.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

from commgraph.errors import BridgeError
from commgraph.phases import RUNNING
from commgraph.runtime.comm import Communicator
from commgraph.runtime.options import DEVICE_ENV, INIT_KEY, TIMEOUT_ENV, in_torchrun
from commgraph.runtime.world import World, join

DEFAULT_TIMEOUT = 300.0


@dataclass
class Session:
    """This process's place in the job, made once by :func:`init`: the ``world`` and its
    ``comm`` (which counts every byte the bridge moves)."""

    world: World
    comm: Communicator


_session: Session | None = None


def init(timeout: float | None = None, device: str | None = None) -> Session:
    """Join the job this process belongs to; a second call returns the same session.

    Args:
        timeout: seconds any collective may wait before the job stops with the rank it waited for
            named (default: ``$COMMGRAPH_TIMEOUT``, which ``commgraph run --timeout`` sets, else
            :data:`DEFAULT_TIMEOUT`).
        device: ``auto`` (a GPU per local rank when torch sees enough of them, else the CPU),
            ``cpu`` or ``cuda`` (default: ``$COMMGRAPH_DEVICE``, which ``commgraph run --device``
            sets, else ``auto``).

    Returns:
        Session: the world (rank, size, device, backend) and its communicator.
    """
    global _session
    if _session is not None:
        return _session
    timeout = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT)) if timeout is None else timeout
    device = os.environ.get(DEVICE_ENV, "auto") if device is None else device
    if in_torchrun():
        world = join(timeout, device)
        world._store.set(f"{INIT_KEY}{world.rank}", "1")
        world.report_phase(RUNNING)  # the script's own work
    else:
        world = World.alone("cuda" if device != "cpu" and torch.cuda.is_available() else "cpu")
        if not dist.is_initialized():  # a group of one, so that DDP and dist calls work unchanged
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    _session = Session(world, Communicator(world))
    atexit.register(shutdown)  # a script that never calls shutdown() still leaves cleanly
    return _session


@contextmanager
def adopted(world: World) -> Iterator[Session]:
    """The bridge's session made from a world the caller already joined (a worker of ``commgraph
    train``: the launcher made its world), for the ``with`` block: the caller keeps the world and
    closes it; the session is forgotten when the block ends.

    Raises:
        BridgeError: the bridge already has a session (from :func:`init` or another block).
    """
    global _session
    if _session is not None:
        raise BridgeError("the bridge already has a session: adopt a world before any cg.init()")
    _session = Session(world, Communicator(world))
    try:
        yield _session
    finally:
        _session = None


def shutdown() -> None:
    """Leave the job: torch's process group is destroyed and a later :func:`init` joins anew (a
    script need not call it: :func:`init` registers it to run at exit; a test that made a
    one-process world calls it, so that no process group outlives it)."""
    global _session
    if _session is None:
        return
    atexit.unregister(shutdown)
    _session.world.close()
    if dist.is_initialized():
        dist.destroy_process_group()
    _session = None


def session() -> Session:
    """The session :func:`init` made.

    Raises:
        BridgeError: :func:`init` was not called yet.
    """
    if _session is None:
        raise BridgeError("call commgraph.pyg.init() first (import commgraph.pyg as cg; cg.init())")
    return _session


def rank() -> int:
    """This process's rank (0 when it runs alone)."""
    return session().world.rank


def world_size() -> int:
    """The number of ranks of the job (1 when the script runs alone)."""
    return session().world.size


def device() -> torch.device:
    """The device this rank computes on."""
    return session().world.device


def local_rank() -> int:
    """This process's rank on its machine."""
    return int(os.environ.get("LOCAL_RANK", rank()))
