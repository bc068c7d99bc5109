"""GNN layers and models that compute on a partition's local blocks (GCN, GraphSAGE, GAT, GIN,
CommNet; R-GCN and HGT on a typed graph's part), reusing PyTorch Geometric's message passing. Its names
load on first use (:mod:`commgraph.lazy`): the model options (:mod:`commgraph.nn.options`) do not
import torch."""

from commgraph.lazy import exports

__all__ = [
    "GNN",
    "HETERO_MODELS",
    "HGT",
    "LINEAR_FIRST",
    "MODELS",
    "RGCN",
    "Block",
    "HGTLayer",
    "RGCNLayer",
    "RowTransform",
    "TransformFirst",
    "check_model_options",
]

__getattr__ = exports(
    __name__,
    {
        "Block": "block",
        "GNN": "model",
        "HETERO_MODELS": "options",
        "HGT": "hgt",
        "HGTLayer": "hgt",
        "RGCN": "rgcn",
        "RGCNLayer": "rgcn",
        "LINEAR_FIRST": "options",
        "MODELS": "options",
        "RowTransform": "transform_first",
        "TransformFirst": "transform_first",
        "check_model_options": "options",
    },
)
