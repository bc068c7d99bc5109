"""The one launcher of multi-process jobs: GRAPH or partition set, the partition cache under
``$COMMGRAPH_HOME``, torchrun or local worker processes, and the worker's command line from one
spec. ``cli`` commands build a :class:`JobSpec` and call :func:`launch`. Its names load on first use
(:mod:`commgraph.lazy`); nothing here imports torch before a job needs it."""

from commgraph.lazy import exports

__all__ = ["JobSpec", "LaunchOptions", "cached_partition_set", "launch", "partition_cache"]

__getattr__ = exports(
    __name__,
    {
        "JobSpec": "launcher",
        "LaunchOptions": "options",
        "launch": "launcher",
        "cached_partition_set": "cache",
        "partition_cache": "cache",
    },
)
