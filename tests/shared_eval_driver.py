"""Test helper run as every rank of a local job: one evaluation pass of a seeded GNN through
:class:`~commgraph.train.shared_eval.SharedEvaluation` and through the full-graph barrier executor.

Usage (through ``launch_local(..., module="shared_eval_driver")``): ``python -m shared_eval_driver
SPEC.json``; the spec names the partition set, an output folder, the model (``model``, ``layers``,
``hidden``) and which in-edges it reads (``whole``: the whole graph's, else the part's). Each rank
writes ``<out>/rank-<r>.npz``: its owned node ids, both passes' logits, and the bytes of the
``commgraph-table`` memfds its process mapped while the pass ran (read from ``/proc/self/maps`` at
each layer's first chunk) and after it.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch

from commgraph.nn import GNN
from commgraph.runtime import join
from commgraph.runtime.features import FeatureStore
from commgraph.runtime.job import Job
from commgraph.runtime.shared_table import NAME
from commgraph.train.executor import BarrierExecutor
from commgraph.train.shared_eval import SharedEvaluation


def _mapped_tables() -> int:
    """The bytes of the shared tables this process maps."""
    spans = [line.split()[0] for line in Path("/proc/self/maps").read_text().splitlines() if f"memfd:{NAME}" in line]
    return sum(int(end, 16) - int(start, 16) for start, end in (span.split("-") for span in spans))


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    world = join(60, "cpu")
    job = Job(world, spec["partdir"])
    part = job.part
    classes = int(max(job.comm.all_gather_object(int(np.max(part.labels)) + 1)))
    torch.manual_seed(3)
    model = GNN(spec["model"], part.features.shape[1], spec["hidden"], classes, layers=spec["layers"], dropout=0.5)
    model.eval()
    store = FeatureStore.create(part.features, world.device)
    shared = SharedEvaluation(job, store, whole=spec["whole"])
    during: dict[int, int] = {}  # layer: table bytes mapped at its first chunk
    layer, from_rows = model.layer, model.from_rows

    def watched(method):
        def call(index, *args, **kwargs):
            during.setdefault(index, _mapped_tables())
            return method(index, *args, **kwargs)

        return call

    model.layer, model.from_rows = watched(layer), watched(from_rows)
    with torch.no_grad():
        logits = shared.forward(model)
        model.layer, model.from_rows = layer, from_rows
        reference = BarrierExecutor(job, job.wire(4 * spec["hidden"]), store, streamed=True).forward(model)
    np.savez(
        Path(spec["out"]) / f"rank-{world.rank}.npz",
        owned=np.asarray(part.owned),
        shared=logits.numpy(),
        reference=reference.numpy(),
        during=np.array([during[index] for index in sorted(during)]),
        after=np.array(_mapped_tables()),
    )


if __name__ == "__main__":
    main()
