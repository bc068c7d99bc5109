r"""Link prediction across ranks: :func:`edge_split`, :func:`negative_sampling`.

A link predictor encodes the nodes with a GNN, :math:`Z = f_\theta(X, A_{\text{train}})`, and scores
a node pair by a decoder of both endpoints' rows, e.g. :math:`s_{uv} = \langle z_u, z_v \rangle`
(Kipf and Welling, `"Variational Graph Auto-Encoders" <https://arxiv.org/abs/1611.07308>`_, 2016),
trained with binary cross-entropy against positive (held-out) edges and sampled non-edges.

Across ranks the encoder runs on each rank's part (:func:`~commgraph.pyg.full_graph`); the label
edges (positives and negatives) are global, made the same on every rank from a seed by
:func:`edge_split` and :func:`negative_sampling`, and each rank scores those whose destination it
owns with the endpoints' rows of :mod:`commgraph.pyg.endpoints`.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np
import torch

from commgraph.errors import BridgeError
from commgraph.pyg.data import check_edge_index, handle_of

ENUMERATE_PAIRS = 1 << 22  # node pairs up to which a dense negative draw lists every candidate
OVERDRAW = 1.1  # a round of negative sampling draws this much more than it expects to keep


# -- sorted-key helpers: a sort and a binary search over queries in order (np.unique and a search
# of keys in random order each cost ten times a sort on millions of keys: cache misses)


def sorted_unique(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``keys``, ascending, and each key's index among them."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.ones(ordered.shape[0], dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    inverse = np.empty(keys.shape[0], dtype=np.int64)
    inverse[order] = np.cumsum(starts) - 1
    return ordered[starts], inverse


def distinct(keys: np.ndarray) -> np.ndarray:
    """The distinct ``keys``, ascending."""
    ordered = np.sort(keys)
    starts = np.ones(ordered.shape[0], dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    return ordered[starts]


def first_distinct(keys: np.ndarray) -> np.ndarray:
    """``keys`` without repeats, each at its first occurrence."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.ones(ordered.shape[0], dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    return keys[np.sort(order[starts])]


def search(ascending: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``np.searchsorted(ascending, queries)``, the queries searched in ascending order."""
    flat = queries.reshape(-1)
    order = np.argsort(flat)
    found = np.empty(flat.shape[0], dtype=np.int64)
    found[order] = np.searchsorted(ascending, flat[order])
    return found.reshape(queries.shape)


@dataclass(frozen=True)
class PairSpace:
    """The node pairs :math:`(u, v)` of a relation as keys :math:`u N_{dst} + v`: ``u`` one of
    ``num_src`` nodes, ``v`` one of ``num_dst``; in a graph of one node type (``loops`` False) the
    self loops :math:`(u, u)` are no pair."""

    num_src: int
    num_dst: int
    loops: bool = False

    @classmethod
    def of(cls, num_nodes) -> PairSpace:
        """``num_nodes`` as PyG's ``negative_sampling`` takes it: ``N`` (one node type, self loops
        excluded) or ``(N_src, N_dst)`` (a bipartite relation, every pair)."""
        if isinstance(num_nodes, (tuple, list)) and len(num_nodes) == 2:
            return cls(*_counts(num_nodes), loops=True)
        (count,) = _counts([num_nodes])
        return cls(count, count)

    @property
    def total(self) -> int:
        return self.num_src * self.num_dst

    @property
    def candidates(self) -> int:
        """Every pair, self loops left out where they are no pair."""
        return self.total - (0 if self.loops else min(self.num_src, self.num_dst))

    def edges(self, edge_index, name: str = "edge_index") -> np.ndarray:
        """``edge_index`` as an int64 ``[2, E]`` array (:func:`check_edge_index`), sources among
        ``num_src`` nodes and targets among ``num_dst``.

        Raises:
            BridgeError: another shape, or an id out of its type's range.
        """
        edges = check_edge_index(edge_index, max(self.num_src, self.num_dst), name)
        for row, size, end in ((0, self.num_src, "source"), (1, self.num_dst, "target")):
            if edges[row].size and edges[row].max() >= size:
                raise BridgeError(
                    f"{name} holds {end} id {int(edges[row].max())} but its node type has {size} nodes "
                    f"(ids 0..{size - 1})"
                )
        return edges

    def keys(self, edges: np.ndarray) -> np.ndarray:
        return edges[0] * self.num_dst + edges[1]

    def pairs(self, keys: np.ndarray) -> np.ndarray:
        """``[2, K]`` node pairs of ``keys``."""
        return np.stack([keys // self.num_dst, keys % self.num_dst])

    def no_loop(self, keys: np.ndarray) -> np.ndarray:
        """Which ``keys`` are pairs of the space (all, or those that are not self loops)."""
        return np.ones(keys.shape[0], dtype=bool) if self.loops else keys // self.num_dst != keys % self.num_dst


def _counts(values) -> list[int]:
    if any(isinstance(v, bool) or not isinstance(v, Integral) or v < 1 for v in values):
        raise BridgeError(f"num_nodes must be an int >= 1 or a pair (N_src, N_dst) of them, got {values!r}")
    return [int(v) for v in values]


class LinkSplit(NamedTuple):
    """The three splits :func:`edge_split` returns (unpacks as ``train, val, test``)."""

    train: object
    val: object
    test: object


# -- splitting the edges -------------------------------------------------------------------------


def _split_size(value: int | float, pairs: int, name: str) -> int:
    """``value`` as a number of pairs: an int as given, a float as a fraction (rounded down)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise BridgeError(f"{name} must be an int (edges) or a float in [0, 1] (a fraction), got {value!r}")
    if not isinstance(value, Integral):
        if not 0.0 <= value <= 1.0:
            raise BridgeError(f"{name}={value} is a fraction of the edges: give a float in [0, 1] or an int")
        return int(value * pairs)
    if value < 0:
        raise BridgeError(f"{name} must not be negative, got {value}")
    return int(value)


