"""Test helper: the peak resident memory that putting a ``.npy`` feature table into host memory adds.

Usage: ``python features_rss_driver.py TABLE.npy HOW`` where HOW is ``host_table`` (the store's
read-into-fresh-memory path), ``naive`` (``np.array`` of the memory map: its mapped pages and the
copy, for contrast) or ``pin`` (``FeatureStore.create(..., "cuda", "host")``: read and pin in
place; needs a GPU). Prints one JSON object: ``table_bytes`` (as float32) and ``peak_added`` (the
high-water mark of the resident set over what it was before, in bytes).
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch

from commgraph.runtime.features import FeatureStore, host_table


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {key}")


def main() -> None:
    path, how = sys.argv[1], sys.argv[2]
    if how == "pin":
        torch.cuda.init()  # the CUDA context's own memory is not the table's
    Path("/proc/self/clear_refs").write_text("5")  # the high-water mark starts at the current RSS
    before = _status("VmRSS")
    features = np.load(path, mmap_mode="r")
    if how == "host_table":
        kept = host_table(features)
    elif how == "naive":
        kept = np.array(features, dtype=np.float32)
    else:
        kept = FeatureStore.create(features, torch.device("cuda"), "host")
        assert kept.method == "zero-copy", kept.describe()
    peak = _status("VmHWM")
    print(json.dumps({"table_bytes": int(features.shape[0] * features.shape[1] * 4), "peak_added": peak - before}))
    del kept


if __name__ == "__main__":
    main()
