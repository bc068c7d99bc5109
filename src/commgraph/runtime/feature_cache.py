"""A worker's feature rows read from its part's file through a cache, for training under a memory
budget (``--memory-budget``; :mod:`commgraph.plan.memory` sizes the cache).

What the out-of-core systems teach, kept to what a mini-batch trainer on one file needs:

- **hot rows stay** (Ginex, Park et al., VLDB 2022, and GraphBolt's disk store): the ``capacity``
  rows of highest in-degree are read once into memory; a power-law graph's batches reach them
  most often.
- **a batch's reads are few and long** (MariusGNN, Waleffe et al., EuroSys 2023; DiskGNN, Liu et
  al., 2024): a batch's missing rows are read sorted by row id, and rows at most ``gap`` rows
  apart are one read (:func:`coalesce`): ``os.preadv`` of the whole run into one buffer, the rows
  between them read and dropped. Reading a gap of a few rows costs less than a second request.
- **reads overlap compute**: :meth:`FeatureCache.prefetch` hands a batch's rows to a reader
  thread (``os.preadv`` and numpy's copies release the GIL), which stages them while the step
  before computes; :meth:`FeatureCache.advance` makes the oldest staged batch the one reads are
  served from.
- **fp16 on disk, fp32 in the model**: a ``float16`` file is read as it is and widened on read
  (the cache holds float32 rows, so a step gets the same values whichever level served them).

The values are the file's: a row read from the cache, the staged batch or the disk is the same
float32 row, so a run under a budget computes what an uncapped one does, bit for bit.

Counters (:class:`CacheCounts`): rows served from the hot rows (``hits``) and read from the file
(``misses``; a staged batch's rows are counted when staged, once), the bytes of those missing rows
(``missed_bytes``), the bytes the reads asked for (``requested_bytes``: runs with their gaps) and
what the process read from storage (``disk_bytes``: ``/proc/self/io``'s ``read_bytes`` since the
cache was made; page-cache hits read nothing).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from commgraph.errors import FeatureError

GAP_BYTES = 1 << 14  # rows at most this many bytes apart are read in one request (the kernel reads whole pages)
IO = "/proc/self/io"


@dataclass
class CacheCounts:
    """What the cache served and read (see the module's description)."""

    hits: int = 0
    misses: int = 0
    missed_bytes: int = 0
    requested_bytes: int = 0
    disk_bytes: int = 0

    def to_dict(self) -> dict:
        return {
            "cache_hits": self.hits,
            "cache_misses": self.misses,
            "cache_missed_bytes": self.missed_bytes,
            "cache_requested_bytes": self.requested_bytes,
            "cache_disk_bytes": self.disk_bytes,
        }


@dataclass(frozen=True)
class Runs:
    """Coalesced reads of sorted rows: run ``r`` covers rows ``first[r]..last[r]``."""

    first: np.ndarray
    last: np.ndarray


def coalesce(rows: np.ndarray, gap: int) -> Runs:
    """The runs that read sorted, distinct ``rows``: a new run starts where a row is more than
    ``gap`` rows past the one before it.

    Shapes: ``rows [m]`` -> ``first, last [r]``, ``r <= m``.
    """
    if rows.shape[0] == 0:
        return Runs(rows[:0], rows[:0])
    breaks = np.flatnonzero(np.diff(rows) > gap + 1) + 1
    return Runs(rows[np.concatenate([[0], breaks])], rows[np.concatenate([breaks - 1, [rows.shape[0] - 1]])])


@dataclass
class _Staged:
    """A batch's rows read ahead: sorted distinct row ids and their float32 rows."""

    rows: np.ndarray
    values: np.ndarray


class FeatureCache:
    """Rows of a ``[num_rows, width]`` ``.npy`` file (float32 or float16), read as float32.

    Args:
        features: the file as a memory map (``np.load(path, mmap_mode="r")``); only its file name,
            offset, dtype and shape are used: rows are read with ``os.preadv``, never through the map.
        hot: row ids to keep in memory (any order; the caller picks them, e.g. by degree).
        gap: rows at most this far apart are read in one request (default: :data:`GAP_BYTES` of rows).

    Raises:
        FeatureError: not a 2-D float32/float16 memory map of a whole file, or a hot row out of range.
    """

    def __init__(self, features: np.memmap, hot: np.ndarray, gap: int | None = None):
        if not isinstance(features, np.memmap) or features.ndim != 2 or features.filename is None:
            raise FeatureError("a feature cache reads a 2-D .npy file opened with np.load(path, mmap_mode='r')")
        if features.dtype not in (np.float32, np.float16) or not features.flags.c_contiguous:
            raise FeatureError(
                f"a feature cache reads float32 or float16 rows; {features.filename} holds {features.dtype}"
            )
        self.num_rows, self.width = features.shape
        self.dtype, self.offset = features.dtype, int(features.offset)
        self.row_bytes = self.width * self.dtype.itemsize
        self.gap = max(GAP_BYTES // max(self.row_bytes, 1), 0) if gap is None else gap
        self._file = os.open(features.filename, os.O_RDONLY)
        os.posix_fadvise(self._file, 0, 0, os.POSIX_FADV_RANDOM)  # each run is read whole: no readahead past it
        self.counts = CacheCounts()
        self._lock = threading.Lock()
        self._io_start = _read_bytes()
        self.hot = np.unique(np.asarray(hot, dtype=np.int64))
        if self.hot.shape[0] and (self.hot[0] < 0 or self.hot[-1] >= self.num_rows):
            raise FeatureError(f"hot rows must lie in 0..{self.num_rows - 1}")
        self.resident = self._read_sorted(self.hot)
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="commgraph-reader")
        self._ahead: list[Future] = []
        self._staged: _Staged | None = None

    @property
    def resident_bytes(self) -> int:
        return int(self.resident.nbytes)

    def read(self, rows: np.ndarray) -> torch.Tensor:
        """Rows ``rows`` (repeats allowed) as a ``[n, width]`` float32 tensor: hot rows from
        memory, the staged batch's from its buffer, the rest read from the file now.

        Raises:
            FeatureError: a row id out of range.
        """
        rows = np.asarray(rows, dtype=np.int64)
        if rows.shape[0] and (rows.min() < 0 or rows.max() >= self.num_rows):
            raise FeatureError(f"row ids must lie in 0..{self.num_rows - 1}")
        unique, inverse = np.unique(rows, return_inverse=True)
        out = np.empty((unique.shape[0], self.width), dtype=np.float32)
        left = self._fill(out, unique, self.hot, self.resident, count=self._staged is None)  # staged: counted
        if self._staged is not None:
            left = self._fill(out, unique, self._staged.rows, self._staged.values, mask=left, count=False)
        if left.any():
            missing = unique[left]
            out[left] = self._read_sorted(missing)
            self._count(misses=missing.shape[0])
        return torch.from_numpy(out[inverse])

    def prefetch(self, rows: np.ndarray) -> None:
        """Read the cold rows of a coming batch (``rows``, any order) on the reader thread."""
        self._ahead.append(self._reader.submit(self._stage, np.unique(np.asarray(rows, dtype=np.int64))))

    def advance(self) -> None:
        """Serve reads from the oldest prefetched batch (waiting for its reads); with none
        prefetched, from the hot rows and the file alone."""
        self._staged = self._ahead.pop(0).result() if self._ahead else None

    def counts_now(self) -> CacheCounts:
        """The counters, with the bytes this process has read from storage since the cache was made."""
        with self._lock:
            self.counts.disk_bytes = _read_bytes() - self._io_start
            return CacheCounts(**vars(self.counts))

    def close(self) -> None:
        self._reader.shutdown(wait=True, cancel_futures=True)
        if self._file >= 0:
            os.close(self._file)
            self._file = -1

    def __del__(self) -> None:
        if getattr(self, "_file", -1) >= 0:
            os.close(self._file)

    # -- internals ----------------------------------------------------------------------------------

    def _stage(self, rows: np.ndarray) -> _Staged:
        position = np.searchsorted(self.hot, rows)
        hot = position < self.hot.shape[0]
        hot[hot] = self.hot[position[hot]] == rows[hot]
        cold = rows[~hot]
        self._count(hits=int(hot.sum()), misses=cold.shape[0])
        return _Staged(cold, self._read_sorted(cold))

    def _fill(self, out, unique, rows, values, mask=None, count=True) -> np.ndarray:
        """Copy into ``out`` the ``unique`` ids found among sorted ``rows`` (their ``values``),
        where ``mask`` (default: all) is set; the mask of those still missing."""
        left = np.ones(unique.shape[0], bool) if mask is None else mask
        if rows.shape[0] == 0:
            return left
        position = np.minimum(np.searchsorted(rows, unique), rows.shape[0] - 1)
        found = left & (rows[position] == unique)
        out[found] = values[position[found]]
        if count:
            self._count(hits=int(found.sum()))
        return left & ~found

    def _count(self, hits: int = 0, misses: int = 0, requested: int = 0) -> None:
        with self._lock:  # the reader thread counts too
            self.counts.hits += hits
            self.counts.misses += misses
            self.counts.missed_bytes += misses * self.row_bytes
            self.counts.requested_bytes += requested

    def _read_sorted(self, rows: np.ndarray) -> np.ndarray:
        """Sorted distinct ``rows`` read from the file in coalesced runs, as float32."""
        out = np.empty((rows.shape[0], self.width), dtype=np.float32)
        runs = coalesce(rows, self.gap)
        starts = np.searchsorted(rows, runs.first)
        ends = np.searchsorted(rows, runs.last, side="right")
        longest = int((runs.last - runs.first).max(initial=-1)) + 1
        buffer = np.empty((longest, self.width), dtype=self.dtype)
        for first, last, a, b in zip(runs.first.tolist(), runs.last.tolist(), starts.tolist(), ends.tolist()):
            span = buffer[: last - first + 1]
            self._pread(span, self.offset + first * self.row_bytes)
            out[a:b] = span[rows[a:b] - first]  # widened from float16 where the file holds it
        return out

    def _pread(self, into: np.ndarray, offset: int) -> None:
        view = memoryview(into).cast("B")
        done = 0
        while done < view.nbytes:
            got = os.preadv(self._file, [view[done:]], offset + done)
            if got == 0:
                raise FeatureError(f"the feature file ended at byte {offset + done}: it is truncated")
            done += got
        self._count(requested=view.nbytes)


def _read_bytes() -> int:
    """``read_bytes`` of ``/proc/self/io``: what this process has had read from storage (0 where
    the system does not say)."""
    try:
        with open(IO) as handle:
            return next(int(line.split()[1]) for line in handle if line.startswith("read_bytes:"))
    except (OSError, StopIteration):
        return 0


def hot_rows(degree: np.ndarray, capacity: int) -> np.ndarray:
    """The ``capacity`` rows of highest ``degree`` (ties: the lower row id), ascending."""
    capacity = max(0, min(capacity, degree.shape[0]))
    if capacity == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(-np.asarray(degree, dtype=np.int64), kind="stable")[:capacity]
    return np.sort(order)
