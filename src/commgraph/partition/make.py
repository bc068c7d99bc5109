"""Partition a graph and write its set: the one sequence ``commgraph partition make`` and the
launcher's partition cache share."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from commgraph.graph import Graph
from commgraph.partition.mapped import map_graph
from commgraph.partition.methods import partition_graph
from commgraph.partition.metrics import partition_metrics
from commgraph.partition.store import PartitionSet, full_disk_error, write_partition_set


@dataclass(frozen=True)
class MadeSet:
    """A partition set just written: the set, the partitioner's seconds and the metrics its
    manifest records."""

    pset: PartitionSet
    seconds: float
    metrics: dict


def make_partition_set(
    graph: Graph,
    parts: int,
    out: str | Path,
    *,
    method: str,
    seed: int,
    force: bool = False,
    progress: bool = False,
    notes: dict | None = None,
    log: Callable[[str], None] | None = None,
    node_type: np.ndarray | None = None,
    feature_dtype: str | None = None,
) -> MadeSet:
    """Partition ``graph`` into ``parts`` with ``method`` and write the set to ``out``.

    The graph's arrays are moved to read-only file maps first (:func:`~commgraph.partition.mapped.map_graph`,
    in a scratch folder beside ``out`` removed at the end): the caller's graph reads the same values
    afterwards, from files, and its pages are handed back while METIS runs, so the peak is METIS's
    memory, not METIS's plus the graph's.

    Args:
        graph: the graph (its heap arrays become file maps).
        parts, method, seed: as :func:`~commgraph.partition.partition_graph` takes them.
        out: the set's directory.
        force: replace an existing ``out``.
        progress: a progress bar over the parts as they are written.
        notes: further figures for the manifest's metrics (the graph's isolated nodes, components).
        log: hears the partitioner's progress, a line each.
        node_type: every node's type, each balanced across the parts (``metis`` only).
        feature_dtype: the dtype the features are stored in (None: the graph's;
            :func:`~commgraph.partition.store.write_partition_set`).

    Returns:
        MadeSet: the set, the partitioner's seconds and the metrics recorded.

    Raises:
        PartitionError: an unknown method, a part count no partition can have, or ``out`` exists
            without ``force``.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = out.parent / f".{out.name}.graph-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    try:
        map_graph(graph, scratch)
        start = time.perf_counter()
        assignment, details = partition_graph(graph, parts, method, seed, log=log, node_type=node_type)
        seconds = time.perf_counter() - start
        metrics = {**partition_metrics(graph, assignment, parts, node_type), **details, **(notes or {})}
        pset = write_partition_set(
            graph,
            assignment,
            parts,
            out,
            method=method,
            seed=seed,
            seconds=seconds,
            metrics=metrics,
            force=force,
            progress=progress,
            feature_dtype=feature_dtype,
        )
    except OSError as exc:  # the graph's maps in the scratch folder met a full disk
        full = full_disk_error(exc, scratch, out)
        if full is None:
            raise
        raise full from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return MadeSet(pset, seconds, metrics)
