"""Test helper: ``python -m typed_set_driver OUT.json ROUTE [SET]`` trains a ``to_hetero(GraphSAGE)``
model full-graph on :data:`SPEC`'s part, taken either from a typed partition set (``ROUTE`` ``set``,
``SET`` its directory: no rank loads the whole graph) or from the whole ``HeteroData`` (``data``);
rank 0 writes the losses."""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv, to_hetero

SPEC = "mag-shaped:scale=0.002,seed=0"
EPOCHS = 3
HIDDEN = 16
CLASSES = 349  # the graph's classes


class Sage(torch.nn.Module):
    def __init__(self, features: int, classes: int):
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(features, HIDDEN), SAGEConv(HIDDEN, classes)

    def forward(self, x, edge_index):
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)


def main() -> None:
    import commgraph.pyg as cg

    cg.init(timeout=120)
    out, route = sys.argv[1], sys.argv[2]
    if route == "set":
        part = cg.partition(sys.argv[3])
    else:
        from commgraph.graph import load_graph, to_pyg

        part = cg.partition(to_pyg(load_graph(SPEC)))
    target = next(t for t in part.node_types if "y" in part[t])
    width = part[target].x.shape[1]
    for t in part.node_types:  # featureless types: rows fixed by their typed ids, the same on both routes
        if "x" not in part[t]:
            part[t].x = torch.sin(0.01 * part[t].n_id[:, None].float() * torch.arange(1, width + 1))
    torch.manual_seed(0)
    net = cg.full_graph(to_hetero(Sage(width, CLASSES), part.metadata()), part, plan="p2p")
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    store, losses = part[target], []
    for _ in range(EPOCHS):
        optimizer.zero_grad()
        o = net(part.x_dict, part.edge_index_dict)[target]
        loss = cg.global_mean(F.cross_entropy(o[store.train_mask], store.y[store.train_mask], reduction="none"))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    if cg.rank() == 0:
        with open(out, "w") as handle:
            json.dump(losses, handle)


if __name__ == "__main__":
    main()
