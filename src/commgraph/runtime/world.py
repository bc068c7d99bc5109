"""The process group a worker belongs to, and how a worker learns that another one died.

A worker joins through the environment variables torchrun sets (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``, ``LOCAL_RANK``); our own local launcher sets the same ones, so a
job started by ``commgraph train --workers N`` and one started by ``torchrun --nnodes ...`` run the
same code. Every collective runs under ``timeout``, so nothing can wait forever.

Naming the failed rank: a worker whose own code raises writes its rank and message into the job's
key-value store before it exits (our launcher writes how a rank ended when the rank could not:
killed by a signal); every worker also bumps a heartbeat counter in the store every
:data:`BEAT_SECONDS` from a thread. When an operation fails (Gloo reports a closed connection as
soon as a peer dies) or times out, the survivor reads the store: a reported failure, else the
ranks whose heartbeat stopped for :data:`SILENCE_SECONDS` (not those that reported stopping
because of another rank: they died of the failure, they did not cause it), else the peer it was
waiting for.
"""

from __future__ import annotations

import datetime
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from commgraph.errors import TrainingError, WorkerFailed
from commgraph.phases import JOINING, SETTING_UP, inject

BEAT_SECONDS = 0.2
SILENCE_SECONDS = 4 * BEAT_SECONDS  # a rank whose counter did not move for this long is dead
_PREFIX = "commgraph/"
PROGRESS_KEY = f"{_PREFIX}progress"  # how far the job got, in words (:meth:`World.report_progress`)


