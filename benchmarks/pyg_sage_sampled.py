"""Sampled GraphSAGE through the PyG bridge: the script ``benchmarks/pyg_bridge.py --sampled`` runs
under ``commgraph run`` against ``commgraph train --sampler neighbor``'s built-in GraphSAGE.

``commgraph run --workers N benchmarks/pyg_sage_sampled.py SET OUT.json --epochs E --hidden H
--layers L --fanout 15,10 --batch-size B`` trains PyG's own ``GraphSAGE`` (ReLU between layers,
dropout 0, Adam) in ``DistributedDataParallel`` from ``cg.NeighborLoader`` batches of the
partition set SET (each layer trimmed to the rows later layers read, PyG's ``trim_to_layer``),
each rank drawing its own training nodes, shuffled; rank 0 writes each epoch's
seconds (the slowest rank's: sampling, rows, forward, loss, backward, gradient all-reduce and
optimiser step of every batch), loss and steps, and the seeds of an epoch (every training node once).
"""

import argparse
import json
import time

import torch
import torch.distributed
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE

import commgraph.pyg as cg

parser = argparse.ArgumentParser()
parser.add_argument("set")
parser.add_argument("out")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--hidden", type=int, default=128)
parser.add_argument("--layers", type=int, default=2)
parser.add_argument("--fanout", default="15,10")
parser.add_argument("--batch-size", type=int, default=1024)
args = parser.parse_args()

cg.init()
torch.manual_seed(0)
part = cg.partition(args.set)
classes = part.y.max().reshape(1) + 1
torch.distributed.all_reduce(classes, op=torch.distributed.ReduceOp.MAX)  # torch's own group, as DDP uses
seeds = part.n_id[part.train_mask]
loader = cg.NeighborLoader(
    part,
    num_neighbors=[int(f) for f in args.fanout.split(",")],
    batch_size=args.batch_size,
    input_nodes=seeds,
    shuffle=True,
)
total = torch.tensor([seeds.shape[0]])
torch.distributed.all_reduce(total)
model = DistributedDataParallel(GraphSAGE(part.num_features, args.hidden, args.layers, int(classes), dropout=0.0))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
epochs = []
for epoch in range(args.epochs):
    start = time.perf_counter()
    for batch in loader:
        optimizer.zero_grad()
        out = model(
            batch.x,
            batch.edge_index,
            num_sampled_nodes_per_hop=batch.num_sampled_nodes,
            num_sampled_edges_per_hop=batch.num_sampled_edges,
        )[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y[: batch.batch_size])
        loss.backward()
        optimizer.step()
    seconds = time.perf_counter() - start
    epochs.append({"epoch": epoch + 1, "seconds": seconds, "loss": loss.item(), "steps": len(loader)})
every = [None] * cg.world_size()
torch.distributed.all_gather_object(every, {"epochs": epochs})
if cg.rank() == 0:
    rows = [{**epoch, "seconds": max(rank["epochs"][k]["seconds"] for rank in every)} for k, epoch in enumerate(epochs)]
    with open(args.out, "w") as handle:
        json.dump({"epochs": rows, "seeds": int(total)}, handle)