def _pair_keys(edges: np.ndarray, space: PairSpace, undirected: bool) -> np.ndarray:
    """Each edge's pair as its key in ``space`` (``a <= b`` when ``undirected``)."""
    src, dst = edges
    if undirected:
        src, dst = np.minimum(src, dst), np.maximum(src, dst)
    return src * space.num_dst + dst


@dataclass
class PairSplit:
    """Which edges carry messages in every split (``train``, one bool per edge), the sorted keys of
    the held-out pairs (``held``), and the keys of each split's pairs (``labels``: train, val, test)."""

    train: np.ndarray
    held: np.ndarray
    labels: tuple[np.ndarray, np.ndarray, np.ndarray]


def split_pairs(
    edges: np.ndarray, space: PairSpace, undirected: bool, num_val: int | float, num_test: int | float, seed: int
) -> PairSplit:
    """The node pairs of ``edges`` (self loops left out where they are no pair) split at random
    (see :func:`edge_split`).

    Raises:
        BridgeError: more validation and test pairs than there are, counts out of range.
    """
    keys = _pair_keys(edges, space, undirected)
    labelled = space.no_loop(keys)
    pairs, pair_of_edge = sorted_unique(keys[labelled])
    n_val = _split_size(num_val, pairs.shape[0], "num_val")
    n_test = _split_size(num_test, pairs.shape[0], "num_test")
    if n_val + n_test > pairs.shape[0]:
        raise BridgeError(
            f"{n_val} validation and {n_test} test pairs asked, but the graph has {pairs.shape[0]} "
            f"{'undirected ' if undirected else ''}node pairs"
        )
    order = np.random.default_rng(seed).permutation(pairs.shape[0])
    held = np.zeros(pairs.shape[0], dtype=bool)
    held[order[: n_val + n_test]] = True
    train_edges = np.ones(edges.shape[1], dtype=bool)
    train_edges[labelled] = ~held[pair_of_edge]
    chosen = (order[n_val + n_test :], order[:n_val], order[n_val : n_val + n_test])
    return PairSplit(train_edges, pairs[held], tuple(pairs[k] for k in chosen))


