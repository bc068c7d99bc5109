"""The GNN kinds and the check of a model's shape, light to import (no torch): a command's parser
and its checks before any worker starts use them."""

from __future__ import annotations

from commgraph.errors import TrainingError

MODELS = ("gcn", "sage", "gat", "gin", "commnet")  # models of a graph of one node type (nn.model's GNN)
HETERO_MODELS = ("rgcn", "hgt")  # models of a heterogeneous graph (nn.rgcn, nn.hgt)
TRAIN_MODELS = MODELS + HETERO_MODELS
# models whose layers transform each source row before aggregating (nn.transform_first.TransformFirst), by
# name for the checks made before torch is imported (a test holds it to the layers)
LINEAR_FIRST = ("gcn", "sage")


def check_model_options(layers: int, hidden: int, heads: int, dropout: float) -> None:
    """Refuse a model shape no GNN can have; the CLI asks before it partitions or starts workers."""
    if layers < 1 or hidden < 1 or heads < 1 or not 0 <= dropout < 1:
        raise TrainingError(
            "need layers >= 1, hidden >= 1, heads >= 1 and 0 <= dropout < 1",
            parameters=("layers", "hidden", "heads", "dropout"),
        )
