"""Checkpoints: everything needed to continue a run to exactly the losses it would have had.

One file per job, written by rank 0 after each epoch, atomically (a crash mid-write leaves the
previous checkpoint intact). It holds the model and optimizer state, every rank's random number
generator state (dropout masks), the epoch, and what the run was (graph checksum, workers, model
options), so a resume with different settings is refused instead of silently diverging. The input
and output widths are kept too, so that ``predict`` can rebuild the model from the file alone.
Beside it, ``best.pt`` holds the model of the epoch with the best validation accuracy (weights,
widths, identity and that epoch's accuracies; no optimizer state), rewritten whenever it improves.
"""

from __future__ import annotations

import io
from pathlib import Path

import torch

from commgraph.atomic import atomic_write
from commgraph.errors import TrainingError

FILE = "checkpoint.pt"
BEST = "best.pt"  # the model after the epoch with the best validation accuracy so far, for prediction


def save(directory: Path, state: dict, name: str = FILE) -> None:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    with atomic_write(Path(directory) / name) as handle:
        handle.write(buffer.getvalue())


def read(directory: Path, name: str = FILE) -> dict:
    """Checkpoint ``name`` in ``directory``, whatever run wrote it."""
    path = Path(directory) / name
    if not path.is_file():
        raise TrainingError(f"no checkpoint at {path}: train with --checkpoint-dir {directory} first")
    try:  # weights_only: tensors and plain data only, so a checkpoint from elsewhere cannot run code
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        if "global" in str(exc):  # the weights-only unpickler met a class or function to call
            raise TrainingError(
                f"{path} holds Python objects beyond tensors and plain data; commgraph does not "
                "load those (they could run code): use a checkpoint commgraph train wrote"
            ) from None
        raise TrainingError(
            f"{path} is not a readable checkpoint: truncated, or not written by commgraph train ({type(exc).__name__})"
        ) from None


def identity(graph_checksum: str, workers: int, config) -> dict:
    """What a checkpoint must share with the run that resumes from it: the graph, the workers, the
    model's shape and the sampler (None: full-graph training), from a ``TrainConfig``."""
    gnn = config.gnn
    return {
        "graph": graph_checksum,
        "workers": workers,
        "model": gnn.model,
        "layers": gnn.layers,
        "hidden": gnn.hidden,
        "heads": gnn.heads,
        "sampler": config.sampling.sampler,
    }


def load(directory: Path, identity: dict) -> dict:
    """The checkpoint to resume from, refused unless ``identity`` (graph, workers, model shape,
    sampler) matches the run that wrote it."""
    path = Path(directory) / FILE
    if not path.is_file():
        raise TrainingError(f"--resume: no checkpoint at {path}; run without --resume first")
    state = read(directory)
    for key, value in identity.items():
        if state["identity"].get(key) != value:
            raise TrainingError(
                f"--resume: {path} was written by a run with {key}={state['identity'].get(key)!r}, "
                f"this run has {key}={value!r}; use the same settings or another --checkpoint-dir"
            )
    return state
