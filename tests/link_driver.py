"""Test helper run as every rank of a local job (or alone): a GCN link predictor trained full-graph
on Cora through ``commgraph.pyg``, as a user's script would train it.

Usage (through ``launch_local(..., module="link_driver")``): ``python -m link_driver OUT.json EPOCHS``.
Rank 0 writes ``OUT.json``: each epoch's loss (over a rank's share of the pairs with
``cg.global_mean``, and again through ``cg.full_graph(..., decoder="decode")`` with the one-process
loss), the test AUC, Hits@20 and MRR, whether ranks passing different label edges were refused,
whether the link loaders' shares and blocks are right, and the bytes rank 0 sent, by what they
carried (``link_forward``/``link_backward``: the label edges' rows).
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv

import commgraph.pyg as cg
from commgraph.errors import BridgeError
from commgraph.graph import load_graph, to_pyg


class Net(torch.nn.Module):
    def __init__(self, features: int, hidden: int):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(features, hidden), GCNConv(hidden, hidden)

    def encode(self, x, edge_index):
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)

    def decode(self, z, edge_label_index):
        return (z[edge_label_index[0]] * z[edge_label_index[1]]).sum(-1)


def _check_loader(part, train_data) -> dict:
    """The ranks' link loaders together load every training label edge once, and their blocks
    hold training edges only."""
    n = train_data.num_nodes
    loader = cg.LinkNeighborLoader(part, [5, 5], train_data.edge_label_index, neg_sampling_ratio=1.0, batch_size=512)
    train_keys = (train_data.edge_index[0] * n + train_data.edge_index[1]).numpy()
    loaded, blocks_ok = [], True
    for batch in loader:
        edges = batch.n_id[batch.edge_index]
        blocks_ok &= bool(np.isin((edges[0] * n + edges[1]).numpy(), train_keys).all())
        loaded.append(batch.input_id[batch.input_id >= 0].numpy())
    every = np.sort(np.concatenate(cg.init().comm.all_gather_object(np.concatenate(loaded))))
    everywhere = all(cg.init().comm.all_gather_object(blocks_ok))
    return {
        "loader_loads_each_edge_once": bool(np.array_equal(every, np.arange(train_data.edge_label_index.shape[1]))),
        "loader_blocks_train_only": everywhere,
    }


def _share_loss(model, z, part, label_index, label) -> torch.Tensor:
    """The loss over this rank's share of the pairs, made global."""
    rows, index, label, _ = cg.edge_embeddings(z, label_index, part, label)
    return cg.global_mean(F.binary_cross_entropy_with_logits(model.decode(rows, index), label, reduction="none"))


def _every_pair_loss(model, z, part, label_index, label) -> torch.Tensor:
    """The one-process script's loss: the wrapper's decoder scores every pair on every rank."""
    return F.binary_cross_entropy_with_logits(model.decode(z, label_index), label)


def _losses(model, part, train_data, num_nodes: int, epochs: int, loss_of) -> list[float]:
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for epoch in range(epochs):
        optimizer.zero_grad()
        z = model.encode(part.x, part.edge_index)
        pos = train_data.edge_label_index
        neg = cg.negative_sampling(train_data.edge_index, num_nodes, pos.shape[1], seed=epoch)
        label = torch.cat([torch.ones(pos.shape[1]), torch.zeros(neg.shape[1])])
        loss = loss_of(model, z, part, torch.cat([pos, neg], 1), label)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    out, epochs = Path(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)
    cg.init(device="cpu")
    data = to_pyg(load_graph("cora"))
    train_data, _, test_data = cg.edge_split(data, num_val=0.05, num_test=0.1, seed=0)
    part = cg.partition(train_data)
    torch.manual_seed(0)
    model = cg.full_graph(Net(data.num_features, 16), part)
    losses = _losses(model, part, train_data, data.num_nodes, epochs, _share_loss)
    torch.manual_seed(0)
    decoded = cg.full_graph(Net(data.num_features, 16), part, decoder="decode")
    decoder_losses = _losses(decoded, part, train_data, data.num_nodes, epochs, _every_pair_loss)
    with torch.no_grad():
        z = model.encode(part.x, part.edge_index)
        pos = test_data.edge_label_index
        neg = cg.negative_sampling(data.edge_index, data.num_nodes, pos.shape[1], seed=10_000)
        rows, index, label, _ = cg.edge_embeddings(
            z, torch.cat([pos, neg], 1), part, torch.cat([torch.ones(pos.shape[1]), torch.zeros(neg.shape[1])])
        )
        scores = model.decode(rows, index)
        try:  # each rank's own edges: refused on every rank, when there are several
            cg.edge_embeddings(z, pos[:, cg.rank() :], part)
            refused = False
        except BridgeError:
            refused = True
    loader_checks = _check_loader(part, train_data)
    positive = label == 1
    result = {
        "losses": losses,
        "decoder_losses": decoder_losses,
        "auc": cg.auc(scores, label),
        "hits20": cg.hits_at_k(scores[positive], scores[~positive], 20),
        "mrr": cg.mrr(scores[positive], scores[~positive]),
        "refused_different_edges": refused,
        **loader_checks,
        "bytes": {**model.bytes, **cg.init().comm.bytes},
    }
    if cg.rank() == 0:
        out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
