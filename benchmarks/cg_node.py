"""Sampled node classification through the PyG bridge, one process: commgraph's side of
``benchmarks/dgl_compare.py node`` (DGL's is ``benchmarks/dgl_train.py ... train``).

``python benchmarks/cg_node.py SET`` opens the 1-part partition set SET (``cg.partition``) and
trains as a PyG user's sampled script does: ``cg.NeighborLoader`` over the training nodes,
shuffled, ``--batch-size`` seeds a batch, ``num_neighbors`` the ``--fanout`` (given in DGL's order,
the first layer's first, and reversed here: PyG lists the seeds' hop first); PyG's own ``SAGEConv``
(mean), one layer per fanout entry, hidden ``--hidden``, ReLU and dropout 0.5 between layers,
wrapped by ``cg.sampled(model, loader, trim=True)`` so that each layer computes the rows the next
one reads, as DGL's blocks do (``model(batch.x, batch.edge_index)`` is then the seeds' rows); with
``--whole-batch``, run on the whole batch as PyG's examples write it
(``model(batch.x, batch.edge_index)[:batch.batch_size]``); cross-entropy on the seeds; Adam (lr
0.01, weight decay 5e-4, as DGL's side). Prints one JSON object:
:func:`steps.timed_steps`'s figures with ``seeds``, ``seeds_per_second`` and ``phase_ms`` (the
loader's wait as ``sample``, then forward with the loss, backward, and the optimiser's step; the
clocked steps' mean milliseconds), the keys ``dgl_train.py`` prints.

    python cg_node.py SET [--warmup 3] [--steps 20] [--fanout 15,10,5] [--hidden 256] [--batch-size 1024]
        [--whole-batch]
"""

import json
import time

import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv

import commgraph.pyg as cg
from steps import optimised, phase_ms, side_options, timed_steps


class SAGE(torch.nn.Module):
    """GraphSAGE as PyG's examples write it: ``SAGEConv`` layers, ReLU and dropout (``dropout``,
    none at 0) between them."""

    def __init__(self, in_size: int, hidden: int, out_size: int, layers: int, dropout: float = 0.5):
        super().__init__()
        sizes = [in_size] + [hidden] * (layers - 1) + [out_size]
        self.convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(sizes, sizes[1:]))
        self.dropout = dropout

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i != len(self.convs) - 1:
                x = x.relu()
                if self.dropout:
                    x = F.dropout(x, p=self.dropout, training=self.training)
        return x


def main() -> None:
    opts = side_options("set", fanout="15,10,5", hidden=256, switches={"--whole-batch": "every layer on every row"})
    cg.init()
    torch.manual_seed(opts.seed)
    started = time.perf_counter()
    data = cg.partition(opts.set)
    fanout = [int(f) for f in reversed(opts.fanout.split(","))]
    loader = cg.NeighborLoader(
        data,
        num_neighbors=fanout,
        batch_size=opts.batch_size,
        input_nodes=data.train_mask,
        shuffle=True,
        seed=opts.seed,
    )
    loaded = time.perf_counter() - started
    model = SAGE(data.x.shape[1], opts.hidden, int(data.y.max()) + 1, len(fanout))
    if not opts.whole_batch:
        model = cg.sampled(model, loader, trim=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    model.train()

    phases = []  # each step's forward, backward and optimiser seconds

    def loss(batch):
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        return F.cross_entropy(out, batch.y[: batch.batch_size])

    def step(batch) -> int:
        optimised(lambda: loss(batch), optimizer, phases)
        return batch.batch_size

    result = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "nodes": int(data.num_nodes),
        "edges": int(data.edge_index.shape[1]),
        "train_nodes": int(data.train_mask.sum()),
        "load_seconds": loaded,
        "whole_batch": opts.whole_batch,
    }
    result.update(timed_steps(lambda: loader, step, opts.warmup, opts.steps))
    phases_ms = {"sample": result["sample_ms"], **phase_ms(phases, opts.warmup)}
    result |= {"seeds": result["units"], "seeds_per_second": result["rate"], "phase_ms": phases_ms}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
