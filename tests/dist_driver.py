"""Test helper run as every rank of a local job: several training runs in one world, so the suite
pays the processes' start-up once per worker count rather than once per model.

Usage (through ``launch_local(..., module="dist_driver")``): ``python -m dist_driver SPEC.json``
where the spec names the partition set, an output folder, the runs and optionally the device
(default ``cpu``, so that runs compared with each other share one device) and optionally
``stream_chunk_bytes``, the chunks in which ``--features host`` streams layer 0, which it then does
on the CPU too, as on a GPU (see ``_host_placement_on_cpu``); rank 0 writes ``<out>/<run>.npz``
with the per-epoch losses, forward bytes per exchanged layer, final weights and, on a GPU, the
peak GPU memory allocated during the run.
"""

import gc
import json
import sys
from pathlib import Path

import numpy as np
import torch

from commgraph.runtime import join
from commgraph.runtime.features import FeatureStore
from commgraph.train import TrainConfig, streamed, train_worker


def _host_placement_on_cpu() -> None:
    """On a CPU device every store is placed ``cpu``; this marks a ``--features host`` store as host
    memory read by a device, so the executors stream layer 0 from it exactly as on a GPU (its rows
    are still gathered with ``index_select``)."""
    create = FeatureStore.create.__func__

    def host(cls, features, device, mode="auto", **options):
        store = create(cls, features, device, mode, **options)
        if mode == "host":
            store.placement = "host"
        return store

    FeatureStore.create = classmethod(host)


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    device = spec.get("device", "cpu")
    if "stream_chunk_bytes" in spec:
        streamed.CHUNK_BYTES = spec["stream_chunk_bytes"]
        if device == "cpu":
            _host_placement_on_cpu()
    world = join(60, device)
    for name, options in spec["runs"].items():
        if device == "cuda":  # the peak of this run alone: the last run's tensors are gone
            gc.collect()
            torch.cuda.reset_peak_memory_stats()
        result = train_worker(world, spec["partdir"], TrainConfig.build(**options, progress=False))
        peak = torch.cuda.max_memory_allocated() if device == "cuda" else -1
        if world.is_leader:
            params = {f"param:{k}": v.detach().cpu().numpy() for k, v in result.model.state_dict().items()}
            np.savez(
                Path(spec["out"]) / f"{name}.npz",
                loss=np.array([r["loss"] for r in result.history]),
                forward_bytes=np.array([r["halo_forward_bytes"] for r in result.history]),
                backward_bytes=np.array([r["halo_backward_bytes"] for r in result.history]),
                activation_bytes=np.array([r["activation_bytes"] for r in result.history]),
                widths=np.array(getattr(result.model, "widths", [])),  # R-GCN has none
                peak_device_bytes=peak,
                **params,
            )
    world.close()


if __name__ == "__main__":
    main()
