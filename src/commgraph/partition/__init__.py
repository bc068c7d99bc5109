"""Graph partitioning: methods (random, chunk, METIS, G3), quality metrics, partition sets on disk.

Depends on :mod:`commgraph.graph` only.
"""

from commgraph.partition.g3 import RemoteTracker, g3_partition
from commgraph.partition.make import MadeSet, make_partition_set
from commgraph.partition.methods import METHODS, check_parts, partition_graph
from commgraph.partition.metrics import partition_metrics
from commgraph.partition.store import (
    MANIFEST,
    Part,
    PartitionSet,
    is_partition_set,
    load_partition_set,
    write_partition_set,
)

__all__ = [
    "MANIFEST",
    "MadeSet",
    "METHODS",
    "Part",
    "check_parts",
    "PartitionSet",
    "RemoteTracker",
    "g3_partition",
    "is_partition_set",
    "load_partition_set",
    "make_partition_set",
    "partition_graph",
    "partition_metrics",
    "write_partition_set",
]
