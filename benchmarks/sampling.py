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

With ``--bytes-graphs`` it then measures, per sampler, the feature bytes one epoch of sampling
would fetch from other workers (each worker of a METIS partition into ``--workers`` parts drawing
batches from its own training nodes; a remote input row costs its fetched columns x 4 bytes) and
LADIES's probability-synchronisation bytes. DGS samples with masks that its explainer (thesis
defaults) learnt on each worker from a GraphSAGE trained for one epoch with ``neighbor``; the
target is at least 24% fewer bytes than ``neighbor``. On a shared machine, measure one graph and
worker count per invocation (a SBM of 20,000 nodes with 8 workers and 3 seeds takes minutes). Training accuracy and epoch time need the
distributed trainer and are not measured here.

    python benchmarks/sampling.py [--graph sbm:nodes=200000,classes=8,features=128,seed=0]
                                  [--batch-size 1024] [--fanout 64,64] [--batches 20] [--repeats 5]
                                  [--bytes-graphs cora sbm:nodes=20000,classes=8,features=512,seed=0]
                                  [--workers 4,8] [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from commgraph.graph import load_graph
from commgraph.nn import GNN
from commgraph.partition import load_partition_set, partition_graph, partition_metrics, write_partition_set
from commgraph.sample import (DGSMasks, DGSSampler, FastGCNSampler, LADIESSampler, NeighborSampler,
                              SamplingGraph, forward_blocks, parse_fanouts)
from commgraph.sample.explain import DGSExplainer, ExplanationGraph


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


def trained_model(graph, fanouts: list[int], batch_size: int, hidden: int, seed: int) -> GNN:
    """GraphSAGE after one epoch of single-process training on neighbor batches (DGS explains a
    model in training, not a random one)."""
    sampling = SamplingGraph.from_graph(graph)
    sampler = NeighborSampler(sampling, fanouts)
    torch.manual_seed(seed)
    model = GNN("sage", graph.num_features, hidden, graph.num_classes, layers=len(fanouts), dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    rng, train = np.random.default_rng(seed), np.flatnonzero(graph.train_mask)
    for seeds in np.array_split(rng.permutation(train), max(1, train.shape[0] // batch_size)):
        batch = sampler.sample(seeds, rng)
        optimizer.zero_grad()
        logits = forward_blocks(model, batch.input_features(graph.features), batch.blocks(sampling))
        torch.nn.functional.cross_entropy(logits, torch.from_numpy(graph.labels[batch.seeds])).backward()
        optimizer.step()
    return model.eval()


def epoch_bytes(spec: str, workers: int, fanouts: list[int], batch_size: int, layer_size: int, hidden: int,
                seed: int, folder: Path) -> dict[str, dict[str, int]]:
    """Feature and synchronisation bytes of one sampled epoch over every worker, per sampler."""
    graph = load_graph(spec)
    assignment, _ = partition_graph(graph, workers, "metis", seed=seed)
    out = folder / f"{graph.name}-{workers}-{seed}"
    if not out.exists():
        write_partition_set(graph, assignment, workers, out, method="metis", seed=seed, seconds=0.0,
                            metrics=partition_metrics(graph, assignment, workers))
    pset = load_partition_set(out)
    model = trained_model(graph, fanouts, batch_size, hidden, seed)
    totals: dict[str, dict[str, int]] = {}
    for k in range(workers):
        sampling = SamplingGraph.from_partition(pset, k)
        explanation = ExplanationGraph.build(sampling, lambda ids: graph.features[ids], len(fanouts))
        dgs = DGSSampler(sampling, fanouts)
        dgs.set_masks(DGSExplainer(sampling, explanation, model).explain(model.state_dict()).masks)
        sizes = [layer_size] * len(fanouts)
        samplers = {"neighbor": NeighborSampler(sampling, fanouts), "dgs": dgs,
                    "fastgcn": FastGCNSampler(sampling, sizes), "ladies": LADIESSampler(sampling, sizes)}
        train = np.flatnonzero(graph.train_mask & (assignment == k))
        for name, sampler in samplers.items():
            rng = np.random.default_rng(seed)
            row = totals.setdefault(name, {"feature_bytes": 0, "sync_bytes": 0})
            for seeds in np.array_split(rng.permutation(train), max(1, -(-train.shape[0] // batch_size))):
                if seeds.size:
                    batch = sampler.sample(seeds, rng)
                    row["feature_bytes"] += 4 * batch.fetched_values(graph.num_features)
                    row["sync_bytes"] += batch.sync_bytes
    return totals


def bytes_table(args, fanouts: list[int]) -> dict:
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.bytes_graphs:
            for workers in (int(w) for w in args.workers.split(",")):
                runs = [epoch_bytes(spec, workers, fanouts, args.batch_size, args.layer_size, args.hidden, seed,
                                    Path(tmp)) for seed in range(args.seeds)]
                results[f"{spec} x{workers}"] = runs
                print(f"{spec}, {workers} workers, batch {args.batch_size}, fanout {args.fanout}, "
                      f"{args.seeds} seeds (mean, min-max), MB per epoch:")
                base = np.mean([run["neighbor"]["feature_bytes"] for run in runs])
                for name in runs[0]:
                    features = [run[name]["feature_bytes"] / 1e6 for run in runs]
                    sync = [run[name]["sync_bytes"] / 1e6 for run in runs]
                    print(f"  {name:9s} features {np.mean(features):9.3f} ({min(features):.3f}-{max(features):.3f})"
                          f"  sync {np.mean(sync):8.3f}  vs neighbor's features "
                          f"{1 - np.mean(features) * 1e6 / base:+.1%} fewer")
    return results


def speed_table(args, fanouts: list[int]) -> dict:
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
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graph", default="sbm:nodes=200000,classes=8,features=128,seed=0")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--fanout", default="64,64")
    parser.add_argument("--layer-size", type=int, default=1024, help="nodes per layer for fastgcn and ladies")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the training step")
    parser.add_argument("--bytes-graphs", nargs="*", default=[], help="graphs to measure bytes per epoch on")
    parser.add_argument("--workers", default="4,8", help="worker counts for the bytes per epoch")
    parser.add_argument("--seeds", type=int, default=3, help="seeds for the bytes per epoch")
    parser.add_argument("--skip-speed", action="store_true", help="only the bytes per epoch")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    fanouts = parse_fanouts(args.fanout)
    figures = {"args": vars(args)}
    if not args.skip_speed:
        figures["speed"] = speed_table(args, fanouts)
    if args.bytes_graphs:
        figures["bytes"] = bytes_table(args, fanouts)
    if args.json:
        from commgraph.atomic import atomic_write

        with atomic_write(args.json) as handle:
            handle.write(json.dumps(figures, indent=1).encode())


if __name__ == "__main__":
    main()
