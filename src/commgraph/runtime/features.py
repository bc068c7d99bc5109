"""A feature table that GPUs read directly from host memory (PyTorch-Direct's unified tensor).

PyTorch-Direct (Min et al., "Large Graph Convolutional Network Training with GPU-Oriented Data
Communication Architecture", section 4) keeps a graph's features in pinned host memory and lets GPU
threads gather the rows a step needs over PCIe, instead of having the CPU gather them into a
staging buffer and copy that. On the stock torch wheel this takes three pieces:

- pinning in place: the table's own pages are registered with CUDA (``cudaHostRegister``), so no
  second, pinned copy of the table is made. A table read from a ``.npy`` file (a memory map, as a
  partition set's parts are) is read once into fresh page-aligned memory, which is then
  registered: host memory holds the table once.
- the gather: a Triton kernel (:mod:`commgraph.runtime.gather_kernel`) run against the host
  pointer, with the circular-shift alignment of the paper's section 4.5 for rows that are not a
  whole number of 128-byte lines.
- fallbacks with the same API: on a CPU device, ``index_select`` on the table as it is; on a GPU
  with zero-copy turned off (or without Triton, or when CUDA refuses the registration),
  PyTorch's own path: the CPU gathers the rows into a pinned buffer, which is copied to the GPU
  with ``non_blocking``.

Where the table goes (GPU memory or host memory) is decided by
:func:`commgraph.plan.features.place_features`.
"""

from __future__ import annotations

import mmap
import warnings
import weakref

import numpy as np
import torch

from commgraph.errors import FeatureError
from commgraph.plan.features import place_features
from commgraph.runtime import gather_kernel
from commgraph.runtime.feature_cache import FeatureCache, hot_rows

CHUNK_BYTES = 1 << 22  # a table is read or converted 4 MB at a time
_REGISTER_FLAGS = 1 | 2  # cudaHostRegisterPortable | cudaHostRegisterMapped


