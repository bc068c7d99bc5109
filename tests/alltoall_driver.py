"""Test helper run as every rank of a local job: sends skewed blocks with torch's
all_to_all_single and with the matching all-to-all (bvn and alg3), and writes whether they agree.

Usage (through ``launch_local(..., module="alltoall_driver")``): ``python -m alltoall_driver
SPEC.json``, the spec naming an output folder and seeds. For each seed every rank draws the same
skewed count matrix (some blocks empty); rank r's row for rank j holds values encoding (r, j, row).
Rank r writes ``<out>/rank<r>.json``: per seed and method whether the output equals native's, and
the rows it received.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from commgraph.runtime import Communicator, join
from commgraph.runtime.alltoall import MatchingAllToAll, gather_counts


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    torch.set_num_threads(1)
    world = join(60, "cpu")
    comm = Communicator(world)
    n, rank = world.size, world.rank
    result = {}
    for seed in spec["seeds"]:
        rng = np.random.default_rng(seed)
        counts = rng.zipf(1.6, size=(n, n)).clip(max=400) * (rng.random((n, n)) < 0.8)
        width = 3
        rows = [
            torch.arange(counts[rank, j] * width, dtype=torch.float64).reshape(-1, width) + 1e6 * rank + 1e4 * j
            for j in range(n)
        ]
        data = torch.cat(rows)
        native = torch.empty(int(counts[:, rank].sum()), width, dtype=torch.float64)
        dist.all_to_all_single(
            native, data, [int(c) for c in counts[:, rank]], [int(c) for c in counts[rank]], group=world.grad_group
        )
        gathered = gather_counts(comm, counts[rank].tolist())
        for method in ("bvn", "alg3"):
            output = torch.full_like(native, -1.0)
            MatchingAllToAll(comm, method)(output, data, gathered)
            result[f"{seed}/{method}"] = {
                "equal": bool(torch.equal(output, native)),
                "rows": int(output.shape[0]),
                "counts_agree": bool((gathered == counts).all()),
            }
    Path(spec["out"], f"rank{rank}.json").write_text(json.dumps(result))
    world.close()


if __name__ == "__main__":
    main()
