"""The bridge for a user's own PyG code: ``import commgraph.pyg as cg``.

- :func:`init`, :func:`rank`, :func:`world_size`: join the job ``commgraph run`` or torchrun started
  (or a one-process world); torch's default process group, so DDP works.
- :func:`partition`: this rank's part as a PyG ``Data`` (owned rows, then halo rows).
- :class:`NeighborLoader`: PyG's sampled mini-batches, each rank drawing the seeds it owns.
- :func:`full_graph`: any model with ``MessagePassing`` layers, its halo refreshed before each by
  the planned all-gather; :func:`global_mean` / :func:`global_sum` make a loss or metric global.

Its names load on first use (:mod:`commgraph.lazy`).
"""

from commgraph.lazy import exports

__all__ = [
    "FullGraph",
    "NeighborLoader",
    "device",
    "full_graph",
    "global_mean",
    "global_sum",
    "init",
    "local_rank",
    "partition",
    "rank",
    "shutdown",
    "world_size",
]

__getattr__ = exports(
    __name__,
    {
        "init": "world",
        "rank": "world",
        "world_size": "world",
        "device": "world",
        "local_rank": "world",
        "shutdown": "world",
        "partition": "data",
        "full_graph": "full_graph",
        "FullGraph": "full_graph",
        "NeighborLoader": "loader",
        "global_mean": "reduce",
        "global_sum": "reduce",
    },
)
