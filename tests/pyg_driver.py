"""Test helper: a PyG user's full-graph script, for every kind of ``MessagePassing`` layer the bridge
must carry (PyG's ``GCNConv``, ``SAGEConv``, ``GATConv``, ``GINConv`` and a user-written layer that
reads ``edge_attr``), each in a user's own model class, dropout 0.

``python -m pyg_driver OUT.json [MODEL ...]`` (every rank of a job, or alone) trains each model for
:data:`EPOCHS` epochs through ``commgraph.pyg`` on Cora and rank 0 writes each model's losses and
the bytes its exchanges sent. :func:`train_plain` trains the same models on the whole graph without
the bridge: the one-process script the distributed runs must equal.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, GCNConv, GINConv, MessagePassing, SAGEConv

from commgraph.graph import load_graph, to_pyg

EPOCHS = 4
HIDDEN = 16
MODELS = ("gcn", "sage", "gat", "gin", "edge")


class EdgeScaled(MessagePassing):
    """A user's layer: each neighbour's transformed row scaled by its edge's attribute, summed."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__(aggr="add")
        self.lin = torch.nn.Linear(in_channels, out_channels)

    def forward(self, x, edge_index, edge_attr):
        return self.propagate(edge_index, x=self.lin(x), edge_attr=edge_attr) + self.lin(x)

    def message(self, x_j, edge_attr):
        return x_j * edge_attr


def layer(kind: str, i: int, o: int) -> torch.nn.Module:
    if kind == "gcn":
        return GCNConv(i, o)
    if kind == "sage":
        return SAGEConv(i, o)
    if kind == "gat":
        return GATConv(i, o, heads=1)
    if kind == "gin":
        return GINConv(torch.nn.Sequential(torch.nn.Linear(i, o), torch.nn.ReLU(), torch.nn.Linear(o, o)))
    return EdgeScaled(i, o)


class Net(torch.nn.Module):
    def __init__(self, kind: str, features: int, classes: int):
        super().__init__()
        self.kind = kind
        self.conv1, self.conv2 = layer(kind, features, HIDDEN), layer(kind, HIDDEN, classes)

    def forward(self, data):
        extra = (data.edge_attr,) if self.kind == "edge" else ()
        h = F.relu(self.conv1(data.x, data.edge_index, *extra))
        return self.conv2(h, data.edge_index, *extra)


def cora():
    """Cora as PyG's ``Data``, with an edge attribute that depends on the edge's end points."""
    data = to_pyg(load_graph("cora"))
    src, dst = data.edge_index
    data.edge_attr = (((src * 7 + dst * 3) % 5).float() / 5 + 0.1).unsqueeze(1)
    return data


def _epochs(model, data, loss_of):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(EPOCHS):
        optimizer.zero_grad()
        loss = loss_of(model(data), data)
        loss.backward()
        optimizer.step()
        yield loss.item()


def train_plain(kind: str) -> list[float]:
    """The one-process PyG script's losses."""
    data = cora()
    mask = data.train_mask
    torch.manual_seed(0)
    model = Net(kind, data.num_features, 7)
    return list(_epochs(model, data, lambda out, d: F.cross_entropy(out[mask], d.y[mask])))


def main() -> None:
    import commgraph.pyg as cg

    cg.init(timeout=120)
    out, kinds = sys.argv[1], sys.argv[2:] or list(MODELS)
    part = cg.partition(cora())
    results = {}
    for kind in kinds:
        torch.manual_seed(0)
        model = cg.full_graph(Net(kind, part.num_features, 7), part)
        mask = part.train_mask
        losses = list(
            _epochs(model, part, lambda o, d: cg.global_mean(F.cross_entropy(o[mask], d.y[mask], reduction="none")))
        )
        every = model.job.comm.all_gather_object(model.bytes)  # each rank's, to check the global sum against
        summed = model.global_traffic()
        results[kind] = {"losses": losses, "bytes": model.bytes, "every": every, "global": asdict(summed)}
        results[kind]["traffic"] = asdict(model.traffic)
    if cg.rank() == 0:
        with open(out, "w") as handle:
            json.dump(results, handle)


if __name__ == "__main__":
    main()
