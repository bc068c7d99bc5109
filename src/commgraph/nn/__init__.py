"""GNN layers and models that compute on a partition's local blocks (GCN, GraphSAGE, GAT, GIN,
CommNet), reusing PyTorch Geometric's message passing. Its names load on first use
(:mod:`commgraph.lazy`): the model options (:mod:`commgraph.nn.options`) do not import torch."""

from commgraph.lazy import exports

__all__ = ["GNN", "LINEAR_FIRST", "MODELS", "Block", "check_model_options"]

__getattr__ = exports(
    __name__,
    {
        "Block": "block",
        "GNN": "model",
        "LINEAR_FIRST": "options",
        "MODELS": "options",
        "check_model_options": "options",
    },
)