def edge_split(
    data,
    num_val: int | float = 0.05,
    num_test: int | float = 0.1,
    undirected: bool = True,
    seed: int = 0,
    edge_type: tuple[str, str, str] | None = None,
    rev_edge_type: tuple[str, str, str] | None = None,
) -> LinkSplit:
    r"""The edges of ``data`` split into training, validation and test edges, as PyG's
    ``RandomLinkSplit(num_val, num_test, is_undirected=undirected, add_negative_train_samples=False,
    neg_sampling_ratio=0.0)`` splits them, the same on every rank for a seed.

    The units split are node pairs: with ``undirected`` an edge and its reverse are one pair, kept
    in one split. Self loops are no pair: they stay in ``edge_index`` and are never labelled. Every
    split's ``edge_index`` holds the training edges alone (edge attributes cut to match): validation
    and test edges never carry messages (PyG's test split would also pass the validation edges).
    Negatives are drawn separately, with :func:`negative_sampling`.

    A ``HeteroData`` splits the relation ``edge_type`` (PyG's ``edge_types``), and drops the held-out
    pairs' reverses from ``rev_edge_type`` (PyG's ``rev_edge_types``) too; the labels go on
    ``data[edge_type]``. A relation between two node types has no reverse inside it: each edge is
    its own pair, and ``undirected`` applies to a relation within one type only.

    Args:
        data: the whole graph, a ``torch_geometric.data.Data`` or ``HeteroData`` (every rank passes
            the same).
        num_val: validation pairs, an int, or a float: that fraction of the pairs, rounded down.
        num_test: test pairs, the same way.
        undirected: whether ``(u, v)`` and ``(v, u)`` are one pair.
        seed: the seed of the permutation that splits the pairs.
        edge_type: for a ``HeteroData``, the relation ``(src, rel, dst)`` to split.
        rev_edge_type: for a ``HeteroData``, the relation holding ``edge_type``'s reverses, if any.

    Returns:
        LinkSplit: ``(train, val, test)``, shallow copies of ``data``, each with ``edge_index``
        (training edges), ``edge_label_index`` (its pairs, one direction: ``u <= v`` when
        ``undirected``) and ``edge_label`` (ones, float); for a ``HeteroData`` these are
        ``data[edge_type]``'s and ``data[rev_edge_type]``'s ``edge_index`` drops the reverses.

    Shapes:
        - **edge_label_index:** ``[2, P_split]`` (global ids); **edge_label:** ``[P_split]``

    Raises:
        BridgeError: more validation and test pairs than the graph has, counts out of range; for a
            ``HeteroData``, no ``edge_type``, or an ``edge_type`` or ``rev_edge_type`` it lacks.
    """
    from torch_geometric.data import HeteroData

    if isinstance(data, HeteroData):
        return _hetero_edge_split(data, num_val, num_test, undirected, seed, edge_type, rev_edge_type)
    if edge_type is not None or rev_edge_type is not None:
        raise BridgeError("edge_type and rev_edge_type name relations of a HeteroData: leave them out for a Data")
    space = PairSpace(int(data.num_nodes), int(data.num_nodes))
    split = split_pairs(space.edges(data.edge_index), space, undirected, num_val, num_test, seed)
    base = copy.copy(data)
    _keep_edges(base, data, split.train)
    return LinkSplit(*(_labelled(base, space.pairs(keys)) for keys in split.labels))


def _hetero_edge_split(data, num_val, num_test, undirected: bool, seed: int, edge_type, rev_edge_type) -> LinkSplit:
    """:func:`edge_split` of the relation ``edge_type`` of a ``HeteroData``."""
    if edge_type is None or tuple(edge_type) not in data.edge_types:
        raise BridgeError(
            f"edge_split of a HeteroData splits one relation: pass edge_type=, one of {data.edge_types} "
            f"(got {edge_type!r})"
        )
    src, _, dst = edge_type = tuple(edge_type)
    if rev_edge_type is not None and (
        tuple(rev_edge_type) not in data.edge_types or (rev_edge_type[0], rev_edge_type[-1]) != (dst, src)
    ):
        raise BridgeError(
            f"rev_edge_type {rev_edge_type!r} is no relation ({dst!r}, ..., {src!r}) of the graph: pass the "
            "relation that holds edge_type's reverses, or None"
        )
    space = PairSpace(int(data[src].num_nodes), int(data[dst].num_nodes), loops=src != dst)
    undirected = undirected and src == dst
    split = split_pairs(space.edges(data[edge_type].edge_index), space, undirected, num_val, num_test, seed)
    base = copy.copy(data)
    _keep_edges(base[edge_type], data[edge_type], split.train)
    if rev_edge_type is not None:
        reverses = space.edges(data[rev_edge_type].edge_index.flip(0), f"data[{rev_edge_type}].edge_index")
        _keep_edges(
            base[rev_edge_type], data[rev_edge_type], _absent(_pair_keys(reverses, space, undirected), split.held)
        )
    return LinkSplit(*(_labelled(base, space.pairs(keys), edge_type) for keys in split.labels))


