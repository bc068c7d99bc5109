"""The arguments of :class:`~commgraph.pyg.NeighborLoader` (and of the loaders built on its
checks), checked before any work: each bad one raises a :class:`~commgraph.errors.BridgeError` that
names the fix; and a memory budget sized as ``commgraph train --memory-budget`` sizes its cache
(:func:`budget_estimate`).
"""

from __future__ import annotations

import os

import numpy as np
import torch

from commgraph.errors import BridgeError, OptionError
from commgraph.plan.memory import JobShape, MemoryEstimate, estimate_memory
from commgraph.runtime.options import MEMORY_BUDGET_ENV
from commgraph.sample.options import STRUCTURES
from commgraph.sample.registry import bridge_samplers
from commgraph.train.sampling_options import PEER_ROWS
from commgraph.units import size

# torch DataLoader options PyG scripts pass: accepted, without effect (batches are made in this process)
WORKER_OPTIONS = ("num_workers", "persistent_workers", "pin_memory", "prefetch_factor")
FIRST_LAYERS = ("features", "owner")


def check_num_neighbors(num_neighbors) -> list[int]:
    """``num_neighbors`` as a list of ints, each ``>= 1`` or ``-1`` (every neighbour).

    Raises:
        BridgeError: not a non-empty list or tuple of such ints.
    """
    values = list(num_neighbors) if isinstance(num_neighbors, (list, tuple)) else []
    valid = [isinstance(v, (int, np.integer)) and not isinstance(v, bool) and (v >= 1 or v == -1) for v in values]
    if not values or not all(valid):
        raise BridgeError(
            f"num_neighbors must be a non-empty list of ints, each >= 1 or -1 (every neighbour), one per "
            f"layer, such as [15, 10]; got {num_neighbors!r}"
        )
    return [int(v) for v in values]


def input_ids(input_nodes, num_nodes: int) -> np.ndarray:
    """``input_nodes`` (None, a bool mask over every node, or integer node ids) as global ids, in
    the order given (a mask's in ascending order).

    Raises:
        BridgeError: a mask of another length, a float tensor, ids out of range or repeated.
    """
    if input_nodes is None:
        return np.arange(num_nodes, dtype=np.int64)
    values = torch.as_tensor(input_nodes)
    if values.dtype == torch.bool:
        if values.dim() != 1 or values.shape[0] != num_nodes:
            raise BridgeError(
                f"input_nodes is a mask of shape {list(values.shape)} but the graph has {num_nodes} nodes: pass a "
                "mask over every node (for a part from cg.partition, part.n_id[part.train_mask] are its ids)"
            )
        return np.flatnonzero(values.cpu().numpy())
    if values.is_floating_point() or values.is_complex() or values.dim() != 1:
        raise BridgeError(
            f"input_nodes must be a 1-D bool mask or 1-D integer node ids, got {values.dtype} of shape "
            f"{list(values.shape)}: pass data.train_mask or a LongTensor of ids"
        )
    ids = values.cpu().numpy().astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
        bad = int(ids.max()) if ids.max() >= num_nodes else int(ids.min())
        raise BridgeError(
            f"input_nodes holds node id {bad} but the graph has {num_nodes} nodes (ids 0..{num_nodes - 1})"
        )
    distinct, counts = np.unique(ids, return_counts=True)
    if distinct.shape[0] != ids.shape[0]:
        raise BridgeError(
            f"input_nodes holds node {int(distinct[counts > 1][0])} more than once: pass each id once "
            "(input_nodes.unique())"
        )
    return ids


def check_batching(batch_size, sampler: str, options: dict) -> int:
    """``batch_size`` as an int, once ``sampler`` and the DataLoader ``options`` are known ones.

    Raises:
        BridgeError: a ``batch_size`` that is not an int >= 1, another sampler, an unknown option.
    """
    unknown = sorted(set(options) - set(WORKER_OPTIONS))
    if unknown:
        raise BridgeError(f"cg.NeighborLoader has no option {unknown[0]!r}: leave it out")
    drawn = bridge_samplers()
    if sampler not in drawn:
        raise BridgeError(f"sampler must be one of {', '.join(drawn)}; got {sampler!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise BridgeError(f"batch_size must be an int >= 1; got {batch_size!r}")
    return int(batch_size)


def check_fetching(first_layer: str, peer_rows: str) -> None:
    """Raises:
    BridgeError: a ``first_layer`` or ``peer_rows`` the loader does not know."""
    if first_layer not in FIRST_LAYERS:
        raise BridgeError(f"first_layer must be one of {', '.join(FIRST_LAYERS)}; got {first_layer!r}")
    if peer_rows not in PEER_ROWS:
        raise BridgeError(f"peer_rows must be one of {', '.join(PEER_ROWS)}; got {peer_rows!r}")


def check_structure(structure: str | None, sampler: str, whole: bool) -> None:
    """Raises:
    BridgeError: a ``structure`` the loader does not know, or ``"partitioned"`` with DGS's
    sampler or the whole ``Data``."""
    if structure not in (None, *STRUCTURES):
        raise BridgeError(f"structure must be one of {', '.join(STRUCTURES)}; got {structure!r}")
    if structure == "partitioned" and sampler != "neighbor":
        raise BridgeError(
            "structure='partitioned' draws with sampler='neighbor' (DGS's draws follow this rank's masks): "
            "leave structure out"
        )
    if structure == "partitioned" and whole:
        raise BridgeError(
            "structure='partitioned' samples a partition set's parts, but every rank holds this whole Data: "
            "pass cg.partition(data) or the set's path, or leave structure out"
        )


def budget_bytes(memory_budget, whole: bool) -> int | None:
    """``memory_budget`` in bytes: an int, a size such as ``"8G"``, or None (the budget ``commgraph
    run --memory-budget`` gives its ranks in ``COMMGRAPH_MEMORY_BUDGET``, else none), for a loader
    of a part or a set's path (not ``whole``: the whole ``Data``).

    Raises:
        BridgeError: not an int >= 1 nor a size, or a budget for the whole ``Data``.
    """
    value = os.environ.get(MEMORY_BUDGET_ENV) if memory_budget is None else memory_budget
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = size(value)
        except OptionError as error:
            raise BridgeError(f"memory_budget: {error}") from None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise BridgeError(f"memory_budget must be bytes (an int >= 1) or a size such as '8G'; got {value!r}")
    if whole:
        raise BridgeError(
            "memory_budget reads a partition set's features from its files, but every rank holds this whole "
            "Data: pass cg.partition(data) or the set's path"
        )
    return int(value)


def budget_estimate(pset, shape: JobShape) -> MemoryEstimate:
    """``estimate_memory`` of a loader's job under its budget (``shape.memory_budget``), as
    ``commgraph train --memory-budget`` sizes its feature cache.

    Raises:
        BridgeError: the budget is below the job's minimum.
    """
    estimate = estimate_memory(pset, shape)
    if estimate.budget < estimate.minimum_bytes:
        raise BridgeError(
            f"memory_budget {estimate.budget / 1e9:.2f} GB is below this loader's minimum of "
            f"{estimate.minimum_bytes / 1e9:.2f} GB (the parts its machine holds resident): raise it to at least "
            f"{estimate.minimum_bytes / 1e9:.2f} GB, or lower batch_size or num_neighbors"
        )
    return estimate
