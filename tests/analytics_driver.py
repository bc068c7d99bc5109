"""Test helper run as every rank of a local job: runs every algorithm of :mod:`commgraph.analytics` on
each partition set of a spec, exchanging through the job's all-gather plan, and rank 0 writes the
results.

Usage (through ``launch_local(..., module="analytics_driver")``): ``python -m analytics_driver
SPEC.json``, the spec giving ``runs`` (name, partition set, options) and an output folder; rank 0
writes ``<out>/<name>.npz`` with the values, the BFS parents, iterations and bytes.
"""

import json
import sys
from pathlib import Path

import numpy as np

from commgraph.analytics import AnalyzeOptions
from commgraph.analytics.worker import run_worker
from commgraph.runtime import join
from commgraph.runtime.job import JobOptions


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    world = join(60, "cpu")
    for run in spec["runs"]:
        result = run_worker(world, Path(run["partdir"]), AnalyzeOptions(**run["options"]), JobOptions(plan=run["plan"]))
        if result is not None:
            np.savez(
                Path(spec["out"]) / f"{run['name']}.npz",
                values=result.values,
                parents=np.array([]) if result.parents is None else result.parents,
                iterations=result.iterations,
                bytes=result.bytes,
                exchanges=result.exchanges,
            )
    world.close()


if __name__ == "__main__":
    main()
