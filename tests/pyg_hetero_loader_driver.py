"""Test helper run as each rank of a job (``launch_forked(..., module="pyg_hetero_loader_driver")``):
a ``to_hetero(SAGE)`` model trained sampled at fanout -1 over ``commgraph.pyg.NeighborLoader``
batches of a small typed graph (:func:`make_data`), each rank's batch all of its training papers,
the loss :func:`commgraph.pyg.global_mean` and the model in ``DistributedDataParallel``.

Usage: ``python -m pyg_hetero_loader_driver OUT``. Rank r writes ``OUT/rank<r>.json``: the loss of
each epoch and the papers it trained on. :func:`full_graph_losses` is the one-process full-graph
run the test compares them with.
"""

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import commgraph.pyg as cg

EPOCHS = 4
WIDTH = 8
CLASSES = 3


def make_data():
    """A typed graph shaped like ogbn-mag in small: papers (labelled, half of them for training),
    authors and fields, three relations and their reverses, no repeated edge."""
    from torch_geometric.data import HeteroData

    g = torch.Generator().manual_seed(0)
    sizes = {"paper": 120, "author": 80, "field": 12}
    data = HeteroData()
    for node_type, n in sizes.items():
        data[node_type].x = torch.randn(n, WIDTH, generator=g)
    data["paper"].y = torch.randint(0, CLASSES, (sizes["paper"],), generator=g)
    data["paper"].train_mask = torch.rand(sizes["paper"], generator=g) < 0.5
    for (src, rel, dst), count in {
        ("paper", "cites", "paper"): 400,
        ("author", "writes", "paper"): 300,
        ("paper", "has_topic", "field"): 150,
    }.items():
        keys = torch.randperm(sizes[src] * sizes[dst], generator=g)[:count]
        edges = torch.stack([keys // sizes[dst], keys % sizes[dst]])
        data[src, rel, dst].edge_index = edges
        if src != dst:
            data[dst, f"rev_{rel}", src].edge_index = edges.flip(0)
    return data


def make_model(data):
    """``to_hetero`` of a two-layer GraphSAGE, the same initial weights in every process."""
    from torch_geometric.nn import SAGEConv, to_hetero

    class SAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = SAGEConv(WIDTH, 16)
            self.conv2 = SAGEConv(16, CLASSES)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    torch.manual_seed(0)
    return to_hetero(SAGE(), data.metadata(), aggr="sum")


def full_graph_losses(data) -> list[float]:
    """The one-process run: the model on the whole graph, the mean loss over every training paper."""
    model = make_model(data)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    mask, losses = data["paper"].train_mask, []
    for _ in range(EPOCHS):
        optimizer.zero_grad()
        out = model(data.x_dict, data.edge_index_dict)["paper"]
        loss = F.cross_entropy(out[mask], data["paper"].y[mask])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def sampled_losses(data) -> tuple[list[float], list[int]]:
    """The same run sampled at fanout -1, each rank's one batch all of its training papers: the
    global loss per epoch and the papers this rank trained on."""
    loader = cg.NeighborLoader(
        data,
        num_neighbors=[-1, -1],
        batch_size=data["paper"].num_nodes,
        input_nodes=("paper", data["paper"].train_mask),
    )
    model = DistributedDataParallel(make_model(data), find_unused_parameters=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    losses, seeds = [], []
    for _ in range(EPOCHS):
        for batch in loader:
            optimizer.zero_grad()
            size = batch["paper"].batch_size
            out = model(batch.x_dict, batch.edge_index_dict)["paper"][:size]
            loss = cg.global_mean(F.cross_entropy(out, batch["paper"].y[:size], reduction="none"))
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            seeds = batch["paper"].n_id[:size].tolist()
    return losses, seeds


def main() -> None:
    out = Path(sys.argv[1])
    torch.set_num_threads(1)
    cg.init(timeout=30, device="cpu")
    losses, seeds = sampled_losses(make_data())
    (out / f"rank{cg.rank()}.json").write_text(json.dumps({"losses": losses, "seeds": seeds}))
    cg.shutdown()


if __name__ == "__main__":
    main()
