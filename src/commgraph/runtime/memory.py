"""How a worker process's C allocator treats large blocks.

glibc's malloc serves every block above its mmap threshold (32 MB at most by default) with a fresh
``mmap`` and unmaps it on free. A training step allocates and frees blocks of hundreds of MB every
layer (tables, activations, gradients), so with the default each one is faulted in page by page
again every epoch: on a 200,000 x 128 table, concatenation ran 3-4x slower than from reused memory.
Raising the mmap and trim thresholds keeps such blocks in the heap for reuse, which is what the
caching allocators PyTorch's CPU tuning guide suggests (jemalloc, tcmalloc) do. The price is that a
worker holds on to its peak memory between steps instead of returning it. A pass that allocates
many blocks of varying sizes and keeps large tables beside them (the shared evaluation) runs under
:func:`freed_blocks_returned` instead, so that the heap does not grow by its fragments.
"""

from __future__ import annotations

import ctypes
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
KEEP_BYTES = 1 << 30  # blocks up to 1 GB come from (and go back to) the heap
RETURN_BYTES = 1 << 22  # under freed_blocks_returned: blocks above 4 MB are mapped apart and unmapped when freed


def keep_freed_memory() -> bool:
    """Make this process reuse freed large blocks instead of unmapping them. Returns whether the
    C library took the setting (glibc does; elsewhere nothing changes)."""
    return _thresholds(KEEP_BYTES)


@contextmanager
def freed_blocks_returned(nbytes: int = RETURN_BYTES) -> Iterator[bool]:
    """Within the ``with`` block, blocks above ``nbytes`` are mapped apart and unmapped when freed
    (and the heap's free top above ``nbytes`` is trimmed); afterwards the process keeps freed
    blocks (:func:`keep_freed_memory`). Yields whether the C library took the setting."""
    try:
        yield _thresholds(nbytes)
    finally:
        keep_freed_memory()


def _thresholds(nbytes: int) -> bool:
    """Set glibc's mmap and trim thresholds to ``nbytes``; whether the C library took them."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, nbytes)) and bool(mallopt(_M_TRIM_THRESHOLD, nbytes))


def release_free_memory() -> bool:
    """Collect garbage and hand the C heap's free pages back to the system (glibc's
    ``malloc_trim``), e.g. in a launcher that loaded and partitioned a graph before it waits on its
    workers. Returns whether the C library did (elsewhere nothing changes)."""
    gc.collect()
    if not sys.platform.startswith("linux"):
        return False
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return bool(trim(0))
