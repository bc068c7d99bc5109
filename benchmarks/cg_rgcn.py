r"""Sampled R-GCN through the PyG bridge, one process: commgraph's side of ``benchmarks/dgl_compare.py
rgcn`` (DGL's is ``benchmarks/dgl_rgcn.py``, whose module description gives the layer).

``python benchmarks/cg_rgcn.py FILE.npz`` reads the heterogeneous graph file
(``benchmarks/hetero_file.py``) as a PyG ``HeteroData`` and trains on ``cg.NeighborLoader`` batches:
``--batch-size`` training nodes of the target type, ``num_neighbors`` the ``--fanout`` for every
relation (given in DGL's order, the first layer's first, and reversed here: PyG lists the seeds'
hop first). The model is DGL's ``RelGraphConvLayer`` in PyG's own layers: per relation a
``SAGEConv`` with mean aggregation and no root weight or bias (:math:`W_r` applied to the mean of
the relation's in-neighbours, ``GraphConv(norm="right")``), summed into each destination type as
``HeteroConv(aggr="sum")`` does, plus a self-loop weight shared by the types and a bias; learnable
input embeddings for the types without features. Each layer computes the rows the next one reads
only, as DGL's blocks do, from the batch's ``num_sampled_nodes`` and ``num_sampled_edges`` (PyG's
``trim_to_layer`` counts): layer :math:`l` of :math:`L` outputs each type's nodes of hops
:math:`0..L-1-l` from the edges of hops :math:`1..L-l`, each relation's given as PyG's sparse
``adj_t`` (:func:`cg_link.adjacency`). Cross-entropy on the seeds, Adam (lr 0.01).
Prints one JSON object: :func:`steps.timed_steps`'s figures (rate: seeds per second).

    python cg_rgcn.py FILE.npz [--warmup 3] [--steps 20] [--fanout 25,20] [--hidden 64] [--batch-size 1024]
"""

import json
import time

import torch
import torch.nn.functional as F
from torch_geometric.data import HeteroData
from torch_geometric.nn import SAGEConv

import commgraph.pyg as cg
from cg_link import adjacency
from hetero_file import HeteroArrays
from steps import side_options, timed_steps


class RelGraphConvLayer(torch.nn.Module):
    """One R-GCN layer over the rows of hops ``0..hops-1`` (see the module description)."""

    def __init__(self, in_size: int, out_size: int, edge_types: list, last: bool):
        super().__init__()
        self.edge_types = edge_types
        self.convs = torch.nn.ModuleList(
            SAGEConv(in_size, out_size, aggr="mean", root_weight=False, bias=False) for _ in edge_types
        )
        self.loop_weight = torch.nn.Parameter(torch.empty(in_size, out_size))
        torch.nn.init.xavier_uniform_(self.loop_weight, gain=torch.nn.init.calculate_gain("relu"))
        self.bias = torch.nn.Parameter(torch.zeros(out_size))
        self.last = last

    def forward(self, x: dict, edge_index: dict, nodes: dict, edges: dict, hops: int) -> dict:
        rows = {t: sum(counts[:hops]) for t, counts in nodes.items()}
        out = {t: x[t][:k] @ self.loop_weight + self.bias for t, k in rows.items() if k}
        for conv, key in zip(self.convs, self.edge_types):
            src, _, dst = key
            if rows[dst] and src in x and key in edge_index:
                kept = edge_index[key][:, : sum(edges[key][:hops])]
                adj = adjacency(kept, rows[dst], x[src].shape[0])
                out[dst] = out[dst] + conv((x[src], x[dst][: rows[dst]]), adj)
        return out if self.last else {t: F.relu(h) for t, h in out.items()}


class RGCN(torch.nn.Module):
    def __init__(self, data: HeteroData, width: int, hidden: int, classes: int, layers: int):
        super().__init__()
        self.embed = torch.nn.ParameterDict(
            {
                t: torch.nn.Parameter(torch.nn.init.xavier_uniform_(torch.empty(data[t].num_nodes, width)))
                for t in data.node_types
                if "x" not in data[t]
            }
        )
        sizes = [width] + [hidden] * (layers - 1) + [classes]
        self.layers = torch.nn.ModuleList(
            RelGraphConvLayer(a, b, data.edge_types, i == layers - 1) for i, (a, b) in enumerate(zip(sizes, sizes[1:]))
        )

    def forward(self, batch) -> dict:
        h = {t: batch[t].x if t not in self.embed else self.embed[t][batch[t].n_id] for t in batch.node_types}
        nodes, edges = batch.num_sampled_nodes_dict, batch.num_sampled_edges_dict
        for i, layer in enumerate(self.layers):
            h = layer(h, batch.edge_index_dict, nodes, edges, len(self.layers) - i)
        return h


def load(path: str) -> HeteroData:
    """The graph file as a ``HeteroData`` (each relation's edges in CSR order)."""
    arrays = HeteroArrays.load(path)
    data = HeteroData()
    for t, count in arrays.num_nodes.items():
        data[t].num_nodes = count
    for t, x in arrays.features.items():
        data[t].x = torch.from_numpy(x)
    data[arrays.target].y = torch.from_numpy(arrays.labels)
    data[arrays.target].train_mask = torch.from_numpy(arrays.train_mask)
    for key, (indptr, indices) in arrays.relations.items():
        dst = torch.repeat_interleave(torch.arange(indptr.shape[0] - 1), torch.from_numpy(indptr).diff())
        data[key].edge_index = torch.stack([torch.from_numpy(indices), dst])
    data.target = arrays.target
    return data


def main() -> None:
    opts = side_options("graph", fanout="25,20", hidden=64)
    cg.init()
    torch.manual_seed(opts.seed)
    started = time.perf_counter()
    data = load(opts.graph)
    target = data.target
    fanout = [int(f) for f in reversed(opts.fanout.split(","))]
    loader = cg.NeighborLoader(
        data,
        num_neighbors={key: fanout for key in data.edge_types},
        batch_size=opts.batch_size,
        input_nodes=(target, data[target].train_mask),
        shuffle=True,
        seed=opts.seed,
    )
    loaded = time.perf_counter() - started
    width = next(data[t].x.shape[1] for t in data.node_types if "x" in data[t])
    model = RGCN(data, width, opts.hidden, int(data[target].y.max()) + 1, len(fanout))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()

    def step(batch) -> int:
        seeds = batch[target].batch_size
        loss = F.cross_entropy(model(batch)[target][:seeds], batch[target].y[:seeds])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return int(seeds)

    result = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "nodes": int(data.num_nodes),
        "edges": int(data.num_edges),
        "load_seconds": loaded,
    }
    result.update(timed_steps(lambda: loader, step, opts.warmup, opts.steps))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
