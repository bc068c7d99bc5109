"""Sampled link prediction through the PyG bridge, one process: commgraph's side of
``benchmarks/dgl_compare.py link`` (DGL's is ``benchmarks/dgl_link.py``).

``python benchmarks/cg_link.py SET`` opens the 1-part partition set SET (``cg.partition``), takes
its undirected edges once each (source < destination) as the label edges and trains on
``cg.LinkNeighborLoader`` batches: ``--batch-size`` label edges and as many uniform non-edges
(``neg_sampling_ratio=1.0``), ``num_neighbors`` the ``--fanout`` (given in DGL's order, the first
layer's first, and reversed here: PyG lists the seeds' hop first). The model is PyG's own
``SAGEConv`` (mean, ReLU between layers) as PyG's examples write it (``cg_node.SAGE`` without
dropout), wrapped by ``cg.sampled(model, loader, trim=True)``: each layer computes the rows the
next one reads only, as DGL's blocks do, its edges as PyG's sparse ``adj_t`` (one fused sparse
product), and the output holds the label edges' endpoints' rows, which ``edge_label_index``
indexes. A dot-product decoder, binary cross-entropy, Adam (lr 0.01). Prints one JSON object:
:func:`steps.timed_steps`'s figures (rate: label edges per second).

    python cg_link.py SET [--warmup 3] [--steps 20] [--fanout 15,10] [--hidden 256] [--batch-size 1024]
"""

import json
import time

import torch
import torch.nn.functional as F

import commgraph.pyg as cg
from cg_node import SAGE
from steps import side_options, timed_steps


def main() -> None:
    opts = side_options("set", fanout="15,10", hidden=256)
    cg.init()
    torch.manual_seed(opts.seed)
    started = time.perf_counter()
    data = cg.partition(opts.set)
    src, dst = data.edge_index  # one part: local ids are global ids
    label_edges = data.edge_index[:, src < dst]
    fanout = [int(f) for f in reversed(opts.fanout.split(","))]
    loader = cg.LinkNeighborLoader(
        data,
        num_neighbors=fanout,
        edge_label_index=label_edges,
        neg_sampling_ratio=1.0,
        batch_size=opts.batch_size,
        shuffle=True,
        seed=opts.seed,
    )
    loaded = time.perf_counter() - started
    model = cg.sampled(SAGE(data.x.shape[1], opts.hidden, opts.hidden, len(fanout), dropout=0.0), loader, trim=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()

    def step(batch) -> int:
        pairs = batch.edge_label_index
        h = model(batch.x, batch.edge_index)
        loss = F.binary_cross_entropy_with_logits((h[pairs[0]] * h[pairs[1]]).sum(-1), batch.edge_label)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return int((batch.input_id >= 0).sum())

    result = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "nodes": int(data.num_nodes),
        "edges": int(data.edge_index.shape[1]),
        "label_edges": int(label_edges.shape[1]),
        "load_seconds": loaded,
    }
    result.update(timed_steps(lambda: loader, step, opts.warmup, opts.steps))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