def _keep_edges(out, store, keep: np.ndarray) -> None:
    """``out`` (a copy of the ``Data`` or edge store ``store``) with the edges ``keep`` selects and
    their attributes."""
    for key, value in store.items():
        if isinstance(value, torch.Tensor) and (key == "edge_index" or store.is_edge_attr(key)):
            index = torch.from_numpy(keep).to(value.device)
            out[key] = value[:, index] if key == "edge_index" else value[index]


def _labelled(base, pairs: np.ndarray, edge_type=None):
    """A shallow copy of ``base`` whose label edges (on ``base[edge_type]`` for a relation) are ``pairs``."""
    out = copy.copy(base)
    store = out if edge_type is None else out[edge_type]
    store.edge_label_index = torch.from_numpy(pairs)
    store.edge_label = torch.ones(pairs.shape[1])
    return out


# -- negatives -----------------------------------------------------------------------------------


def _owned_mask(share, num_nodes: int) -> np.ndarray:
    """The nodes a share names: a part's owned nodes, or a boolean mask over the graph's nodes."""
    from torch_geometric.data import Data

    if isinstance(share, Data):
        handle = handle_of(share)
        assignment = np.asarray(handle.pset.assignment())
        if assignment.shape[0] != num_nodes:
            raise BridgeError(f"the part is of a graph of {assignment.shape[0]} nodes, the edges of one of {num_nodes}")
        return assignment == handle.part.index
    mask = share.detach().cpu().numpy() if isinstance(share, torch.Tensor) else np.asarray(share)
    if mask.dtype != np.bool_ or mask.shape != (num_nodes,):
        raise BridgeError(
            f"share must be a part (cg.partition) or a bool mask of shape [{num_nodes}], "
            f"got {mask.dtype} of shape {list(mask.shape)}"
        )
    return mask


def edge_share(edge_index: torch.Tensor, share, num_nodes: int | None = None) -> torch.Tensor:
    """Which edges of ``edge_index`` (global ids) a rank takes: those whose destination it owns.

    Args:
        edge_index: node pairs, global ids (the same on every rank).
        share: the rank's part (from :func:`~commgraph.pyg.partition`), or a bool mask over the
            graph's nodes (to say which nodes a simulated rank owns).
        num_nodes: the graph's node count, checked against ``share`` (default: the share's).

    Returns:
        torch.Tensor: a bool mask over the edges; the ranks' masks partition them.

    Shapes:
        - **edge_index:** ``[2, E]``; output: ``[E]``
    """
    owned = _owned_mask(share, _graph_nodes(share) if num_nodes is None else num_nodes)
    edges = check_edge_index(edge_index, owned.shape[0])
    return torch.from_numpy(owned[edges[1]])


def _graph_nodes(share) -> int:
    from torch_geometric.data import Data

    if isinstance(share, Data):
        return int(np.asarray(handle_of(share).pset.assignment()).shape[0])
    return int(share.shape[0])


def _positive_keys(edge_index, space: PairSpace) -> np.ndarray:
    """The sorted distinct keys of the positive pairs (self loops left out where they are no pair)."""
    keys = space.keys(space.edges(edge_index))
    return distinct(keys[space.no_loop(keys)])


def _absent(keys: np.ndarray, positives: np.ndarray) -> np.ndarray:
    """Which ``keys`` are not in the sorted ``positives``."""
    if positives.shape[0] == 0:
        return np.ones(keys.shape[0], dtype=bool)
    at = np.minimum(search(positives, keys), positives.shape[0] - 1)
    return positives[at] != keys


