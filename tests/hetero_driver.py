"""Test helper: a PyG user's heterogeneous full-graph script, with a ``to_hetero(GraphSAGE)`` model
and an R-GCN-style ``HeteroConv`` (a mean-aggregating ``GraphConv`` per relation, summed per
destination type, each with its own root weight), dropout 0.

``python -m hetero_driver OUT.json [MODEL ...]`` (every rank of a job, or alone) trains each model
for :data:`EPOCHS` epochs through ``commgraph.pyg`` on :func:`typed_graph` and rank 0 writes each
model's losses and the bytes its exchanges sent. :func:`train_plain` trains the same models on the
whole graph without the bridge: the one-process script the distributed runs must equal.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F
from torch_geometric.data import HeteroData
from torch_geometric.nn import GraphConv, HeteroConv, SAGEConv, to_hetero

EPOCHS = 4
HIDDEN = 16
CLASSES = 4
FEATURES = 8
MODELS = ("sage", "rgcn")


def typed_graph() -> HeteroData:
    """Papers (features, labels, a train mask) and authors (features): authors write papers,
    papers are written by authors, papers cite papers; labels follow the features, so a model
    learns."""
    g = torch.Generator().manual_seed(0)
    data = HeteroData()
    papers, authors = 150, 90
    data["paper"].x = torch.randn(papers, FEATURES, generator=g)
    data["paper"].y = data["paper"].x[:, :CLASSES].argmax(1)
    data["paper"].train_mask = torch.rand(papers, generator=g) < 0.6
    data["author"].x = torch.randn(authors, FEATURES, generator=g)
    writes = torch.stack(
        [torch.randint(0, authors, (300,), generator=g), torch.randint(0, papers, (300,), generator=g)]
    )
    data["author", "writes", "paper"].edge_index = writes
    data["paper", "rev_writes", "author"].edge_index = writes.flip(0)
    data["paper", "cites", "paper"].edge_index = torch.randint(0, papers, (2, 400), generator=g)
    return data


class Sage(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(FEATURES, HIDDEN), SAGEConv(HIDDEN, CLASSES)

    def forward(self, x, edge_index):
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)


class RGCN(torch.nn.Module):
    def __init__(self, metadata):
        super().__init__()
        relations = metadata[1]
        self.conv1 = HeteroConv({r: GraphConv(FEATURES, HIDDEN, aggr="mean") for r in relations}, aggr="sum")
        self.conv2 = HeteroConv({r: GraphConv(HIDDEN, CLASSES, aggr="mean") for r in relations}, aggr="sum")

    def forward(self, x_dict, edge_index_dict):
        h = {t: F.relu(v) for t, v in self.conv1(x_dict, edge_index_dict).items()}
        return self.conv2(h, edge_index_dict)


def model(kind: str, metadata) -> torch.nn.Module:
    torch.manual_seed(0)
    return to_hetero(Sage(), metadata) if kind == "sage" else RGCN(metadata)


def _epochs(net, data, loss_of):
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    for _ in range(EPOCHS):
        optimizer.zero_grad()
        loss = loss_of(net(data.x_dict, data.edge_index_dict)["paper"], data["paper"])
        loss.backward()
        optimizer.step()
        yield loss.item()


def train_plain(kind: str) -> list[float]:
    """The one-process PyG script's losses."""
    data = typed_graph()
    net = model(kind, data.metadata())
    return list(_epochs(net, data, lambda out, p: F.cross_entropy(out[p.train_mask], p.y[p.train_mask])))


def sent_rows(part) -> dict[str, int]:
    """Per node type, the rows this rank owns that the other ranks' halos hold: what one exchange
    of a p2p plan sends."""
    from commgraph.pyg.data import handle_of

    handle = handle_of(part)
    rank, layout = handle.part.index, handle.types
    counts = dict.fromkeys(layout.node_types, 0)
    for k in range(handle.pset.num_parts):
        if k != rank:
            other = handle.pset.part(k)
            mine = other.halo[other.halo_owner == rank]
            for t in layout.node_types:
                low, high = layout.bounds(t)
                counts[t] += int(((mine >= low) & (mine < high)).sum())
    return counts


def main() -> None:
    import commgraph.pyg as cg

    cg.init(timeout=120)
    out, kinds = sys.argv[1], sys.argv[2:] or list(MODELS)
    part = cg.partition(typed_graph())
    results = {}
    for kind in kinds:
        net = cg.full_graph(model(kind, part.metadata()), part, plan="p2p")

        def loss_of(o, p):
            return cg.global_mean(F.cross_entropy(o[p.train_mask], p.y[p.train_mask], reduction="none"))

        results[kind] = {"losses": list(_epochs(net, part, loss_of)), "bytes": net.bytes, "sent": sent_rows(part)}
    if cg.rank() == 0:
        with open(out, "w") as handle:
            json.dump(results, handle)


if __name__ == "__main__":
    main()
