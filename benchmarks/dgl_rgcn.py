r"""DGL's sampled R-GCN on a heterogeneous graph file (``benchmarks/hetero_file.py``), one process: run
inside the DGL environment by ``benchmarks/dgl_compare.py rgcn`` (it imports dgl and torch 2.2.1,
never commgraph).

As DGL's ``examples/pytorch/rgcn-hetero`` trains node classification in mini-batches
(``entity_classify_mb.py``): R-GCN (Schlichtkrull et al., `"Modeling Relational Data with Graph
Convolutional Networks" <https://arxiv.org/abs/1703.06103>`_, 2018) with its ``RelGraphConvLayer``,

.. math::
    h_i' = \sigma\Big(W_0 h_i + b + \sum_r \frac{1}{|N_r(i)|} \sum_{j \in N_r(i)} W_r h_j\Big),

a ``HeteroGraphConv`` of one ``GraphConv(norm="right")`` per relation summed, plus a self-loop weight
shared by the types and a bias (ReLU between layers, none after the last); learnable input
embeddings (``RelGraphEmbed``) for the node types without features; ``NeighborSampler(fanout)``
(every relation the same count) and ``DataLoader`` over the target type's training nodes, shuffled,
``--batch-size`` seeds a batch; cross-entropy on the seeds, Adam (lr 0.01). Prints one JSON object:
:func:`steps.timed_steps`'s figures (rate: seeds per second) and the load's seconds.

    python dgl_rgcn.py FILE.npz [--warmup 3] [--steps 20] [--fanout 25,20] [--hidden 64] [--batch-size 1024]
"""

import json
import os
import time

os.environ.setdefault("DGLBACKEND", "pytorch")

import dgl  # noqa: E402
import dgl.nn as dglnn  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from dgl.dataloading import DataLoader, NeighborSampler  # noqa: E402

from hetero_file import HeteroArrays  # noqa: E402
from steps import side_options, timed_steps  # noqa: E402


class RelGraphConvLayer(torch.nn.Module):
    """One R-GCN layer over a block, as DGL's rgcn-hetero example builds it (no basis)."""

    def __init__(self, in_size: int, out_size: int, relations: list[str], last: bool):
        super().__init__()
        self.conv = dglnn.HeteroGraphConv(
            {
                rel: dglnn.GraphConv(in_size, out_size, norm="right", bias=False, allow_zero_in_degree=True)
                for rel in relations
            },
            aggregate="sum",
        )
        self.loop_weight = torch.nn.Parameter(torch.empty(in_size, out_size))
        torch.nn.init.xavier_uniform_(self.loop_weight, gain=torch.nn.init.calculate_gain("relu"))
        self.bias = torch.nn.Parameter(torch.zeros(out_size))
        self.last = last

    def forward(self, block, inputs: dict) -> dict:
        dst = {t: x[: block.num_dst_nodes(t)] for t, x in inputs.items()}
        out = self.conv(block, inputs)
        out = {t: h + dst[t] @ self.loop_weight + self.bias for t, h in out.items()}
        return out if self.last else {t: F.relu(h) for t, h in out.items()}


class RGCN(torch.nn.Module):
    def __init__(self, graph, features: dict, hidden: int, classes: int, layers: int):
        super().__init__()
        width = next(iter(features.values())).shape[1]
        self.embed = torch.nn.ParameterDict(
            {
                t: torch.nn.Parameter(torch.nn.init.xavier_uniform_(torch.empty(graph.num_nodes(t), width)))
                for t in graph.ntypes
                if t not in features
            }
        )
        sizes = [width] + [hidden] * (layers - 1) + [classes]
        self.layers = torch.nn.ModuleList(
            RelGraphConvLayer(a, b, graph.etypes, i == layers - 1) for i, (a, b) in enumerate(zip(sizes, sizes[1:]))
        )

    def forward(self, blocks, features: dict, input_nodes: dict) -> dict:
        h = {t: features[t][ids] if t in features else self.embed[t][ids] for t, ids in input_nodes.items()}
        for layer, block in zip(self.layers, blocks):
            h = layer(block, h)
        return h


def load(path: str):
    """The file as a DGL heterograph (each relation's in-edge CSR as DGL's CSC), its features, the
    target type, labels and training ids."""
    arrays = HeteroArrays.load(path)
    empty = torch.tensor([], dtype=torch.int64)
    graph = dgl.heterograph(
        {
            key: ("csc", (torch.from_numpy(indptr), torch.from_numpy(indices), empty))
            for key, (indptr, indices) in arrays.relations.items()
        },
        num_nodes_dict=arrays.num_nodes,
    )
    features = {t: torch.from_numpy(x) for t, x in arrays.features.items()}
    train = torch.from_numpy(arrays.train_mask).nonzero().squeeze(1)
    return graph, features, arrays.target, torch.from_numpy(arrays.labels), train


def main() -> None:
    opts = side_options("graph", fanout="25,20", hidden=64)
    torch.manual_seed(opts.seed)
    dgl.seed(opts.seed)
    started = time.perf_counter()
    graph, features, target, labels, train = load(opts.graph)
    loaded = time.perf_counter() - started
    fanout = [int(f) for f in opts.fanout.split(",")]
    loader = DataLoader(
        graph, {target: train}, NeighborSampler(fanout), batch_size=opts.batch_size, shuffle=True, num_workers=0
    )
    model = RGCN(graph, features, opts.hidden, int(labels.max()) + 1, len(fanout))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()

    def step(batch) -> int:
        input_nodes, output_nodes, blocks = batch
        seeds = output_nodes[target]
        loss = F.cross_entropy(model(blocks, features, input_nodes)[target], labels[seeds])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return int(seeds.shape[0])

    result = {
        "dgl": dgl.__version__,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "nodes": graph.num_nodes(),
        "edges": graph.num_edges(),
        "load_seconds": loaded,
    }
    result.update(timed_steps(lambda: loader, step, opts.warmup, opts.steps))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
