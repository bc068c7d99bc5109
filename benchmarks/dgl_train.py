"""DGL's GraphSAGE on a commgraph ``.npz``, in one process or ``--trainers N``: run inside the DGL
environment by ``benchmarks/dgl_baseline.py`` (it imports dgl and torch 2.2.1, never the commgraph
package; ``--trainers`` loads its standard-library-only ``lifetime.py`` by path).

``train``: ``--warmup`` unclocked steps, then ``--steps`` clocked ones (:func:`steps.timed_steps`)
of DGL's own node-classification recipe (``examples/pytorch/graphsage``): ``NeighborSampler(fanout)``
and ``DataLoader`` over the training nodes, shuffled, ``--batch-size`` seeds a batch, ``SAGEConv``
mean layers with ReLU and dropout 0.5, Adam (lr 0.01, weight decay 5e-4, commgraph's defaults).
``infer``: the untrained model's layer-wise inference over every node (one layer at a time,
``MultiLayerFullNeighborSampler(1)`` blocks of ``--infer-batch-size`` nodes, 4096 as DGL's example
evaluates). ``--idtype int32`` builds the graph with int32 ids (``idtype=torch.int32``, as DGL's users do to
save memory) and the training ids with it. On CPU, DGL 2.1 crashes on it (a segmentation fault in
``_gspmm``, the first layer's aggregation, with or without ``dgl.use_libxsmm(False)``), so the
benchmarks run DGL with int64 ids. Prints one JSON object: seconds to load and :func:`steps.timed_steps`'s figures with
``seeds``, ``seeds_per_second`` and ``phase_ms``, the clocked steps' mean milliseconds by phase
(the loader's wait as ``sample``: DGL's loader gathers the batch's features as it samples; then
forward with the loss, backward, and the optimiser's step) for training, or the pass's seconds and
each layer's (inference).

``train --trainers N`` (N > 1) trains as DGL's multi-device GraphSAGE example
(``examples/multigpu/node_classification_sage.py``) runs it, on the CPU: the graph is loaded and its
sparse formats made (``create_formats_``) before ``torch.multiprocessing.spawn`` starts N trainers,
which receive it in shared memory; ``OMP_NUM_THREADS`` is set before the spawn, as the example sets
it, to this process's ``OMP_NUM_THREADS`` (else the cores) over N, at least 1, and
``MKL_NUM_THREADS`` and ``NUMBA_NUM_THREADS`` with it (torch takes MKL's count over OpenMP's), so
the N trainers' torch and DGL threads together are the one-process run's. Each trainer joins a Gloo
process group, wraps the model in ``DistributedDataParallel`` (the gradients' all-reduce runs in its
backward) and draws ``--batch-size`` seeds a step from its own share of the training nodes
(``DataLoader(..., use_ddp=True)``). Every trainer runs ``--warmup`` steps and then ``--steps``
clocked ones; rank 0 prints the JSON object, ``seeds`` and ``seeds_per_second`` summed over the
trainers (all trainers' seeds over rank 0's clocked seconds), ``step_ms`` and ``phase_ms`` rank 0's.
A trainer dies with this process, and a trainer's error stops the others and this process with it.

    python dgl_train.py FILE.npz train|infer [--warmup 0] [--steps 20] [--fanout 15,10,5] [--hidden 256]
                                          [--batch-size 1024] [--infer-batch-size 4096] [--idtype int64]
                                          [--trainers 1]
"""

import argparse
import importlib.util
import json
import os
import socket
import sys
import time
from pathlib import Path

os.environ.setdefault("DGLBACKEND", "pytorch")

import dgl  # noqa: E402
import dgl.nn as dglnn  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from dgl.dataloading import DataLoader, MultiLayerFullNeighborSampler, NeighborSampler  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from protocol import threads_env  # noqa: E402
from steps import optimised, phase_ms, timed_steps  # noqa: E402


class SAGE(torch.nn.Module):
    """GraphSAGE with mean aggregation, as DGL's example builds it."""

    def __init__(self, in_size: int, hidden: int, out_size: int, layers: int):
        super().__init__()
        sizes = [in_size] + [hidden] * (layers - 1) + [out_size]
        self.layers = torch.nn.ModuleList(dglnn.SAGEConv(a, b, "mean") for a, b in zip(sizes, sizes[1:]))
        self.dropout = torch.nn.Dropout(0.5)

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h

    @torch.no_grad()
    def inference(self, graph, batch_size: int) -> list[float]:
        """Every node's output, one layer at a time over all in-neighbours; each layer's seconds."""
        loader = DataLoader(
            graph,
            torch.arange(graph.num_nodes()),
            MultiLayerFullNeighborSampler(1),
            batch_size=batch_size,
            shuffle=False,
            drop_last=False,
            num_workers=0,
        )
        feat, seconds = graph.ndata["feat"], []
        for i, layer in enumerate(self.layers):
            started = time.perf_counter()
            out = torch.empty(graph.num_nodes(), layer._out_feats)
            for input_nodes, output_nodes, blocks in loader:
                h = layer(blocks[0], feat[input_nodes])
                out[output_nodes] = F.relu(h) if i != len(self.layers) - 1 else h
            feat = out
            seconds.append(time.perf_counter() - started)
            print(f"layer {i + 1}: {seconds[-1]:.1f} s", file=sys.stderr, flush=True)
        return seconds


