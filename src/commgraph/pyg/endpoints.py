r"""The endpoints of label edges across ranks: :func:`edge_embeddings` and the wrapper's decoder
(:func:`pair_scores`).

A rank scores the label edges whose *destination* it owns, and fetches the rows of the other
endpoints from their owners through the runtime's all-to-all
(:class:`~commgraph.runtime.alltoall.MatchingAllToAll`, every byte counted), differentiably: the
gradients of the fetched rows return to their owners. The label edges (positives and negatives)
are global: every rank holds the same ``edge_label_index`` (:func:`~commgraph.pyg.edge_split` and
:func:`~commgraph.pyg.negative_sampling` make it the same on every rank from a seed), so no rank
needs to ask another which rows it wants.

A decoder called through the wrapper (``cg.full_graph(model, part, decoder="decode")``,
:func:`pair_scores`) returns every pair's score on every rank, as the one-process call does: each
rank scores its share, and the shares are summed into one vector of scores :math:`s` (zeros
elsewhere). With the same loss :math:`L(s)` on every rank, the backward sum over the ranks gives
each rank :math:`R \, \partial L / \partial s` on its own pairs, which the parameter gradients'
average over the :math:`R` ranks turns into the one-process gradient.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from commgraph.errors import BridgeError
from commgraph.partition.store import owned_positions
from commgraph.pyg.data import check_edge_index, handle_of
from commgraph.pyg.link import distinct, search
from commgraph.pyg.world import session


class EdgeRows(NamedTuple):
    """What :func:`edge_embeddings` returns: a table of rows and this rank's share of the edges,
    indexing it (unpacks as ``z, edge_label_index, edge_label, edge_ids``)."""

    z: torch.Tensor  # the rows of every endpoint of the rank's edges
    edge_label_index: torch.Tensor  # the rank's edges, ids into ``z``
    edge_label: torch.Tensor | None  # their labels, when labels were given
    edge_ids: torch.Tensor  # their positions in the global ``edge_label_index``


@dataclass
class RowFetch:
    """The rows one rank sends and receives so that every rank has both endpoints of its edges:
    ``counts[s, r]`` rows go from rank ``s`` to rank ``r``; this rank sends its owned rows
    ``send_rows`` (grouped by receiver) and receives the rows of ``recv_nodes`` (grouped by owner)."""

    counts: np.ndarray
    send_rows: torch.Tensor
    recv_nodes: np.ndarray


def _fetch_plan(edges: np.ndarray, owner: np.ndarray, ranks: int, rank: int, owned: np.ndarray) -> RowFetch:
    """Every rank's needs from the global edges alone: rank ``owner[v]`` scores edge ``(u, v)`` and
    needs the rows of ``u`` and ``v``; those it does not own come from their owners."""
    num_nodes = owner.shape[0]
    scorer = owner[edges[1]].astype(np.int64)
    keys = distinct(np.concatenate([scorer * num_nodes + edges[0], scorer * num_nodes + edges[1]]))
    needer, node = keys // num_nodes, keys % num_nodes
    holder = owner[node].astype(np.int64)
    remote = needer != holder
    needer, node, holder = needer[remote], node[remote], holder[remote]
    counts = np.bincount(holder * ranks + needer, minlength=ranks * ranks).reshape(ranks, ranks)
    mine = holder == rank  # sorted by receiver, then node: the order each receiver expects
    wanted = needer == rank
    recv_nodes = node[wanted][np.lexsort((node[wanted], holder[wanted]))]
    return RowFetch(counts, torch.from_numpy(owned_positions(owned, node[mine])), recv_nodes)


class _Fetch(torch.autograd.Function):
    """The fetched rows of :class:`RowFetch`; backward returns their gradients to the owners."""

    @staticmethod
    def forward(ctx, owned: torch.Tensor, fetch: RowFetch, exchange) -> torch.Tensor:
        ctx.fetch, ctx.exchange, ctx.num_owned = fetch, exchange, owned.shape[0]
        rank = exchange.comm.world.rank
        out = owned.new_empty((int(fetch.counts[:, rank].sum()), owned.shape[1]))
        send = owned.detach()[fetch.send_rows.to(owned.device)].contiguous()
        return exchange(out, send, fetch.counts, label="link_forward")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        fetch = ctx.fetch
        back = grad.new_empty((fetch.send_rows.shape[0], grad.shape[1]))
        ctx.exchange(back, grad.contiguous(), fetch.counts.T.copy(), label="link_backward")
        owned = grad.new_zeros((ctx.num_owned, grad.shape[1]))
        return owned.index_add_(0, fetch.send_rows.to(grad.device), back), None, None


def _check_same_everywhere(edges: np.ndarray) -> None:
    """Every rank must pass the same label edges (each plans the others' fetches from them).

    Raises:
        BridgeError: on every rank, when they differ.
    """
    s = session()
    if s.world.size == 1:
        return
    digests = s.comm.all_gather_object(hashlib.blake2b(np.ascontiguousarray(edges).tobytes(), digest_size=16).digest())
    if len(set(digests)) > 1:
        raise BridgeError(
            "cg.edge_embeddings needs the same global edge_label_index on every rank, but the ranks passed "
            "different ones: draw negatives with the same seed everywhere and pass the whole set, not a share"
        )


def edge_embeddings(
    z: torch.Tensor, edge_label_index: torch.Tensor, part, edge_label: torch.Tensor | None = None
) -> EdgeRows:
    r"""Both endpoints' rows of this rank's share of the label edges: those whose destination it owns.

    The rows of endpoints owned by other ranks come from them through the runtime's all-to-all (the
    bytes counted as ``link_forward`` and ``link_backward``); the result is differentiable, and the
    gradients of fetched rows go back to their owners. The table and the edges re-indexed into it
    feed a decoder unchanged: ``decode(z, edge_label_index)`` scores the rank's edges as the
    one-process script scores them. With one rank, the share is every edge, in order.

    Args:
        z: the encoder's output on the part (owned rows first; halo rows, if any, are not read).
        edge_label_index: the label edges, global ids, the same on every rank.
        part: the part (:func:`~commgraph.pyg.partition`) ``z`` was computed on.
        edge_label: the edges' labels, cut to the share if given.

    Returns:
        EdgeRows: ``(z, edge_label_index, edge_label, edge_ids)``: the table, the share's edges as
        ids into it, their labels, and their positions in the global ``edge_label_index``.

    Shapes:
        - **z:** ``[num_owned (+ num_halo), F]`` → ``[M_r, F]`` (each endpoint once)
        - **edge_label_index:** ``[2, E]`` → ``[2, E_r]``; **edge_label:** ``[E]`` → ``[E_r]``

    Raises:
        BridgeError: ``part`` is not a part, ``z`` has fewer rows than the part owns, ids out of
        range, ranks that passed different ``edge_label_index``.
    """
    from commgraph.runtime.alltoall import MatchingAllToAll

    handle = handle_of(part)
    if z.dim() != 2 or z.shape[0] < handle.num_owned:
        raise BridgeError(
            f"z must hold a row per node of the part ({handle.num_owned} owned first), got shape {list(z.shape)}"
        )
    owner = np.asarray(handle.pset.assignment())
    edges = check_edge_index(edge_label_index, owner.shape[0], "edge_label_index")
    if edge_label is not None and edge_label.shape[0] != edges.shape[1]:
        raise BridgeError(f"edge_label has {edge_label.shape[0]} entries for {edges.shape[1]} edges")
    _check_same_everywhere(edges)
    rank, owned = handle.part.index, np.asarray(handle.part.owned, dtype=np.int64)
    mine = np.flatnonzero(owner[edges[1]] == rank)
    endpoints = edges[:, mine]
    local = distinct(endpoints[owner[endpoints] == rank])
    fetch = _fetch_plan(edges, owner, handle.pset.num_parts, rank, owned)
    rows = [z[torch.from_numpy(owned_positions(owned, local)).to(z.device)]]
    if fetch.counts.any():
        rows.append(_Fetch.apply(z[: handle.num_owned], fetch, MatchingAllToAll(session().comm)))
    ids = np.concatenate([local, fetch.recv_nodes])
    sorter = np.argsort(ids)
    positions = sorter[search(ids[sorter], endpoints)]
    picked = torch.from_numpy(mine)
    return EdgeRows(
        torch.cat(rows),
        torch.from_numpy(positions).to(z.device),
        None if edge_label is None else edge_label[picked.to(edge_label.device)],
        picked,
    )


class _Summed(torch.autograd.Function):
    """Every rank's share of the scores at their pairs' positions, summed over the ranks: the
    whole vector on every rank. Backward: each rank's gradient of its own pairs, summed over the
    ranks."""

    @staticmethod
    def forward(ctx, share: torch.Tensor, positions: torch.Tensor, pairs: int, comm) -> torch.Tensor:
        ctx.positions, ctx.comm = positions, comm
        scores = share.new_zeros((pairs, *share.shape[1:]))
        scores[positions] = share
        return comm.all_reduce_(scores)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return ctx.comm.all_reduce_(grad.clone())[ctx.positions], None, None, None


def pair_scores(decode, z: torch.Tensor, edge_label_index: torch.Tensor, part, *args, **kwargs) -> torch.Tensor:
    """``decode(z, edge_label_index, *args, **kwargs)`` as the one-process script computes it: a
    score for every pair, the same on every rank. Each rank decodes its share
    (:func:`edge_embeddings`) and the shares are summed (one all-reduce of a score per pair; see
    the module description for the gradient).

    Args:
        decode: the model's decoder, ``decode(z, edge_label_index, ...)``, one score (row) per pair.
        z: the encoder's output on the part (owned rows first).
        edge_label_index: the pairs, global ids, the same on every rank.
        part: the part ``z`` was computed on.

    Returns:
        torch.Tensor: the pairs' scores in the order of ``edge_label_index``.

    Shapes:
        - **edge_label_index:** ``[2, E]`` → output ``[E, ...]``
    """
    rows = edge_embeddings(z, edge_label_index, part)
    share = decode(rows.z, rows.edge_label_index, *args, **kwargs)
    s = session()
    if s.world.size == 1:  # the share is every pair, in order
        return share
    return _Summed.apply(share, rows.edge_ids.to(share.device), int(edge_label_index.shape[1]), s.comm)
