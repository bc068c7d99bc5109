"""Test helper run as each rank of a 2-rank local job, as if on two machines that differ: rank 1
pretends to have a GPU per local worker (torch's device queries patched), rank 0 has none (also
patched, so the test means the same on a machine with GPUs), and both join with ``--device auto``.
Exits 3 after printing the error when the join refuses, 0 when it joins."""

import os
import sys
import types

import torch

from commgraph.errors import TrainingError
from commgraph.runtime import join


def main() -> None:
    if int(os.environ["RANK"]) == 1:
        torch.cuda.is_available = lambda: True
        torch.cuda.device_count = lambda: 2
        torch.cuda.set_device = lambda device: None
        torch.cuda.current_device = lambda: 0
        torch.cuda.get_device_properties = lambda device: types.SimpleNamespace(uuid="GPU-fake")
    else:
        torch.cuda.is_available = lambda: False
        torch.cuda.device_count = lambda: 0
    try:
        join(30).close()
    except TrainingError as exc:
        print(f"rank {os.environ['RANK']}: {exc}", flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()
