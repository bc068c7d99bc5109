r"""Link-prediction metrics over every rank's scores: :func:`auc`, :func:`hits_at_k`, :func:`mrr`.

Each rank scores its share of the label edges (:func:`~commgraph.pyg.edge_embeddings`); these
gather every rank's scores (the communicator's all-gather) and compute the metric of the whole set,
exactly, in float64: the same value on every rank, equal to the one-process script's.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np
import torch

from commgraph.errors import BridgeError
from commgraph.pyg.world import session


def _numpy(values, name: str) -> np.ndarray:
    array = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
    if array.size and not np.isfinite(array.astype(np.float64, copy=False)).all():
        raise BridgeError(f"{name} holds NaN or infinite scores")
    return array


def _gathered(*arrays: np.ndarray) -> list[np.ndarray]:
    """Each of ``arrays`` concatenated over the ranks (in rank order)."""
    s = session()
    if s.world.size == 1:
        return list(arrays)
    every = s.comm.all_gather_object(arrays)
    return [np.concatenate([mine[i] for mine in every]) for i in range(len(arrays))]


def _ranked_against(pos: np.ndarray, neg_sorted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each positive: the negatives below it, and those equal to it."""
    below = np.searchsorted(neg_sorted, pos, side="left")
    return below, np.searchsorted(neg_sorted, pos, side="right") - below


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    r"""The area under the ROC curve of every rank's scores: the probability that a positive
    scores above a negative, ties counting one half (Mann-Whitney),

    .. math::
        \mathrm{AUC} = \frac{1}{|P||N|} \sum_{p \in P} \sum_{n \in N}
        \left( [s_p > s_n] + \tfrac{1}{2} [s_p = s_n] \right),

    as ``sklearn.metrics.roc_auc_score`` computes it.

    Args:
        scores: this rank's scores (logits or probabilities).
        labels: their labels, 1 (positive) or 0.

    Returns:
        float: the AUC of every rank's scores, the same on every rank.

    Shapes:
        - **scores, labels:** ``[E_r]``

    Raises:
        BridgeError: shapes that differ, labels other than 0 and 1, no positive or no negative
        over all ranks.
    """
    scores, labels = _numpy(scores, "scores").reshape(-1), _numpy(labels, "labels").reshape(-1)
    if scores.shape != labels.shape:
        raise BridgeError(f"scores has {scores.shape[0]} entries but labels {labels.shape[0]}")
    if not np.isin(labels, (0, 1)).all():
        raise BridgeError("labels must be 0 or 1")
    scores, labels = _gathered(scores.astype(np.float64), labels.astype(bool))
    pos, neg = scores[labels], np.sort(scores[~labels])
    if pos.shape[0] == 0 or neg.shape[0] == 0:
        raise BridgeError(f"AUC needs positives and negatives; got {pos.shape[0]} and {neg.shape[0]}")
    below, equal = _ranked_against(pos, neg)
    return float((2 * below.sum() + equal.sum()) / (2 * pos.shape[0] * neg.shape[0]))


def hits_at_k(pos: torch.Tensor, neg: torch.Tensor, k: int) -> float:
    r"""Hits@K as OGB's link-prediction evaluator computes it: the fraction of positives scoring
    above the :math:`K`-th highest negative score (every positive when there are fewer than
    :math:`K` negatives).

    Args:
        pos: this rank's positive edges' scores.
        neg: this rank's negative edges' scores.
        k: :math:`K`.

    Returns:
        float: Hits@K over every rank's scores, the same on every rank.

    Shapes:
        - **pos:** ``[P_r]``; **neg:** ``[Q_r]``

    Raises:
        BridgeError: ``k`` not positive, no positive over all ranks.
    """
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise BridgeError(f"k must be a positive int, got {k!r}")
    pos, neg = _gathered(_numpy(pos, "pos").reshape(-1).astype(np.float64), _numpy(neg, "neg").reshape(-1))
    if pos.shape[0] == 0:
        raise BridgeError("hits_at_k needs positive scores; every rank gave none")
    if neg.shape[0] < k:
        return 1.0
    kth = np.partition(neg.astype(np.float64), -k)[-k]
    return float((pos > kth).mean())


def mrr(pos: torch.Tensor, neg: torch.Tensor) -> float:
    r"""The mean reciprocal rank of each positive among the negatives, ties ranked in the middle
    (OGB's: :math:`\mathrm{rank} = 1 + |\{n: s_n > s_p\}| + \tfrac{1}{2} |\{n: s_n = s_p\}|`).

    Args:
        pos: this rank's positive edges' scores.
        neg: negative scores: ``[Q_r]``, every positive ranked against every rank's negatives, or
            ``[P_r, K]``, each positive against its own row (OGB's per-edge negatives).

    Returns:
        float: the MRR over every rank's positives, the same on every rank.

    Shapes:
        - **pos:** ``[P_r]``; **neg:** ``[Q_r]`` or ``[P_r, K]``

    Raises:
        BridgeError: rows of ``neg`` that do not match ``pos``, no positive over all ranks.
    """
    pos, neg = _numpy(pos, "pos").reshape(-1).astype(np.float64), _numpy(neg, "neg").astype(np.float64)
    if neg.ndim == 2 and neg.shape[0] != pos.shape[0]:
        raise BridgeError(f"neg has {neg.shape[0]} rows for {pos.shape[0]} positives (give one row each, or 1-D)")
    if neg.ndim not in (1, 2):
        raise BridgeError(f"neg must be 1-D or [P, K], got shape {list(neg.shape)}")
    pos, neg = _gathered(pos, neg)
    if pos.shape[0] == 0:
        raise BridgeError("mrr needs positive scores; every rank gave none")
    if neg.ndim == 2:
        above = (neg > pos[:, None]).sum(1)
        equal = (neg == pos[:, None]).sum(1)
    else:
        below, equal = _ranked_against(pos, np.sort(neg))
        above = neg.shape[0] - below - equal
    return float(np.mean(1.0 / (1.0 + above + 0.5 * equal)))
