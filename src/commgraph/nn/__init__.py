"""GNN layers and models that compute on a partition's local blocks (GCN, GraphSAGE, GAT, GIN,
CommNet), reusing PyTorch Geometric's message passing."""

from commgraph.nn.block import Block
from commgraph.nn.model import GNN, LINEAR_FIRST, MODELS, check_model_options

__all__ = ["GNN", "LINEAR_FIRST", "MODELS", "Block", "check_model_options"]