class FeatureStore:
    """Rows of a ``[num_rows, width]`` float32 feature table, gathered onto ``device``.

    ``placement`` is ``gpu`` (the table in GPU memory), ``host`` (in host memory, read by the GPU),
    ``cpu`` (a CPU device) or ``disk`` (left in its file under a memory budget); ``method`` how a
    gather runs: ``index_select``, ``zero-copy`` (the Triton kernel on pinned host memory),
    ``staged`` (a CPU gather into a pinned buffer, then a ``non_blocking`` copy) or ``cache``
    (:class:`~commgraph.runtime.feature_cache.FeatureCache`: hot rows in memory, the rest read
    from the file). Make one with :meth:`create` or :meth:`on_disk`. A ``disk`` store's ``table``
    is the file's memory map in its own dtype (float32 or float16), for passes that read it whole.
    """

    def __init__(
        self,
        table: torch.Tensor,
        device: torch.device,
        placement: str,
        method: str,
        reason: str,
        cache: FeatureCache | None = None,
    ):
        self.table, self.device = table, device
        self.placement, self.method, self.reason = placement, method, reason
        self.cache = cache
        self._staging: torch.Tensor | None = None  # the staged path's pinned buffer
        self._copied: torch.cuda.Event | None = None  # recorded after the buffer's last copy

    @classmethod
    def on_disk(cls, features: np.memmap, device: torch.device, cache_bytes: int, degree: np.ndarray) -> FeatureStore:
        """A store of the ``.npy`` file ``features`` (a memory map) read through a
        :class:`~commgraph.runtime.feature_cache.FeatureCache` of ``cache_bytes`` of float32
        rows, the rows of highest ``degree`` (one per row of the table).

        Raises:
            FeatureError: as :class:`~commgraph.runtime.feature_cache.FeatureCache`.
        """
        capacity = cache_bytes // max(4 * int(features.shape[1]), 1)
        cache = FeatureCache(features, hot_rows(degree[: features.shape[0]], capacity))
        with warnings.catch_warnings():  # a read-only map: torch warns about writes, and none happen
            warnings.simplefilter("ignore", UserWarning)
            table = torch.from_numpy(features)
        share = cache.hot.shape[0] / max(features.shape[0], 1)
        reason = (
            f"in {features.filename} ({features.dtype}), its {cache.hot.shape[0]} rows of highest degree "
            f"({share:.0%}) cached in {cache.resident_bytes / 1e9:.2f} GB under the memory budget"
        )
        return cls(table, torch.device(device), "disk", "cache", reason, cache)

    @classmethod
    def create(
        cls, features: np.ndarray, device: torch.device, mode: str = "auto", *, zero_copy: bool = True
    ) -> FeatureStore:
        """A store of ``features`` (``[num_rows, width]``, any real dtype, in memory or a memory map)
        for gathers onto ``device``; ``mode`` is ``auto``, ``gpu`` or ``host`` (see
        :func:`~commgraph.plan.features.place_features`). ``zero_copy=False`` makes a host table
        use PyTorch's own staged path.

        Raises:
            FeatureError: not a 2-D table, an unknown mode, or ``gpu`` for a table that does not fit.
        """
        device = torch.device(device)
        if features.ndim != 2:
            raise FeatureError(f"a feature table is 2-D [rows, width], got shape {features.shape}")
        table_bytes = features.shape[0] * features.shape[1] * gather_kernel.ELEMENT_BYTES
        free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
        chosen = place_features(mode, device.type, table_bytes, free)
        if chosen.placement == "cpu":
            return cls(_as_float32(features), device, "cpu", "index_select", chosen.reason)
        if chosen.placement == "gpu":
            return cls(_as_float32(features).to(device), device, "gpu", "index_select", chosen.reason)
        table = host_table(features)
        method, why = _host_method(table, zero_copy)
        store = cls(table, device, "host", method, chosen.reason + (f"; {why}" if why else ""))
        if method == "zero-copy":  # the pages stay pinned while the store lives
            weakref.finalize(store, _unpin, table)
        return store

    @property
    def num_rows(self) -> int:
        return self.table.shape[0]

    @property
    def width(self) -> int:
        return self.table.shape[1]

    def describe(self) -> str:
        """One line: where the table is, why, and how rows are gathered."""
        how = {
            "index_select": "index_select",
            "staged": "CPU gather into a pinned buffer, then a copy",
            "zero-copy": "GPU threads read host memory (zero-copy Triton gather"
            + (", circular-shift aligned)" if gather_kernel.needs_shift(self.width) else ")"),
            "cache": "the cache, then sorted coalesced reads of the file, read ahead a batch",
        }
        return f"features: {self.reason}; gathers: {how[self.method]}"

    def gather(self, index: torch.Tensor) -> torch.Tensor:
        """Rows ``index`` of the table as a float32 tensor on the store's device.

        Args:
            index: ``[n]`` integer row ids (``n >= 1``), on any device.

        Returns:
            ``[n, width]`` float32 on ``device``.

        Raises:
            FeatureError: ``index`` is not 1-D integers, is empty, or holds a row id out of range.
        """
        _check_index(index, self.num_rows)
        if self.method == "cache":
            return self.cache.read(index.cpu().numpy()).to(self.device)
        if self.method == "index_select":
            return self.table.index_select(0, index.to(self.table.device, torch.int64))
        if self.method == "staged":
            return self._staged(index)
        index = index.to(self.device, torch.int64).contiguous()
        out = torch.empty((index.shape[0], self.width), dtype=torch.float32, device=self.device)
        with torch.cuda.device(self.device):  # Triton launches on the current device
            return gather_kernel.gather_rows(self.table, index, out)

    def _staged(self, index: torch.Tensor) -> torch.Tensor:
        """PyTorch's own path: CPU gather into a pinned buffer, ``non_blocking`` copy to the GPU. The
        buffer is reused once its previous copy has left it."""
        index = index.to("cpu", torch.int64)
        if self._copied is not None:
            self._copied.synchronize()
        if self._staging is None or self._staging.shape[0] < index.shape[0]:
            self._staging = torch.empty((index.shape[0], self.width), dtype=torch.float32, pin_memory=True)
        rows = torch.index_select(self.table, 0, index, out=self._staging[: index.shape[0]])
        out = rows.to(self.device, non_blocking=True)
        self._copied = torch.cuda.Event()
        self._copied.record()
        return out