@dataclass
class World:
    rank: int
    size: int
    local_rank: int
    device: torch.device
    backend: str
    timeout: float
    halo_group: object = None  # peer-to-peer embedding exchange: its own tag space
    grad_group: object = None  # gradient all-reduce and small collectives
    _store: object = field(default=None, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _beat: threading.Thread | None = field(default=None, repr=False)

    @classmethod
    def alone(cls, device: str | torch.device = "cpu") -> World:
        """A job of one process, which joins no process group (nothing crosses processes)."""
        return cls(rank=0, size=1, local_rank=0, device=torch.device(device), backend="none", timeout=0.0)

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    def report_failure(self, message: str) -> None:
        """Tell the others why this worker is about to exit (best effort: the store may be gone)."""
        try:
            self._store.set(failed_key(self.rank), message[:500])
        except Exception:  # noqa: BLE001 - the store host itself may be the one that died
            pass

    def report_stopped(self) -> None:
        """Say that this worker exits because another one failed (best effort)."""
        try:
            self._store.set(stopped_key(self.rank), "1")
        except Exception:  # noqa: BLE001 - the store host itself may be the one that died
            pass

    def report_progress(self, text: str) -> None:
        """Say how far the job got (the leader, after each epoch), for the launcher's line when
        a signal stops the job (best effort)."""
        if self._store is not None and self.is_leader:
            try:
                self._store.set(PROGRESS_KEY, text[:300])
            except Exception:  # noqa: BLE001 - the store host itself may be the one that died
                pass

    def report_phase(self, phase: str) -> None:
        """Say that this rank enters ``phase`` (:mod:`commgraph.phases`): the local launcher bounds
        each set-up phase by ``--timeout``."""
        report_phase(self._store, self.rank, phase)

    def explain(self, error: BaseException, waiting_for: int | None = None) -> WorkerFailed:
        """Turn a communication error into one that names the rank responsible: a rank that
        reported its failure (itself, or the launcher for it), else, after watching the heartbeats
        for :data:`SILENCE_SECONDS` (a report arriving meanwhile ends the watch), the silent ones."""
        try:
            keys = [f"{_PREFIX}beat/{r}" for r in range(self.size)]
            before = [self._store.add(k, 0) for k in keys]
            watch_until = time.monotonic() + SILENCE_SECONDS
            while (reported := self._reported()) is None and time.monotonic() < watch_until:
                time.sleep(BEAT_SECONDS / 2)
            if reported is not None:
                return reported
            after = [self._store.add(k, 0) for k in keys]
            silent = [
                r
                for r in range(self.size)
                if r != self.rank and after[r] == before[r] and not self._store.check([stopped_key(r)])
            ]
        except Exception:  # noqa: BLE001 - the store lives with the launcher or rank 0's agent
            return WorkerFailed(
                f"lost contact with the job's store ({_first_line(error)}); the launcher or rank 0 died"
            )
        if silent:
            names = ", ".join(map(str, silent))
            return WorkerFailed(
                f"worker rank {names} died (no heartbeat for {SILENCE_SECONDS:g} s): {_first_line(error)}"
            )
        if waiting_for is not None:
            return WorkerFailed(
                f"worker rank {waiting_for} did not answer within {self.timeout:.0f} s: {_first_line(error)}"
            )
        return WorkerFailed(f"a collective failed and no worker is known dead: {_first_line(error)}")

    def _reported(self) -> WorkerFailed | None:
        """The first other rank's reported failure, if any."""
        for rank in range(self.size):
            key = failed_key(rank)
            if rank != self.rank and self._store.check([key]):
                reason = self._store.get(key).decode(errors="replace")
                return WorkerFailed(f"worker rank {rank} failed: {reason}")
        return None

    def close(self) -> None:
        """Stop the heartbeat and leave the process group. The heartbeat is joined, not left to
        the interpreter's exit: a daemon thread inside a store call while Python finalises aborts
        the process (``terminate called without an active exception``)."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
            self._beat = None
        if dist.is_initialized():
            dist.destroy_process_group()


def failed_key(rank: int) -> str:
    """The store key where the reason rank ``rank`` failed is written (by the rank itself, or by
    the launcher when the rank was killed or died without a word)."""
    return f"{_PREFIX}failed/{rank}"


def phase_key(rank: int) -> str:
    """The store key where rank ``rank`` writes the phase it is in (:func:`report_phase`)."""
    return f"{_PREFIX}phase/{rank}"


def report_phase(store, rank: int, phase: str) -> None:
    """Write ``rank``'s ``phase`` into the job's ``store`` (none: a world of one); then the test
    hook (:func:`~commgraph.phases.inject`) has its say."""
    if store is not None:
        store.set(phase_key(rank), phase)
    inject(rank, phase)


def stopped_key(rank: int) -> str:
    """The store key rank ``rank`` writes when it exits because another rank failed (it died of
    the failure, it did not cause it)."""
    return f"{_PREFIX}stopped/{rank}"


def pick_device(choice: str, local_workers: int = 1, say: Callable[[str], None] | None = None) -> str:
    """``auto``: ``cuda`` when torch sees a GPU for each of this machine's ``local_workers``, else
    ``cpu`` (``say`` hears why, when there are GPUs but too few). NCCL cannot put two ranks on one
    GPU: a shared GPU failed only at the first exchange, with NCCL's bare "invalid usage", so
    ``cuda`` without a GPU per worker is refused here, before any worker starts, with what to pass
    instead."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if choice == "cuda" and gpus == 0:
        raise TrainingError(
            "--device cuda, but torch sees no GPU on this machine: use --device cpu "
            "(or auto, which takes the GPUs when there are any)"
        )
    if choice == "cuda" and local_workers > gpus:
        raise TrainingError(
            f"--device cuda needs a GPU per worker (NCCL cannot put two processes on one GPU), but "
            f"{local_workers} workers would share this machine's {gpus} GPU(s): use --workers "
            f"{gpus} (with a partition set of that many parts), torchrun across machines, "
            "or --device cpu"
        )
    if choice == "auto" and 0 < gpus < local_workers:
        if say is not None:
            say(
                f"commgraph: {local_workers} workers but {gpus} GPU(s) on this machine, and NCCL needs a GPU per "
                f"worker: running on CPU with Gloo (--workers {gpus} runs on the GPU{'s' * (gpus > 1)})"
            )
        return "cpu"
    return "cuda" if choice == "cuda" or (choice == "auto" and gpus > 0) else "cpu"


def join(timeout: float, device: str = "auto") -> World:
    """Join the world the environment describes: Gloo on CPU, NCCL with one GPU per worker."""
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if pick_device(device, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))) == "cuda":
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        torch_device, backend = torch.device("cuda", torch.cuda.current_device()), "nccl"
    else:
        torch_device, backend = torch.device("cpu"), "gloo"
    span = datetime.timedelta(seconds=timeout)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=span)
    report_phase(store, rank, JOINING)
    # before the process group: Gloo ranks would wait in its set-up for NCCL ranks that never come
    gpu = (
        str(getattr(torch.cuda.get_device_properties(torch_device), "uuid", torch_device.index))
        if backend == "nccl"
        else ""
    )
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")  # a restarted job may place ranks anew
    keys = [f"{_PREFIX}placement/{attempt}/{r}" for r in range(size)]
    store.set(keys[rank], "\t".join((socket.gethostname(), backend, gpu)))
    _wait_for_ranks(store, keys, span)
    conflict = placement_conflict([tuple(store.get(key).decode().split("\t")) for key in keys])
    if conflict:
        raise TrainingError(conflict)
    dist.init_process_group(backend, timeout=span)
    world = World(
        rank,
        size,
        local_rank,
        torch_device,
        backend,
        timeout,
        halo_group=dist.new_group(backend=backend, timeout=span),
        grad_group=dist.new_group(backend=backend, timeout=span),
        _store=store,
    )
    if backend == "nccl":
        # torch: a group's first batch_isend_irecv must include every rank, but a part with no halo
        # posts nothing in a stage; a first call that every rank makes sets the groups up instead
        for group in (world.halo_group, world.grad_group):
            dist.all_reduce(torch.zeros(1, device=torch_device), group=group)
    beat_store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=span)
    world._beat = threading.Thread(
        target=_heartbeat,
        args=(beat_store, f"{_PREFIX}beat/{rank}", world._stop),
        daemon=True,
        name="commgraph-heartbeat",
    )
    world._beat.start()
    world.report_phase(SETTING_UP)
    return world


