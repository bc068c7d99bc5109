"""GCN on Cora, full-graph, as PyG's examples/gcn.py trains it (one process).

``python gcn.py`` (Planetoid downloads Cora into --root on first use). gcn_distributed.py is the
same script run across ranks with commgraph: see docs/pyg.md.
"""

import argparse

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import GCNConv

parser = argparse.ArgumentParser()
parser.add_argument("--root", default="data/Planetoid")
parser.add_argument("--epochs", type=int, default=200)
parser.add_argument("--hidden", type=int, default=16)
parser.add_argument("--dropout", type=float, default=0.5)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()

torch.manual_seed(args.seed)
dataset = Planetoid(args.root, "Cora", transform=T.NormalizeFeatures())
data = dataset[0]


class GCN(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden_channels)
        self.conv2 = GCNConv(hidden_channels, out_channels)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=args.dropout, training=self.training)
        x = self.conv1(x, edge_index).relu()
        x = F.dropout(x, p=args.dropout, training=self.training)
        return self.conv2(x, edge_index)


model = GCN(dataset.num_features, args.hidden, dataset.num_classes)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)


def train():
    model.train()
    optimizer.zero_grad()
    out = model(data.x, data.edge_index)
    loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def test():
    model.eval()
    pred = model(data.x, data.edge_index).argmax(dim=-1)
    accs = []
    for mask in [data.train_mask, data.val_mask, data.test_mask]:
        accs.append(float((pred[mask] == data.y[mask]).float().mean()))
    return accs


for epoch in range(1, args.epochs + 1):
    loss = train()
    train_acc, val_acc, test_acc = test()
    print(f"Epoch: {epoch:03d}, Loss: {loss:.4f}, Train: {train_acc:.4f}, Val: {val_acc:.4f}, Test: {test_acc:.4f}")