def gathered(store: FeatureStore, rows: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """Rows ``rows`` of ``store`` on ``device`` (default: ``rows``' device), where an empty ``rows``
    gives an empty table. A store in host memory gathers onto the CPU with ``index_select`` on the
    table itself, so rows bound for host memory never pass through the GPU."""
    device = rows.device if device is None else torch.device(device)
    if rows.numel() == 0:
        return torch.empty((0, store.width), device=device)
    if device.type == "cpu" and store.table.device.type == "cpu" and store.cache is None:
        _check_index(rows, store.num_rows)
        return store.table.index_select(0, rows.to("cpu", torch.int64))
    return store.gather(rows).to(device)


def _check_index(index: torch.Tensor, num_rows: int) -> None:
    if not isinstance(index, torch.Tensor) or index.ndim != 1 or index.dtype not in (torch.int64, torch.int32):
        what = (
            type(index).__name__
            if not isinstance(index, torch.Tensor)
            else f"{index.dtype} of shape {tuple(index.shape)}"
        )
        raise FeatureError(f"a feature gather takes a 1-D int64 tensor of row ids, got {what}")
    if index.numel() == 0:
        raise FeatureError("a feature gather got an empty index: ask for at least one row")
    low, high = (int(v) for v in torch.aminmax(index))  # one device-to-host sync on a GPU index
    if low < 0 or high >= num_rows:
        bad = low if low < 0 else high
        raise FeatureError(
            f"row id {bad} is out of range for a feature table of {num_rows} rows (valid: 0 to {num_rows - 1})"
        )


def _as_float32(features: np.ndarray) -> torch.Tensor:
    """The table as a CPU float32 tensor: the array itself when it is C-contiguous float32 (also a
    read-only memory map, which the store never writes), else one converted copy."""
    if features.dtype != np.float32 or not features.flags.c_contiguous:
        features = np.ascontiguousarray(features, dtype=np.float32)
    with warnings.catch_warnings():  # a read-only array: torch warns about writes, and none happen
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(features)


def host_table(features: np.ndarray) -> torch.Tensor:
    """The table in host memory that can be pinned in place, held once:

    - a writable C-contiguous float32 array in memory is used as it is;
    - a whole ``.npy`` memory map is read from its file straight into fresh page-aligned memory
      (its pages are never mapped into this process, so they do not count twice);
    - anything else is converted into fresh memory ``CHUNK_BYTES`` at a time.
    """
    if (
        features.dtype == np.float32
        and features.flags.c_contiguous
        and features.flags.writeable
        and not isinstance(features, np.memmap)
    ):
        return torch.from_numpy(features)
    rows, width = features.shape
    table = _page_aligned(rows, width)
    if table.numel() == 0:
        return table
    target = table.numpy()
    if _whole_file(features):
        _read_file(features, target)
    else:
        step = _chunk_rows(width, features.itemsize)
        for start in range(0, rows, step):
            np.copyto(target[start : start + step], features[start : start + step], casting="unsafe")
    return table


def _page_aligned(rows: int, width: int) -> torch.Tensor:
    """Fresh anonymous memory (page-aligned, so its rows line up with 128-byte lines) for a table."""
    nbytes = rows * width * gather_kernel.ELEMENT_BYTES
    if nbytes == 0:
        return torch.empty((rows, width), dtype=torch.float32)
    return torch.frombuffer(mmap.mmap(-1, nbytes), dtype=torch.float32).view(rows, width)


def _whole_file(features: np.ndarray) -> bool:
    """A memory map of a whole array in a file (``np.load(..., mmap_mode=...)``), not a view of one."""
    return (
        isinstance(features, np.memmap)
        and isinstance(features.base, mmap.mmap)
        and features.flags.c_contiguous
        and features.filename is not None
    )


def _read_file(features: np.memmap, target: np.ndarray) -> None:
    """Read a memory-mapped array's bytes from its file into ``target``, converting when its dtype is
    not native float32 (through a bounce buffer of ``CHUNK_BYTES``)."""
    rows, width = features.shape
    step = _chunk_rows(width, features.itemsize)
    bounce = None if features.dtype == np.float32 else np.empty((step, width), dtype=features.dtype)
    with open(features.filename, "rb") as handle:
        handle.seek(features.offset)
        for start in range(0, rows, step):
            part = target[start : start + step]
            into = part if bounce is None else bounce[: part.shape[0]]
            _read_exactly(handle, into, features.filename)
            if bounce is not None:
                np.copyto(part, into, casting="unsafe")


def _read_exactly(handle, into: np.ndarray, filename: str) -> None:
    view = memoryview(into).cast("B")
    done = 0
    while done < view.nbytes:
        got = handle.readinto(view[done:])
        if not got:
            raise FeatureError(f"{filename} ended before its array did: the file is truncated")
        done += got


def _chunk_rows(width: int, itemsize: int) -> int:
    return max(CHUNK_BYTES // max(width * itemsize, 1), 1)


def _host_method(table: torch.Tensor, zero_copy: bool) -> tuple[str, str]:
    """How a host table on a GPU machine is gathered, and why when it is not zero-copy. Zero-copy
    pins the table in place (``cudaHostRegister``, mapped into the GPU's address space)."""
    if not zero_copy:
        return "staged", "zero-copy turned off"
    if not gather_kernel.available():
        return "staged", "Triton is not installed, so no zero-copy kernel"
    if table.numel() == 0:
        return "staged", ""
    error = int(
        torch.cuda.cudart().cudaHostRegister(table.data_ptr(), table.numel() * table.element_size(), _REGISTER_FLAGS)
    )
    if error != 0:
        return "staged", f"CUDA refused to pin the table in place (cudaHostRegister error {error})"
    return "zero-copy", ""


def _unpin(table: torch.Tensor) -> None:
    torch.cuda.cudart().cudaHostUnregister(table.data_ptr())
