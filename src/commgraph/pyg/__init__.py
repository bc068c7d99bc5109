"""The bridge for a user's own PyG code: ``import commgraph.pyg as cg``.

- :func:`init`, :func:`rank`, :func:`world_size`: join the job ``commgraph run`` or torchrun started
  (or a one-process world); torch's default process group, so DDP works.
- :func:`partition`: this rank's part as a PyG ``Data`` (owned rows, then halo rows), or of a
  ``HeteroData`` as a ``HeteroData`` (each node type's owned rows, then its halo rows).
- :class:`NeighborLoader`: PyG's sampled mini-batches, each rank drawing the seeds it owns; of a
  ``HeteroData`` too, with fanouts per relation (:mod:`commgraph.pyg.hetero_loader`);
  :func:`sampled` wraps a model whose first layer the rows' owners compute (``first_layer="owner"``).
- :func:`full_graph`: any model with ``MessagePassing`` layers, its halo refreshed before each by
  the planned all-gather (a ``to_hetero`` or ``HeteroConv`` model on a heterogeneous part:
  :class:`HeteroFullGraph`, each type's rows once per forward); :func:`global_mean` /
  :func:`global_sum` make a loss or metric global.
- :func:`unified`: a host table the GPU reads directly (PyTorch-Direct), a plain tensor on a CPU.
- Link prediction: :func:`edge_split`, :func:`negative_sampling` (the same on every rank for a
  seed), :func:`edge_embeddings` (both endpoints' rows of this rank's label edges) and the global
  metrics :func:`auc`, :func:`hits_at_k`, :func:`mrr`; :class:`LinkNeighborLoader` for sampled
  batches of label edges.

Its names load on first use (:mod:`commgraph.lazy`).
"""

from commgraph.lazy import exports

__all__ = [
    "EdgeRows",
    "FullGraph",
    "HeteroFullGraph",
    "LinkNeighborLoader",
    "LinkSplit",
    "NeighborLoader",
    "auc",
    "device",
    "edge_embeddings",
    "edge_share",
    "edge_split",
    "full_graph",
    "global_mean",
    "global_sum",
    "hits_at_k",
    "init",
    "local_rank",
    "mrr",
    "negative_sampling",
    "partition",
    "rank",
    "sampled",
    "SampledModel",
    "shutdown",
    "unified",
    "UnifiedTensor",
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
        "partition": "entry",
        "full_graph": "entry",
        "FullGraph": "full",
        "HeteroFullGraph": "hetero",
        "NeighborLoader": "loader",
        "sampled": "first_layer",
        "SampledModel": "first_layer",
        "global_mean": "reduce",
        "global_sum": "reduce",
        "unified": "direct",
        "UnifiedTensor": "direct",
        "edge_split": "link",
        "LinkSplit": "link",
        "negative_sampling": "link",
        "edge_share": "link",
        "edge_embeddings": "endpoints",
        "EdgeRows": "endpoints",
        "LinkNeighborLoader": "link_loader",
        "auc": "metrics",
        "hits_at_k": "metrics",
        "mrr": "metrics",
    },
)
