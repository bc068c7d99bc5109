"""What the bridge's loaders share: their arguments checked (``num_neighbors``, ``input_nodes``,
``batch_size``, the sampler and the DataLoader options), the batches of an epoch (as many on every
rank: :func:`most_batches`), a ``Data``'s edges in a set's CSR order (:func:`data_positions`) and
ids' positions among distinct nodes (:func:`local_positions`)."""

from __future__ import annotations

import math

import numpy as np
import torch

from commgraph.errors import BridgeError
from commgraph.pyg.link import search
from commgraph.pyg.world import session

# torch DataLoader options PyG scripts pass: accepted, without effect (batches are made in this process)
WORKER_OPTIONS = ("num_workers", "persistent_workers", "pin_memory", "prefetch_factor")
SAMPLERS = ("neighbor", "dgs")
KEY_SORT_NODES = 3_037_000_499  # the most nodes n with n * n < 2**63


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
    if sampler not in SAMPLERS:
        raise BridgeError(f"sampler must be one of {', '.join(SAMPLERS)}; got {sampler!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise BridgeError(f"batch_size must be an int >= 1; got {batch_size!r}")
    return int(batch_size)


def most_batches(num_seeds: int, batch_size: int) -> int:
    """The most batches any rank's seeds need (this rank has ``num_seeds``), through one all-reduce."""
    s = session()
    needs = [0.0] * s.world.size
    needs[s.world.rank] = math.ceil(num_seeds / batch_size)
    return int(max(s.comm.global_sum(needs)))


def epoch_batches(num_seeds: int, batch_size: int, steps: int, shuffle: bool, rng: np.random.Generator):
    """``steps`` batches of positions in a rank's ``num_seeds`` seeds: in order or, with ``shuffle``,
    in an order drawn from ``rng``; past its own batches a rank makes its first ones again (empty
    ones when it has no seeds)."""
    order = rng.permutation(num_seeds) if shuffle else np.arange(num_seeds)
    own = math.ceil(num_seeds / batch_size)
    for step in range(steps):
        at = (step % own) * batch_size if own else 0
        yield order[at : at + batch_size]


def data_positions(edge_index: torch.Tensor) -> np.ndarray:
    """For each edge of the CSR a set made from a ``Data`` holds (its distinct edges sorted by
    target, then source), the edge's position in the ``Data``'s ``edge_index`` (the first of
    repeated edges).

    Shapes:
        edge_index ``[2, E]`` -> ``[E']`` (its distinct edges)
    """
    edges = edge_index.detach().cpu().numpy().astype(np.int64, copy=False)
    n = int(edges.max(initial=-1)) + 1
    # stable sorts, so a repeated edge's first position comes first; one key where n * n fits int64
    # (20 times faster than lexsort for 4M edges)
    if n <= KEY_SORT_NODES:
        order = np.argsort(edges[1] * n + edges[0], kind="stable")
    else:
        order = np.lexsort((edges[0], edges[1]))
    src, dst = edges[0][order], edges[1][order]
    fresh = np.ones(order.shape[0], dtype=bool)
    fresh[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    return order[fresh]


def local_positions(nodes: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Positions in ``nodes`` (distinct) of ``ids``."""
    sorter = np.argsort(nodes)
    return sorter[search(nodes[sorter], ids)]
