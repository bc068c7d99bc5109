"""The peak host memory that putting a ``.npy`` feature table into host memory adds, measured in a
fresh process (issue 19: pinning a table must not double host memory).

``python -m commgraph.runtime.table_memory TABLE.npy HOW`` opens the file as a memory map, puts the
table into host memory one way and prints one JSON object; :func:`measure` runs that and returns a
:class:`TableMemory`. HOW is one of :data:`HOWS`:

- ``host_table``: :func:`~commgraph.runtime.features.host_table` (read into fresh memory);
- ``pin``: ``FeatureStore.create(table, "cuda", "host")``, read and pinned in place for zero-copy
  gathers (needs a GPU; the CUDA context is made before the measurement starts);
- ``naive``: ``np.array`` of the memory map (its mapped pages and the copy), for contrast.

The figure is the high-water mark of the process's resident set (``VmHWM``, reset just before
the load through ``/proc/self/clear_refs``; Linux only) less its resident set at that moment.
Reading the file also fills the kernel's page cache, which is not the process's memory (it is
reclaimable and not counted here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from commgraph.errors import FeatureError

HOWS = ("host_table", "pin", "naive")


@dataclass(frozen=True)
class TableMemory:
    """``table_bytes``: the table as float32; ``peak_added``: the resident-set high-water mark over
    what the process held before the load, in bytes."""

    table_bytes: int
    peak_added: int

    @property
    def ratio(self) -> float:
        return self.peak_added / self.table_bytes


def measure(path: str | Path, how: str, *, timeout: float = 600.0) -> TableMemory:
    """Load the ``.npy`` table at ``path`` the way ``how`` names, in a fresh interpreter.

    Raises:
        FeatureError: an unknown ``how``, or the measuring process failed (its last line is given).
    """
    if how not in HOWS:
        raise FeatureError(f"no way {how!r} to load a table; choose one of {', '.join(HOWS)}")
    done = subprocess.run(
        [sys.executable, "-m", __name__, str(path), how],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise FeatureError(f"measuring {how} of {path} failed: {last[0]}")
    return TableMemory(**json.loads(done.stdout.strip().splitlines()[-1]))  # its one line of JSON comes last


def status_bytes(field: str) -> int:
    """A memory field of this process's ``/proc/self/status`` (``VmRSS``, ``VmHWM``, ...) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _main(path: str, how: str) -> None:
    import numpy as np
    import torch

    from commgraph.runtime.features import FeatureStore, host_table

    if how == "pin":
        torch.cuda.init()  # the CUDA context's own memory is not the table's
    Path("/proc/self/clear_refs").write_text("5")  # the high-water mark restarts from the current RSS
    before = status_bytes("VmRSS")
    features = np.load(path, mmap_mode="r")
    if how == "host_table":
        kept = host_table(features)
    elif how == "naive":
        kept = np.array(features, dtype=np.float32)
    else:
        kept = FeatureStore.create(features, torch.device("cuda"), "host")
        if kept.method != "zero-copy":
            sys.exit(f"the table was not pinned for zero-copy gathers: {kept.describe()}")
    peak = status_bytes("VmHWM")
    print(json.dumps({"table_bytes": int(features.shape[0] * features.shape[1] * 4), "peak_added": peak - before}))
    del kept


if __name__ == "__main__":
    _main(*sys.argv[1:3])
