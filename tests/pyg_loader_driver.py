"""Test helper run as each rank of a 2-rank job (``launch_local(..., module="pyg_loader_driver")``):
a PyG GraphSAGE loop over ``commgraph.pyg.NeighborLoader`` batches on Cora, the model in
``DistributedDataParallel``.

Usage: ``python -m pyg_loader_driver OUT``. The seeds are 40 nodes of part 0 and 10 of part 1, so
the ranks own different numbers of them. Rank r writes ``OUT/rank<r>.json``: the seeds of its own
batches (before any is made again), the seeds asked for, ``len(loader)``, the batches it trained
on, how many its seeds need, the model's parameters before and after an epoch, and per batch of a
second loader whose seeds all lie on part 0: the seeds, nodes and edges, and whether the loss was
finite; and the seeds of each batch of the layer-wise inference loader (``num_neighbors=[-1]``).
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE

import commgraph.pyg as cg
from commgraph.graph import load_graph
from commgraph.graph.pyg import to_pyg
from commgraph.pyg.data import handle_of

BATCH = 8


def flat(model: torch.nn.Module) -> list[float]:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def main() -> None:
    out = Path(sys.argv[1])
    torch.set_num_threads(1)
    cg.init(timeout=30, device="cpu")
    data = to_pyg(load_graph("cora"))
    owner = np.asarray(handle_of(cg.partition(data)).pset.assignment())
    wanted = torch.from_numpy(np.concatenate([np.flatnonzero(owner == 0)[:40], np.flatnonzero(owner == 1)[:10]]))
    loader = cg.NeighborLoader(data, num_neighbors=[5, 3], batch_size=BATCH, input_nodes=wanted, shuffle=True)
    torch.manual_seed(cg.rank())  # different on each rank: DDP starts every rank from rank 0's
    model = DistributedDataParallel(GraphSAGE(data.num_features, 16, 2, 7))
    initial = flat(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    own = math.ceil(loader.seeds.shape[0] / BATCH)
    seeds, batches = [], 0
    for batch in loader:
        optimizer.zero_grad()
        logits = model(batch.x, batch.edge_index)[: batch.batch_size]
        F.cross_entropy(logits, batch.y[: batch.batch_size]).backward()
        optimizer.step()
        if batches < own:
            seeds += batch.n_id[: batch.batch_size].tolist()
        batches += 1
    # seeds on part 0 only: rank 1's batches are empty, and a loss through cg.global_mean still trains in step
    few = cg.NeighborLoader(data, num_neighbors=[5, 3], batch_size=2, input_nodes=wanted[:5])
    sizes = []
    for batch in few:
        optimizer.zero_grad()
        logits = model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = cg.global_mean(F.cross_entropy(logits, batch.y[: batch.batch_size], reduction="none"))
        loss.backward()
        optimizer.step()
        sizes.append([batch.batch_size, batch.x.shape[0], batch.edge_index.shape[1], bool(loss.isfinite())])
    everything = cg.NeighborLoader(data, num_neighbors=[-1], batch_size=1000)  # reddit.py's subgraph_loader
    result = {
        "inference": [b.n_id[: b.batch_size].tolist() for b in everything],
        "few": sizes,
        "seeds": seeds,
        "input_nodes": wanted.tolist(),
        "len": len(loader),
        "batches": batches,
        "own_batches": own,
        "initial": initial,
        "parameters": flat(model),
    }
    (out / f"rank{cg.rank()}.json").write_text(json.dumps(result))
    cg.shutdown()


if __name__ == "__main__":
    main()
