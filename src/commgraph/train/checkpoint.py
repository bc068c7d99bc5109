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
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        if "global" in str(exc):  # the weights-only unpickler met a class or function to call
            raise TrainingError(
                f"{path} holds Python objects beyond tensors and plain data; commgraph does not "
                "load those (they could run code): use a checkpoint commgraph train wrote"
            ) from None
        raise TrainingError(
            f"{path} is not a readable checkpoint: truncated, or not written by commgraph train ({type(exc).__name__})"
        ) from None
    wrong = _not_a_checkpoint(state)
    if wrong is not None:
        raise TrainingError(
            f"{path} is not a commgraph checkpoint ({wrong}): use one commgraph train wrote with --checkpoint-dir"
        )
    return state


# what every checkpoint's identity holds: field -> (type, least value or None)
IDENTITY = {
    "graph": (str, None),
    "workers": (int, 1),
    "model": (str, None),
    "layers": (int, 1),
    "hidden": (int, 1),
    "heads": (int, 1),
    "sampler": ((str, type(None)), None),
}


def _not_a_checkpoint(state: object) -> str | None:
    """What ``state`` lacks of a checkpoint (None: nothing): a dict with the run's identity, the
    model's weights, the epoch and (since prediction support) the input and output widths."""
    if not isinstance(state, dict):
        return f"it holds a {type(state).__name__}, not a dict"
    identity = state.get("identity")
    if not isinstance(identity, dict):
        return "no identity of the run that wrote it"
    for key, (kinds, least) in IDENTITY.items():
        value = identity.get(key)
        if isinstance(value, bool) or not isinstance(value, kinds) or (least is not None and value < least):
            return f"identity.{key} is {value!r}"
    model = state.get("model")
    if not isinstance(model, dict) or not all(isinstance(v, torch.Tensor) for v in model.values()):
        return "no model weights"
    epoch = state.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        return f"epoch is {epoch!r}"
    widths = state.get("widths", {"in": 1, "out": 1})
    if not isinstance(widths, dict) or not all(_is_count(widths.get(key)) for key in ("in", "out")):
        return f"widths is {widths!r}"
    return None


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


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
    workers = state["identity"]["workers"]
    rng = state.get("rng")
    if (
        not isinstance(state.get("optimizer"), dict)
        or not isinstance(rng, list)
        or len(rng) != workers
        or not all(isinstance(r, torch.Tensor) and r.dtype == torch.uint8 for r in rng)
    ):
        raise TrainingError(
            f"--resume: {path} holds no optimizer state or no random state for each of its {workers} worker(s) "
            "(a best.pt, or damaged): resume from the checkpoint.pt commgraph train wrote"
        )
    for key, value in identity.items():
        if state["identity"].get(key) != value:
            raise TrainingError(
                f"--resume: {path} was written by a run with {key}={state['identity'].get(key)!r}, "
                f"this run has {key}={value!r}; use the same settings or another --checkpoint-dir"
            )
    return state
