"""The bridge's two entry points that take a homogeneous graph or a heterogeneous one:
:func:`partition` (a ``Data``'s part, :mod:`commgraph.pyg.data`; a ``HeteroData``'s,
:mod:`commgraph.pyg.hetero`) and :func:`full_graph` (:class:`~commgraph.pyg.full.FullGraph` or
:class:`~commgraph.pyg.hetero.HeteroFullGraph`)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from commgraph.errors import BridgeError
from commgraph.pyg.data import DEFAULT_METHOD, cut_data, data_part, handle_of, open_set
from commgraph.pyg.full import FullGraph
from commgraph.pyg.hetero import HeteroFullGraph, partition_hetero, partition_typed_set
from commgraph.pyg.world import session


def partition(data, *, method: str = DEFAULT_METHOD, seed: int = 0, folder: str | Path | None = None):
    """This rank's part of ``data``, as a PyG ``Data``.

    Every rank of the job calls it with the same graph. A machine partitions once: its first rank
    writes the set into the partition cache (``$COMMGRAPH_HOME/partitions``, keyed by the graph's
    content, method, part count and seed, as ``commgraph train`` does) and the others map it. For a
    graph too large to load in every rank, pass the directory of a set made by ``commgraph
    partition make`` instead: no rank then holds the whole graph.

    Args:
        data: a ``torch_geometric.data.Data`` (every rank's copy of the whole graph; edges as
            given, directed, self loops kept), a ``HeteroData`` (its part is a ``HeteroData``, see
            :func:`~commgraph.pyg.hetero.partition_hetero`), or a partition set's directory with
            one part per rank (a typed set's part is a ``HeteroData``, see
            :func:`~commgraph.pyg.hetero.partition_typed_set`).
        method: ``metis``, ``g3``, ``chunk`` or ``random`` (a ``Data`` only).
        seed: the partitioner's seed (a ``Data`` only).
        folder: where to write the set instead of the cache (a ``Data`` only).

    Returns:
        torch_geometric.data.Data: owned nodes first, then halo nodes, with ``edge_index`` (every
        in-edge of an owned node, local ids), ``x``, ``y``, each other node attribute, the masks
        (false on halo rows, so a loss over a mask counts each node on one rank only), each edge
        attribute (``edge_attr``, ``edge_weight``, ...) of those edges, ``n_id`` (global ids) and
        ``num_owned``; a link split's ``edge_label_index`` and ``edge_label`` as they are (global).

    Shapes:
        - **edge_index:** ``[2, E_r]`` (int64, local ids; destinations ``< num_owned``)
        - **x:** ``[num_owned + num_halo, F]``; **n_id**, **y**, masks: ``[num_owned + num_halo]``

    Raises:
        BridgeError: ``edge_index`` out of range, a set whose part count is not the job's.
    """
    from torch_geometric.data import Data, HeteroData

    s = session()
    if isinstance(data, HeteroData):
        return partition_hetero(s, data, method, seed, folder)
    if isinstance(data, (str, os.PathLike)):
        handle = open_set(s, Path(data))
        if "typed" in handle.pset.manifest:
            return partition_typed_set(s, handle.pset)
        return data_part(s, handle, None)
    if isinstance(data, Data):
        return data_part(s, cut_data(s, data, method, seed, folder), data)
    raise BridgeError(f"cg.partition takes a torch_geometric Data or a partition set's path, got {type(data).__name__}")


def full_graph(
    model: torch.nn.Module,
    data,
    *,
    plan: str = "auto",
    topology: str = "detect",
    allreduce: str = "native",
    decoder: str | None = None,
) -> FullGraph:
    """``model`` trained on the part ``data`` across the job's ranks, exactly as one process trains
    it on the whole graph (see the module description).

    Args:
        model: any ``torch.nn.Module`` with ``MessagePassing`` layers (PyG's convs or the user's own),
            each called as ``layer(x, edge_index, ...)`` with ``x`` holding the part's rows; for a
            ``HeteroData`` part, a ``to_hetero`` or ``HeteroConv`` model, one layer per relation
            (:class:`~commgraph.pyg.hetero.HeteroFullGraph`).
        data: the part :func:`~commgraph.pyg.partition` returned.
        plan: the all-gather plan: ``auto`` (the one the simulator prices fastest on the topology),
            a planner (``p2p``, ``spst``, ...) or a plan file, as ``commgraph train --plan``.
        topology: the topology the plan is made for, as ``commgraph train --topology``.
        allreduce: the gradient all-reduce: ``native`` (torch's), a planner or ``auto``.
        decoder: the name of ``model``'s method that scores node pairs, ``decode(z, edge_label_index)``
            (a link predictor's): called through the wrapper with the part's ``z`` and global
            pairs, it returns every pair's score on every rank, as one process computes them, so
            the script's loss and metrics over them need no change (homogeneous parts).

    Returns:
        FullGraph: a module calling ``model``; its ``bytes`` and ``modeled_seconds`` say what the
        exchanges cost.

    Raises:
        BridgeError: ``model`` has no ``MessagePassing`` layer, or no method ``decoder``; ``data``
            is not a part; ``decoder`` with a ``HeteroData`` part.
    """
    handle = handle_of(data)
    if handle.types is not None:
        if decoder is not None:
            raise BridgeError(
                "decoder= scores pairs of a homogeneous part; for a HeteroData part score a relation's pairs "
                "with cg.edge_embeddings on its rows and cg.global_mean"
            )
        return HeteroFullGraph(model, handle, data, plan=plan, topology=topology, allreduce=allreduce)
    return FullGraph(model, handle, data, plan=plan, topology=topology, allreduce=allreduce, decoder=decoder)
