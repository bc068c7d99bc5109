"""The one launcher of multi-process jobs: GRAPH or partition set, the partition cache under
``$COMMGRAPH_HOME``, torchrun or local worker processes, and the worker's command line from one
spec. ``cli`` commands build a :class:`JobSpec` and call :func:`launch`."""

from commgraph.launch.cache import cached_partition_set, partition_cache
from commgraph.launch.launcher import JobSpec, LaunchOptions, launch

__all__ = ["JobSpec", "LaunchOptions", "cached_partition_set", "launch", "partition_cache"]
