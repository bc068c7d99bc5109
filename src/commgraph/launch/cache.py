"""The partition cache: a GRAPH given to a job is partitioned once per graph, method, part count
and seed, into ``$COMMGRAPH_HOME/partitions/`` (the root the dataset cache shares; default
``~/.cache/commgraph``), and later jobs reuse the set while its files check out."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from commgraph.errors import CommgraphError
from commgraph.graph import Graph, HeteroGraph
from commgraph.graph.datasets import home
from commgraph.partition import (
    check_parts,
    is_partition_set,
    load_partition_set,
    make_partition_set,
)
from commgraph.partition.typed import make_typed_partition_set


def partition_cache() -> Path:
    """Where cached partition sets live."""
    return home() / "partitions"


def partition_cache_entry(graph: Graph | HeteroGraph, method: str, parts: int, seed: int) -> Path:
    """The cache directory of ``graph`` split by ``method`` into ``parts`` with ``seed`` (named by
    the graph's checksum, so another graph of the same name never reuses it)."""
    return partition_cache() / f"{graph.name}-{graph.checksum()[:16]}-{method}-k{parts}-s{seed}"


def cached_partition_set(
    graph: Graph | HeteroGraph,
    parts: int,
    method: str,
    seed: int,
    folder: Path | None = None,
    *,
    log: Callable[[str], None] | None = None,
    node_type: np.ndarray | None = None,
) -> Path:
    """A partition set of ``graph`` into ``parts``: ``folder`` (default: its cache entry) if it
    holds a sound one, else made there now (``log`` hears the progress; ``node_type``: each type
    balanced across the parts, as :func:`~commgraph.partition.partition_graph` takes it). A
    heterogeneous graph gets a typed set (:mod:`commgraph.partition.typed`), by METIS where the
    method is the default g3 (which balances no node type)."""
    hetero = isinstance(graph, HeteroGraph)
    if hetero and method == "g3":  # the default: g3 does not balance node types
        method = "metis"
    check_parts(parts, graph.total_nodes if hetero else graph.num_nodes)
    target = folder or partition_cache_entry(graph, method, parts, seed)
    if is_partition_set(target):
        try:  # a typed set's entry is named by the heterogeneous graph's own checksum
            load_partition_set(target, None if hetero else graph, verify=True).verify_all()
            return target
        except CommgraphError:
            pass  # stale or damaged: make it again
    if log is not None:
        log(f"partitioning {graph.name} into {parts} parts with {method} -> {target}")
    if hetero:
        make_typed_partition_set(graph, parts, target, method=method, seed=seed, force=True, log=log)
    else:
        make_partition_set(graph, parts, target, method=method, seed=seed, force=True, log=log, node_type=node_type)
    return target
