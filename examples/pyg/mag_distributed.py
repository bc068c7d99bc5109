"""A to_hetero GraphSAGE on the mag-shaped graph (ogbn-mag's shape), full-graph, across ranks.

``python mag_distributed.py`` alone, ``commgraph run --workers 4 mag_distributed.py`` or
``torchrun --nproc-per-node 4 mag_distributed.py``: each rank trains on its part (each node type's
owned rows, then its halo), and the loss and accuracies are global. Types without features
(authors, institutions, fields) get a learnable embedding, read at the part's ``n_id``.
"""

import argparse

import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv, to_hetero

import commgraph.pyg as cg
from commgraph.graph import load_graph, to_pyg

parser = argparse.ArgumentParser()
parser.add_argument("--graph", default="mag-shaped:scale=0.01,seed=0")
parser.add_argument("--epochs", type=int, default=50)
parser.add_argument("--hidden", type=int, default=64)
parser.add_argument("--dropout", type=float, default=0.5)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()

cg.init()
torch.manual_seed(args.seed)
whole = to_pyg(load_graph(args.graph))
data = cg.partition(whole)
classes = int(whole["paper"].y.max()) + 1


class SAGE(torch.nn.Module):
    def __init__(self, hidden, out):
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), hidden)
        self.conv2 = SAGEConv((-1, -1), out)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=args.dropout, training=self.training)
        x = self.conv1(x, edge_index).relu()
        x = F.dropout(x, p=args.dropout, training=self.training)
        return self.conv2(x, edge_index)


class Mag(torch.nn.Module):
    def __init__(self):
        super().__init__()
        featureless = [t for t in whole.node_types if "x" not in whole[t]]
        self.embed = torch.nn.ModuleDict({t: torch.nn.Embedding(whole[t].num_nodes, args.hidden) for t in featureless})
        self.gnn = to_hetero(SAGE(args.hidden, classes), whole.metadata(), aggr="sum")

    def forward(self, part):
        x = {t: part[t].x if t not in self.embed else self.embed[t](part[t].n_id) for t in part.node_types}
        return self.gnn(x, part.edge_index_dict)["paper"]


module = Mag()
module(data)  # the lazy input sizes, before rank 0's parameters are broadcast
model = cg.full_graph(module, data)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
paper = data["paper"]

for epoch in range(1, args.epochs + 1):
    model.train()
    optimizer.zero_grad()
    out = model(data)
    loss = cg.global_mean(F.cross_entropy(out[paper.train_mask], paper.y[paper.train_mask], reduction="none"))
    loss.backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        pred = model(data).argmax(dim=-1)
    accs = [float(cg.global_mean(pred[m] == paper.y[m])) for m in (paper.train_mask, paper.val_mask, paper.test_mask)]
    print(f"Epoch: {epoch:03d}, Loss: {loss.item():.4f}, Train: {accs[0]:.4f}, Val: {accs[1]:.4f}, Test: {accs[2]:.4f}")
