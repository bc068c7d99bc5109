"""link.py across ranks (docs/pyg.md).

``commgraph run --workers 4 link_distributed.py``, or ``torchrun --nproc-per-node 4 link_distributed.py``.
"""

import argparse

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric import seed_everything
from torch_geometric.datasets import Planetoid
from torch_geometric.nn import GCNConv
from torch_geometric.utils import negative_sampling

import commgraph.pyg as cg

parser = argparse.ArgumentParser()
parser.add_argument("--root", default="data/Planetoid")
parser.add_argument("--epochs", type=int, default=100)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()

cg.init()
seed_everything(args.seed)  # random, numpy and torch: RandomLinkSplit draws its negatives with random
split = T.RandomLinkSplit(num_val=0.05, num_test=0.1, is_undirected=True, add_negative_train_samples=False)
dataset = Planetoid(args.root, "Cora", transform=T.Compose([T.NormalizeFeatures(), split]))
train_data, val_data, test_data = dataset[0]
train_data = cg.partition(train_data)


class Net(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden_channels)
        self.conv2 = GCNConv(hidden_channels, out_channels)

    def encode(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    def decode(self, z, edge_label_index):
        return (z[edge_label_index[0]] * z[edge_label_index[1]]).sum(dim=-1)


def auc(scores, labels):
    """The area under the ROC curve: how often a positive outscores a negative (ties count half)."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    return float(((pos[:, None] > neg).float() + 0.5 * (pos[:, None] == neg).float()).mean())


model = cg.full_graph(Net(dataset.num_features, 128, 64), train_data, decoder="decode")
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)


def train():
    model.train()
    optimizer.zero_grad()
    z = model.encode(train_data.x, train_data.edge_index)
    neg = negative_sampling(val_data.edge_index, val_data.num_nodes, train_data.edge_label_index.size(1))
    edge_label_index = torch.cat([train_data.edge_label_index, neg], dim=-1)
    edge_label = torch.cat([train_data.edge_label, train_data.edge_label.new_zeros(neg.size(1))])
    loss = F.binary_cross_entropy_with_logits(model.decode(z, edge_label_index), edge_label)
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def test(data):
    model.eval()
    z = model.encode(train_data.x, train_data.edge_index)
    return auc(model.decode(z, data.edge_label_index), data.edge_label)


for epoch in range(1, args.epochs + 1):
    loss = train()
    print(f"Epoch: {epoch:03d}, Loss: {loss:.4f}, Val: {test(val_data):.4f}, Test: {test(test_data):.4f}")
