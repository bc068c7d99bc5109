"""sage_sampled.py across ranks (docs/pyg.md): each rank draws the seeds it owns.

``commgraph run --workers 4 sage_sampled_distributed.py``, or ``torchrun --nproc-per-node 4 sage_sampled_distributed.py``.
"""

import argparse

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric import seed_everything
from torch_geometric.datasets import Planetoid
from torch.nn.parallel import DistributedDataParallel as DDP
from torch_geometric.nn import GraphSAGE

import commgraph.pyg as cg
from commgraph.pyg import NeighborLoader

parser = argparse.ArgumentParser()
parser.add_argument("--root", default="data/Planetoid")
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()

cg.init()
seed_everything(args.seed)
data = Planetoid(args.root, "Cora", transform=T.NormalizeFeatures())[0]
train_loader = NeighborLoader(data, num_neighbors=[10, 5], batch_size=32, shuffle=True, input_nodes=data.train_mask)
model = DDP(GraphSAGE(data.num_features, 64, 2, 7))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

for epoch in range(1, args.epochs + 1):
    model.train()
    for batch in train_loader:
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y[: batch.batch_size])
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(dim=-1)
    test_acc = float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())
    print(f"Epoch: {epoch:03d}, Loss: {loss.item():.4f}, Test: {test_acc:.4f}")