def load(path: str, idtype: str = "int64"):
    """The commgraph graph file as a DGLGraph of ``idtype`` ids: its in-edge CSR (row v: the sources
    of v's in-edges) is DGL's CSC; features, labels and the training mask as node data."""
    with np.load(path, allow_pickle=False) as data:
        ids = torch.int32 if idtype == "int32" else torch.int64
        indptr, indices = (torch.from_numpy(data[name]).to(ids) for name in ("indptr", "indices"))
        graph = dgl.graph(
            ("csc", (indptr, indices, torch.tensor([], dtype=ids))), num_nodes=indptr.shape[0] - 1, idtype=ids
        )
        graph.ndata["feat"] = torch.from_numpy(data["features"])
        graph.ndata["label"] = torch.from_numpy(data["labels"].astype(np.int64))
        train = torch.from_numpy(np.flatnonzero(data["train_mask"]))
    return graph, train.to(ids)


def train(graph, train_ids, model, opts) -> dict:
    """``opts.warmup`` and then ``opts.steps`` clocked steps of this process; inside a process group
    its loader draws from this trainer's share of ``train_ids`` (``use_ddp``)."""
    sampler = NeighborSampler(
        [int(f) for f in opts.fanout.split(",")], prefetch_node_feats=["feat"], prefetch_labels=["label"]
    )
    loader = DataLoader(
        graph,
        train_ids,
        sampler,
        batch_size=opts.batch_size,
        shuffle=True,
        drop_last=False,
        num_workers=0,
        use_ddp=dist.is_initialized(),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    model.train()

    phases = []  # each step's forward, backward and optimiser seconds

    def step(batch) -> int:
        _input_nodes, output_nodes, blocks = batch
        labels = blocks[-1].dstdata["label"]
        optimised(lambda: F.cross_entropy(model(blocks, blocks[0].srcdata["feat"]), labels), optimizer, phases)
        return int(output_nodes.shape[0])

    result = timed_steps(lambda: loader, step, opts.warmup, opts.steps)
    phases_ms = {"sample": result["sample_ms"], "fetch": 0.0, "gather": 0.0}  # the loader gathers as it samples
    phases_ms |= phase_ms(phases, opts.warmup)
    return {**result, "seeds": result["units"], "seeds_per_second": result["rate"], "phase_ms": phases_ms}


def die_with_parent(parent: int) -> None:
    """Have Linux kill this trainer when ``parent`` exits: commgraph's own
    :func:`commgraph.lifetime.die_with_parent`, loaded from this checkout's file (it needs only the
    standard library; this environment has no commgraph)."""
    path = Path(__file__).resolve().parents[1] / "src" / "commgraph" / "lifetime.py"
    spec = importlib.util.spec_from_file_location("commgraph_lifetime", path)
    lifetime = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lifetime)
    lifetime.die_with_parent(parent)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the trainers' rendezvous)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def trainer(rank: int, trainers: int, port: int, parent: int, graph, train_ids, result: dict, opts) -> None:
    """One of ``trainers`` DDP trainers (``torch.multiprocessing.spawn``'s entry): the model wrapped
    in ``DistributedDataParallel`` over Gloo, :func:`train`, then the seeds summed over the trainers;
    rank 0 prints the JSON object."""
    die_with_parent(parent)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=trainers, rank=rank)
    torch.manual_seed(opts.seed)
    dgl.seed(opts.seed)
    model = DistributedDataParallel(build_model(graph, opts))
    timed = train(graph, train_ids, model, opts)
    seeds = torch.tensor([timed["seeds"]], dtype=torch.float64)
    dist.all_reduce(seeds)  # after the clock: every trainer's seeds over rank 0's clocked seconds
    if rank == 0:
        total = int(seeds.item())
        rate = total / timed["seconds"]
        result |= {"threads": torch.get_num_threads(), **timed, "rank0_seeds": timed["seeds"]}
        result |= {"units": total, "seeds": total, "rate": rate, "seeds_per_second": rate}
        print(json.dumps(result), flush=True)
    dist.destroy_process_group()


def build_model(graph, opts) -> SAGE:
    """GraphSAGE for ``graph``'s features and classes, one layer per fanout entry."""
    layers = len(opts.fanout.split(","))
    return SAGE(graph.ndata["feat"].shape[1], opts.hidden, int(graph.ndata["label"].max()) + 1, layers)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("graph")
    parser.add_argument("mode", choices=("train", "infer"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=0, help="steps run before the clock starts")
    parser.add_argument("--fanout", default="15,10,5")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--infer-batch-size", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--idtype", choices=("int64", "int32"), default="int64")
    parser.add_argument("--trainers", type=int, default=1, help="train: DDP trainer processes (1: this one)")
    opts = parser.parse_args()
    if opts.trainers > 1 and opts.mode != "train":
        parser.error("--trainers applies to train only")
    torch.manual_seed(opts.seed)
    dgl.seed(opts.seed)
    started = time.perf_counter()
    graph, train_ids = load(opts.graph, opts.idtype)
    loaded = time.perf_counter() - started
    result = {
        "dgl": dgl.__version__,
        "torch": torch.__version__,
        "trainers": opts.trainers,
        "threads": torch.get_num_threads(),
        "nodes": graph.num_nodes(),
        "edges": graph.num_edges(),
        "idtype": str(graph.idtype),
        "load_seconds": loaded,
    }
    if opts.trainers > 1:
        graph.create_formats_()  # once, here: the trainers share them instead of each making its own
        threads = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count())
        os.environ.update(threads_env(max(1, threads // opts.trainers), {}))  # torch reads MKL's too
        args = (opts.trainers, free_port(), os.getpid(), graph, train_ids, result, opts)
        mp.spawn(trainer, args=args, nprocs=opts.trainers)  # joins them; a trainer's error is raised here
        return
    model = build_model(graph, opts)
    if opts.mode == "train":
        result.update(train(graph, train_ids, model, opts))
    else:
        model.eval()
        started = time.perf_counter()
        result["layer_seconds"] = model.inference(graph, opts.infer_batch_size)
        result["seconds"] = time.perf_counter() - started
    print(json.dumps(result))


if __name__ == "__main__":
    main()
