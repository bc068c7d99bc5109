"""The one launcher of multi-process jobs: GRAPH or partition set, the partition cache under
``$COMMGRAPH_HOME``, torchrun or local worker processes, and the worker's options from one spec
(as data through the job's store). ``cli`` commands build a
:class:`JobSpec` and call :func:`launch`. Its names load on first use (:mod:`commgraph.lazy`);
nothing here imports torch before a job needs it."""

from commgraph.lazy import exports

__all__ = ["JobSpec", "LaunchOptions", "cached_partition_set", "launch", "partition_cache", "received"]

__getattr__ = exports(
    __name__,
    {
        "JobSpec": "launcher",
        "LaunchOptions": "options",
        "launch": "launcher",
        "received": "launcher",
        "cached_partition_set": "cache",
        "partition_cache": "cache",
    },
)