def _draw_rounds(rng: np.random.Generator, space: PairSpace, positives: np.ndarray, count: int) -> np.ndarray:
    """``count`` distinct negative keys, drawn uniformly in rounds: each round's keys join those
    kept so far, and one stable sort of them finds repeats (a key's first draw stays), positives
    (a search in order) and self loops where they are no pair."""
    total = space.total
    keep_rate = (space.candidates - positives.shape[0]) / total
    chosen = np.empty(0, dtype=np.int64)
    while chosen.shape[0] < count:
        missing = count - chosen.shape[0]
        drawn = rng.integers(0, total, size=int(math.ceil(missing / keep_rate * OVERDRAW)) + 16, dtype=np.int64)
        keys = np.concatenate([chosen, drawn])
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        keep = space.no_loop(ordered)
        keep[1:] &= ordered[1:] != ordered[:-1]
        if positives.shape[0]:
            keep &= positives[np.minimum(np.searchsorted(positives, ordered), positives.shape[0] - 1)] != ordered
        chosen = keys[np.sort(order[keep])][:count]
    return chosen


def _draw_listed(rng: np.random.Generator, space: PairSpace, positives: np.ndarray, count: int) -> np.ndarray:
    """``count`` negative keys, a uniform choice among every candidate pair listed (dense draws)."""
    every = np.arange(space.total, dtype=np.int64)
    every = every[space.no_loop(every) & _absent(every, positives)]
    return every[rng.permutation(every.shape[0])[:count]]


def negative_sampling(
    edge_index: torch.Tensor,
    num_nodes: int | tuple[int, int],
    num_neg_samples: int,
    *,
    seed: int,
    share=None,
) -> torch.Tensor:
    r"""Node pairs drawn uniformly among those that are not edges: ``num_neg_samples`` distinct
    pairs :math:`(u, v)`, :math:`u \ne v`, :math:`(u, v) \notin E`, as PyG's ``negative_sampling``
    draws them, but the same on every rank for a seed, whatever the number of ranks: the pairs are
    drawn for the whole graph (in rounds of uniform keys :math:`uN + v`, positives rejected by a
    binary search in their sorted keys; by a permutation of every candidate when more than half of
    them are asked for and the graph has at most :math:`2^{22}` pairs), and a rank keeps its ``share`` if asked.
    With ``num_nodes=(N_src, N_dst)`` the pairs are a relation's between two node types (a
    ``HeteroData``'s ``data[edge_type].edge_index``), :math:`u < N_{src}`, :math:`v < N_{dst}`,
    self loops allowed, as PyG's bipartite draws.

    Args:
        edge_index: the positive edges (global ids; typically ``train_data.edge_index`` while
            training, the whole graph's for validation and test negatives).
        num_nodes: the graph's node count :math:`N`, or a relation's ``(N_src, N_dst)``.
        num_neg_samples: the pairs to draw.
        seed: the draw's seed, required: every rank must draw the same pairs (pass the epoch to
            draw new negatives each epoch).
        share: ``None`` (every pair), or this rank's part: the pairs whose destination it owns
            (see :func:`edge_share`; a bool mask over the (target type's) nodes simulates a rank).

    Returns:
        torch.Tensor: the pairs, in the order drawn (a share keeps that order).

    Shapes:
        - output: ``[2, num_neg_samples]`` (int64, global ids), or ``[2, K_r]`` for a share

    Raises:
        BridgeError: more pairs asked than there are non-edges, :math:`N(N-1) - |E|`
            (:math:`N_{src} N_{dst} - |E|`); a bad ``num_nodes``.
    """
    if isinstance(num_neg_samples, bool) or not isinstance(num_neg_samples, Integral) or num_neg_samples < 0:
        raise BridgeError(f"num_neg_samples must be a non-negative int, got {num_neg_samples!r}")
    num_neg_samples = int(num_neg_samples)
    space = PairSpace.of(num_nodes)
    positives = _positive_keys(edge_index, space)
    candidates = space.candidates - positives.shape[0]
    if num_neg_samples > candidates:
        raise BridgeError(
            f"{num_neg_samples} negative pairs asked, but a graph of {num_nodes} nodes and "
            f"{positives.shape[0]} edges has {candidates} non-edges"
        )
    rng = np.random.default_rng(seed)
    dense = 2 * num_neg_samples > candidates and space.total <= ENUMERATE_PAIRS
    keys = (_draw_listed if dense else _draw_rounds)(rng, space, positives, num_neg_samples)
    pairs = torch.from_numpy(space.pairs(keys))
    if share is None:
        return pairs
    return pairs[:, torch.from_numpy(_owned_mask(share, space.num_dst)[keys % space.num_dst])]


# -- both endpoints' rows ------------------------------------------------------------------------
