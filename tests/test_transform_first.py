"""Layers that transform before they aggregate are declared (:mod:`commgraph.nn.transform_first`):
the built-in GCN and GraphSAGE layers implement the protocol, the light list of model names agrees
with it, and a layer computed from its owners' transformed rows is the layer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.nn import GATConv, GraphConv, SAGEConv

from commgraph.nn import GNN, LINEAR_FIRST, MODELS, Block, RowTransform, TransformFirst
from commgraph.pyg.first_layer import LinearFirstLayer


def test_the_light_list_of_linear_first_models_is_the_models_whose_layers_transform_first():
    declared = tuple(kind for kind in MODELS if GNN(kind, 8, 4, 3).linear_first)
    assert declared == LINEAR_FIRST == ("gcn", "sage")
    assert [GNN(kind, 8, 4, 3).has_root for kind in MODELS] == [False, True, False, False, False]


@pytest.mark.parametrize("kind", LINEAR_FIRST)
def test_a_layer_from_its_transformed_rows_is_the_layer(kind):
    torch.manual_seed(0)
    layer = GNN(kind, 6, 5, 3, layers=1).convs[0]
    assert isinstance(layer, TransformFirst)
    indptr, indices = np.array([0, 2, 3, 3]), np.array([1, 4, 0])  # destination 2 has no in-edge
    block = Block.from_csr(5, indptr, indices, torch.tensor([2.0, 1.0, 0.0, 3.0, 1.0]))
    x = torch.randn(5, 6)
    rows = layer.from_rows(layer.neighbour_rows(x), None if not layer.has_root else layer.root_rows(x[:3]), block)
    torch.testing.assert_close(rows, layer(x, x[:3], block), rtol=1e-5, atol=1e-6)


def test_pyg_convs_on_the_bridge_are_row_transforms_and_others_are_refused():
    for conv, root in ((SAGEConv(6, 4), True), (SAGEConv(6, 4, root_weight=False), False), (GraphConv(6, 4), True)):
        first = LinearFirstLayer.of(conv)
        assert isinstance(first, RowTransform) and not isinstance(first, TransformFirst)
        assert first.has_root is root
    assert not isinstance(GNN("gat", 8, 4, 3).convs[0], RowTransform)
    with pytest.raises(Exception, match="first_layer='features'"):
        LinearFirstLayer.of(GATConv(6, 4))
