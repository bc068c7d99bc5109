"""GraphSAGE through the PyG bridge: the script ``benchmarks/pyg_bridge.py`` runs under ``commgraph
run`` against ``commgraph train``'s built-in GraphSAGE.

``commgraph run --workers N benchmarks/pyg_sage.py SET OUT.json --epochs E --hidden H --layers L``
trains PyG's own ``SAGEConv`` stack (ReLU between layers, dropout 0, Adam) full-graph on the
partition set SET through ``cg.full_graph`` with the ``p2p`` plan, and rank 0 writes each epoch's
seconds (rank 0's, as ``commgraph train`` reports its step: forward, loss, backward, gradient
average and optimiser step), loss and the bytes each rank sent.
"""

import argparse
import json
import time

import torch
import torch.distributed
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv

import commgraph.pyg as cg

parser = argparse.ArgumentParser()
parser.add_argument("set")
parser.add_argument("out")
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--hidden", type=int, default=128)
parser.add_argument("--layers", type=int, default=2)
args = parser.parse_args()

cg.init()
torch.manual_seed(0)
data = cg.partition(args.set)
classes = data.y.max().reshape(1) + 1
torch.distributed.all_reduce(classes, op=torch.distributed.ReduceOp.MAX)  # torch's own group, as DDP uses


class SAGE(torch.nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.convs = torch.nn.ModuleList(SAGEConv(i, o) for i, o in zip(sizes, sizes[1:]))

    def forward(self, x, edge_index):
        for k, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if k < len(self.convs) - 1:
                x = F.relu(x)
        return x


widths = [data.num_features] + [args.hidden] * (args.layers - 1) + [int(classes)]
model = cg.full_graph(SAGE(widths), data, plan="p2p")
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
epochs = []
for epoch in range(args.epochs):
    start = time.perf_counter()
    optimizer.zero_grad()
    out = model(data.x, data.edge_index)
    mask = data.train_mask
    loss = cg.global_mean(F.cross_entropy(out[mask], data.y[mask], reduction="none"))
    loss.backward()
    optimizer.step()
    seconds = time.perf_counter() - start
    epochs.append({"epoch": epoch + 1, "seconds": seconds, "loss": loss.item()})
every = [None] * cg.world_size()
torch.distributed.all_gather_object(every, {"epochs": epochs, "bytes": model.bytes})
if cg.rank() == 0:
    rows = [{**epoch, "seconds": max(rank["epochs"][k]["seconds"] for rank in every)} for k, epoch in enumerate(epochs)]
    with open(args.out, "w") as handle:
        json.dump({"epochs": rows, "bytes": [rank["bytes"] for rank in every]}, handle)
