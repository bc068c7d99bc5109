"""Sampling speed (issue: sampling-based distributed training), sampling alone, one process.

Measured side by side in one run on one graph, ``--batches`` batches of ``--batch-size`` seeds drawn
from the training nodes, repeated ``--repeats`` times; the table gives the median over the repeats
and their spread (min-max):
  - ``neighbor`` (commgraph.sample, numba kernel) in sampled edges per second on one core, against
    a plain-numpy vectorised uniform sampler measured in the same run (random key per edge, one
    lexsort, first ``fanout`` of each row; the baseline);
  - ``dgs`` with masks set (every remote node eligible, so its kernel runs), ``fastgcn`` and
    ``ladies`` (``--layer-size`` nodes per layer), per batch;
  - one GraphSAGE training step (forward, backward, Adam; ``--hidden``, ``--threads`` torch
    threads) on the neighbor batches, and the share of a step spent sampling
    (target: at most 20% at batch 1024, fanout 64,64 on sbm:nodes=200000,...,features=128).

    python benchmarks/sampling.py [--graph sbm:nodes=200000,classes=8,features=128,seed=0]
                                  [--batch-size 1024] [--fanout 64,64] [--batches 20] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from commgraph.graph import load_graph
from commgraph.nn import GNN
from commgraph.sample import (DGSMasks, DGSSampler, FastGCNSampler, LADIESSampler, NeighborSampler,
                              SamplingGraph, forward_blocks, parse_fanouts)


def numpy_neighbor(graph: SamplingGraph, seeds: np.ndarray, fanouts: list[int], rng: np.random.Generator) -> int:
    """The baseline: uniform node-wise sampling with numpy only; returns the sampled edges."""
    edges, dst = 0, seeds
    for fanout in fanouts:
        counts = graph.indptr[dst + 1] - graph.indptr[dst]
        rows = np.repeat(np.arange(dst.shape[0]), counts)
        firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        sources = graph.indices[np.repeat(graph.indptr[dst] - firsts, counts) + np.arange(rows.shape[0])]
        order = np.lexsort((rng.random(rows.shape[0]), rows))
        rank = np.arange(rows.shape[0]) - np.repeat(firsts, counts)
        chosen = sources[order][rank < fanout] if fanout >= 0 else sources
        edges += chosen.shape[0]
        new = np.setdiff1d(chosen, dst)
        dst = np.concatenate([dst, new])
    return edges


def batches_of(train: np.ndarray, size: int, count: int, seed: int) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(train)
    return [order[i * size : (i + 1) * size] for i in range(count) if (i + 1) * size <= order.shape[0]]


def time_sampler(sampler, batches, seed: int) -> tuple[float, int]:
    rng = np.random.default_rng(seed)
    start, edges = time.perf_counter(), 0
    for seeds in batches:
        edges += sampler.sample(seeds, rng).num_sampled_edges
    return time.perf_counter() - start, edges


def time_steps(graph, sampling: SamplingGraph, sampler, batches, hidden: int, seed: int) -> float:
    torch.manual_seed(seed)
    model = GNN("sage", graph.num_features, hidden, graph.num_classes, layers=len(sampler.fanouts), dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    rng, total = np.random.default_rng(seed), 0.0
    for seeds in batches:
        batch = sampler.sample(seeds, rng)
        x, blocks = batch.input_features(graph.features), batch.blocks(sampling)
        y = torch.from_numpy(graph.labels[batch.seeds])
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(forward_blocks(model, x, blocks), y)
        loss.backward()
        optimizer.step()
        total += time.perf_counter() - start
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graph", default="sbm:nodes=200000,classes=8,features=128,seed=0")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--fanout", default="64,64")
    parser.add_argument("--layer-size", type=int, default=4096, help="nodes per layer for fastgcn and ladies")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the training step")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    fanouts = parse_fanouts(args.fanout)
    graph = load_graph(args.graph)
    sampling = SamplingGraph.from_graph(graph)
    train = np.flatnonzero(graph.train_mask)
    neighbor = NeighborSampler(sampling, fanouts)
    dgs = DGSSampler(sampling, fanouts)
    dgs.set_masks(DGSMasks(np.ones(graph.num_nodes), np.ones(graph.num_features)))
    sizes = [args.layer_size] * len(fanouts)
    samplers = {"neighbor": neighbor, "dgs": dgs, "fastgcn": FastGCNSampler(sampling, sizes),
                "ladies": LADIESSampler(sampling, sizes)}
    warm = batches_of(train, args.batch_size, 1, 99)
    for sampler in samplers.values():  # compile the kernels
        time_sampler(sampler, warm, 0)
    rows: dict[str, list[float]] = {name: [] for name in [*samplers, "numpy", "edges/s", "numpy edges/s", "step", "share"]}
    for repeat in range(args.repeats):
        batches = batches_of(train, args.batch_size, args.batches, repeat)
        start = time.perf_counter()
        base_edges = sum(numpy_neighbor(sampling, seeds, fanouts, np.random.default_rng(repeat)) for seeds in batches)
        base = time.perf_counter() - start
        rows["numpy"].append(base / len(batches))
        rows["numpy edges/s"].append(base_edges / base)
        for name, sampler in samplers.items():
            seconds, edges = time_sampler(sampler, batches, repeat)
            rows[name].append(seconds / len(batches))
            if name == "neighbor":
                rows["edges/s"].append(edges / seconds)
        step = time_steps(graph, sampling, neighbor, batches, args.hidden, repeat) / len(batches)
        rows["step"].append(step)
        rows["share"].append(rows["neighbor"][-1] / (rows["neighbor"][-1] + step))

    def fmt(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
        med = np.median(values) * scale
        return f"{med:.{digits}f} ({min(values) * scale:.{digits}f}-{max(values) * scale:.{digits}f})"

    print(f"{graph.name}: {graph.num_nodes} nodes, {graph.num_edges} edges; batch {args.batch_size}, "
          f"fanout {args.fanout}, {args.batches} batches x {args.repeats} repeats, torch threads {args.threads}")
    print(f"neighbor sampling: {fmt(rows['edges/s'], 1e-6)} M sampled edges/s on one core; "
          f"numpy baseline {fmt(rows['numpy edges/s'], 1e-6)} M/s; "
          f"speed-up {np.median(rows['edges/s']) / np.median(rows['numpy edges/s']):.2f}x")
    for name in [*samplers, "numpy"]:
        print(f"  {name:9s} {fmt(rows[name], 1e3)} ms per batch")
    print(f"GraphSAGE step (hidden {args.hidden}) on a neighbor batch: {fmt(rows['step'], 1e3)} ms; "
          f"sampling's share of sample + step: {fmt(rows['share'], 100, 1)} % (target <= 20%)")
    if args.json:
        from commgraph.atomic import atomic_write

        with atomic_write(args.json) as handle:
            handle.write(json.dumps({"args": vars(args), "rows": rows}, indent=1).encode())


if __name__ == "__main__":
    main()
