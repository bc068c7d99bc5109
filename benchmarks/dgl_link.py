"""DGL's sampled link prediction on a commgraph ``.npz``, one process: run inside the DGL environment by
``benchmarks/dgl_compare.py link`` (it imports dgl and torch 2.2.1, never commgraph).

As DGL's ``examples/pytorch/graphsage/link_pred.py`` trains: the graph's undirected edges once each
(source < destination, ids ``0..E-1``), then all of them reversed (ids ``E..2E-1``), so that
``reverse_eids`` pairs edge ``e`` with ``e + E`` (its ``to_bidirected_with_reverse_mapping``);
``as_edge_prediction_sampler(NeighborSampler(fanout), exclude="reverse_id", reverse_eids=...,
negative_sampler=negative_sampler.Uniform(1))`` and ``DataLoader`` over the edge ids ``0..E-1``
(each undirected edge once), shuffled, ``--batch-size`` edges a batch, node features prefetched;
GraphSAGE (``SAGEConv`` mean, ReLU between layers), a dot-product decoder, binary cross-entropy on
the positive and negative pairs, Adam (lr 0.01). Prints one JSON object:
:func:`steps.timed_steps`'s figures (rate: label edges per second) and the load's seconds.

    python dgl_link.py FILE.npz [--warmup 3] [--steps 20] [--fanout 15,10] [--hidden 256] [--batch-size 1024]
"""

import json
import os
import time

os.environ.setdefault("DGLBACKEND", "pytorch")

import dgl  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from dgl.dataloading import DataLoader, NeighborSampler, as_edge_prediction_sampler, negative_sampler  # noqa: E402

from dgl_train import SAGE  # noqa: E402
from steps import side_options, timed_steps  # noqa: E402


def load(path: str):
    """The graph's undirected edges both ways (reverse of ``e`` is ``e + E``), its features, and
    the ids of the edges one way (the label edges)."""
    with np.load(path, allow_pickle=False) as data:
        indptr, indices = data["indptr"].astype(np.int64), data["indices"].astype(np.int64)
        features = torch.from_numpy(data["features"])
    dst = np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))
    one_way = indices < dst
    src, dst = torch.from_numpy(indices[one_way]), torch.from_numpy(dst[one_way])
    del indices, one_way
    half = src.shape[0]
    graph = dgl.graph((torch.cat([src, dst]), torch.cat([dst, src])), num_nodes=indptr.shape[0] - 1)
    graph.ndata["feat"] = features
    reverse_eids = torch.cat([torch.arange(half, 2 * half), torch.arange(half)])
    return graph, reverse_eids, torch.arange(half)


def main() -> None:
    opts = side_options("graph", fanout="15,10", hidden=256)
    torch.manual_seed(opts.seed)
    dgl.seed(opts.seed)
    started = time.perf_counter()
    graph, reverse_eids, seed_edges = load(opts.graph)
    loaded = time.perf_counter() - started
    fanout = [int(f) for f in opts.fanout.split(",")]
    sampler = as_edge_prediction_sampler(
        NeighborSampler(fanout, prefetch_node_feats=["feat"]),
        exclude="reverse_id",
        reverse_eids=reverse_eids,
        negative_sampler=negative_sampler.Uniform(1),
    )
    loader = DataLoader(
        graph, seed_edges, sampler, batch_size=opts.batch_size, shuffle=True, drop_last=False, num_workers=0
    )
    model = SAGE(graph.ndata["feat"].shape[1], opts.hidden, opts.hidden, len(fanout))
    model.dropout.p = 0.0  # DGL's link_pred.py has no dropout
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()

    def step(batch) -> int:
        _input_nodes, pair_graph, neg_pair_graph, blocks = batch
        h = model(blocks, blocks[0].srcdata["feat"])
        pos_src, pos_dst = pair_graph.edges()
        neg_src, neg_dst = neg_pair_graph.edges()
        scores = torch.cat([(h[pos_src] * h[pos_dst]).sum(-1), (h[neg_src] * h[neg_dst]).sum(-1)])
        labels = torch.cat([torch.ones(pos_src.shape[0]), torch.zeros(neg_src.shape[0])])
        loss = F.binary_cross_entropy_with_logits(scores, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return int(pos_src.shape[0])

    result = {
        "dgl": dgl.__version__,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "nodes": graph.num_nodes(),
        "edges": graph.num_edges(),
        "label_edges": int(seed_edges.shape[0]),
        "load_seconds": loaded,
    }
    result.update(timed_steps(lambda: loader, step, opts.warmup, opts.steps))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