def _wait_for_ranks(store, keys: list[str], span: datetime.timedelta) -> None:
    """Wait for every rank's ``keys[rank]``; a rank missing after ``span`` is named."""
    try:
        store.wait(keys, span)
    except dist.DistStoreError:
        missing = [rank for rank, key in enumerate(keys) if not store.check([key])]
        raise WorkerFailed(
            f"worker rank {', '.join(map(str, missing))} did not join within {span.total_seconds():g} s (--timeout)"
        ) from None


def placement_conflict(placements: list[tuple[str, str, str]]) -> str | None:
    """What is wrong with where the ranks run, each given as (host, backend, GPU id), or None. Each
    machine decides ``--device auto`` from its own GPUs, so a machine with too few for its workers
    would run Gloo beside NCCL ranks; and two torchrun agents on one machine each see one local
    worker and would both take GPU 0. Either failed only at the first exchange, in NCCL's words."""
    backends = {}
    for rank, (host, backend, _) in enumerate(placements):
        backends.setdefault(backend, (rank, host))
    if len(backends) > 1:
        (a, (rank_a, host_a)), (b, (rank_b, host_b)) = sorted(backends.items(), key=lambda kv: kv[1])[:2]
        return (
            f"rank {rank_a} on {host_a} uses {a} but rank {rank_b} on {host_b} uses {b}: with --device auto each "
            "machine takes its GPUs only if it has one per local worker; start as many workers per machine "
            "as it has GPUs, or pass --device cpu everywhere"
        )
    owner = {}
    for rank, (host, backend, gpu) in enumerate(placements):
        if backend == "nccl" and (host, gpu) in owner:
            return (
                f"ranks {owner[host, gpu]} and {rank} both run on the same GPU of {host} ({gpu}), and NCCL needs "
                "a GPU per process: on one machine start one torchrun with --nproc-per-node, or give each "
                "agent its own GPUs with CUDA_VISIBLE_DEVICES, or pass --device cpu"
            )
        owner[host, gpu] = rank
    return None


def _heartbeat(store, key: str, stop: threading.Event) -> None:
    while not stop.wait(BEAT_SECONDS):
        try:
            store.add(key, 1)
        except Exception:  # noqa: BLE001 - store gone: the job is ending anyway
            return


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__
