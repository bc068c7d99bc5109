"""A table that the ranks of one machine hold once: anonymous shared memory, written and read in place.

:func:`shared_table` is a collective of the machine's ranks: the first of them creates a
``memfd`` (an anonymous file in memory, with no name in any file system: nothing in ``/dev/shm``
or on disk), reserves its bytes, and every rank maps it read-write through
``/proc/<pid>/fd/<fd>`` of the creator. Each rank then writes its own rows and, after a barrier,
reads anyone's rows in place; nothing is copied or sent. The memory lives exactly as long as a
mapping of it: when every rank has dropped its table (:meth:`SharedTable.close`) or died, however
it died (``kill -9`` included), the kernel frees it. A machine without the memory to reserve gets a
:class:`~commgraph.errors.JobError` on every rank before any row is written.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import numpy as np
import torch

from commgraph.errors import JobError
from commgraph.runtime.comm import Communicator

NAME = "commgraph-table"  # the memfd's name, as /proc/PID/maps shows it ("/memfd:commgraph-table (deleted)")


@dataclass
class SharedTable:
    """``rows x width`` float32 rows that every rank of a machine maps (see the module's
    description). ``x`` is the table as a tensor; after :meth:`close` it is None."""

    x: torch.Tensor | None
    nbytes: int

    def close(self) -> None:
        """Drop this rank's mapping (the memory goes back once every rank has dropped its own)."""
        self.x = None


def shared_table(comm: Communicator, ranks: np.ndarray, rows: int, width: int) -> SharedTable:
    """A ``rows x width`` float32 table shared by ``ranks`` (every rank of the job, on one
    machine; the first creates it): a collective of the job's communicator.

    Raises:
        JobError: on every rank, when the creator could not reserve the table's bytes.
    """
    nbytes = 4 * rows * width
    if comm.world.size == 1:  # nothing to share with
        return SharedTable(torch.empty((rows, width)), nbytes)
    leader = int(ranks[0])
    mine = comm.world.rank == leader
    fd, error = -1, None
    if mine:
        fd, error = _create(nbytes)
    where = comm.all_gather_object((os.getpid(), fd, error))[leader]
    if where[2] is not None:
        raise JobError(
            f"a shared table of {nbytes / 1e9:.2f} GB ({rows} x {width} rows) for the evaluation pass could not be "
            f"reserved: {where[2]}; free memory, lower --hidden, or use fewer workers a machine"
        )
    opened = fd if mine else os.open(f"/proc/{where[0]}/fd/{where[1]}", os.O_RDWR)
    try:
        mapping = mmap.mmap(opened, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) if nbytes else None
    finally:
        comm.barrier()  # every rank holds its mapping: the descriptors can go
        os.close(opened)
    if mapping is None:
        return SharedTable(torch.empty((rows, width)), 0)
    return SharedTable(torch.from_numpy(np.frombuffer(mapping, dtype=np.float32).reshape(rows, width)), nbytes)


def _create(nbytes: int) -> tuple[int, str | None]:
    """A memfd of ``nbytes`` bytes, reserved (so a short machine fails here, not on a write), and
    the error that stopped it (its descriptor is then -1)."""
    try:
        fd = os.memfd_create(NAME, os.MFD_CLOEXEC)
    except (OSError, AttributeError) as exc:
        return -1, f"memfd_create failed ({exc})"
    try:
        if nbytes:
            os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        os.close(fd)
        return -1, os.strerror(exc.errno) if exc.errno else str(exc)
    return fd, None
