"""Sampling speed, and sampled distributed training against full-graph training.

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

With ``--train-graphs`` it then trains on each graph with ``--workers`` workers (a
``--partition`` partition, METIS by default; its edge cut is printed), ``--seeds`` seeds, once per
trainer, each a real ``commgraph train`` job: by default ``neighbor`` (the baseline) and DGS's
Table 3.3 rows, node sampling only (``dgs-node``, N_f = 1), feature sampling only
(``dgs-feature``, epsilon = 0) and both (``dgs``), all three with the masks the project's
explainer made for that seed (``--mask-epochs`` epochs of training, then ``--dgs-masks-out``) in
use from the first step and no explainer beside them. Per trainer it prints the bytes per epoch
the thesis counts (features, requests, gradients, their total), the epoch time, the last epoch's
test accuracy (the exact full-graph forward pass) and the share of steps sampled with masks; then
one explanation's time on one thread and the CPU an online explainer would need to keep up with
T_ex steps. Targets: DGS moves at least 24% fewer total bytes than ``neighbor``, its test
accuracy is within 0.5 points of ``neighbor``'s with masks on at least 90% of steps, and its
epochs are no slower. Measure one graph and worker count per invocation on a shared machine.
Partition sets are made once into the partition cache (``$COMMGRAPH_HOME``) and reused;
``--steps-per-epoch N`` caps the training runs' epochs; ``--masks-dir DIR`` makes DGS's masks in
this process instead, part after part (the explainer on each seed's initial model), and keeps them.

With ``--count-steps N`` it trains nothing: it counts the bytes of the first N steps of each
trainer's epoch 1, drawn exactly as ``commgraph train`` draws them (:func:`count_fetch`; a test
checks it against a real run to the byte), for the graphs whose 8 training workers do not fit in
memory here (the thesis's 500k-node regime). ``--mask-parts K,K`` only explains those parts into
``--masks-dir`` (one lock hold each), for a later count.
``--explain-graph`` times one explanation of part 0 alone (target: <= 10 s on one core for a
100k-node, degree-100 graph).

    python benchmarks/sampling.py [--graph sbm:nodes=200000,classes=8,features=128,seed=0]
                                  [--batch-size 1024] [--fanout 64,64] [--batches 20] [--repeats 5]
                                  [--train-graphs cora sbm:nodes=20000,classes=8,features=512,seed=0]
                                  [--workers 4,8] [--seeds 3] [--epochs 40] [--partition metis]
                                  [--trainers neighbor,dgs-node,dgs-feature,dgs] [--skip-speed]
                                  [--explain-graph sbm:nodes=100000,classes=8,features=128,degree=100,seed=0]
                                  [--steps-per-epoch N] [--first-seed S] [--count-steps N] [--masks-dir DIR]
                                  [--masks-seed S] [--mask-parts K,K]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from commgraph.atomic import atomic_write
from commgraph.errors import CommgraphError
from commgraph.graph import load_graph
from commgraph.launch import cached_partition_set
from commgraph.nn import GNN
from commgraph.partition import load_partition_set
from commgraph.sample import (
    DGSMasks,
    DGSSampler,
    FastGCNSampler,
    LADIESSampler,
    NeighborSampler,
    SamplingGraph,
    forward_blocks,
    parse_fanouts,
)
from commgraph.train.minibatch import epoch_steps, seed_batches

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sampling_masks import DGS_VARIANTS, explanation_time, masks_file, seed_masks  # noqa: E402
from sampling_report import print_counts, print_runs  # noqa: E402


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


TRAINERS = ("full", "neighbor", "fastgcn", "ladies", "cluster", "dgs-node", "dgs-feature", "dgs")


def variant_flags(trainer: str) -> list[str]:
    """``commgraph train``'s flags for a DGS row of Table 3.3."""
    return [arg for name, value in DGS_VARIANTS[trainer].items() for arg in (f"--{name.replace('_', '-')}", str(value))]


def train_run(
    partdir: Path,
    workers: int,
    trainer: str,
    args,
    seed: int,
    out: Path,
    masks: Path | None,
    extra: tuple[str, ...] = (),
) -> list[dict]:
    """One ``commgraph train`` job (its own processes, as a user runs it); its epoch records. DGS
    runs sample with ``masks`` (made by :func:`make_masks`) from the first step, with no online
    explainer beside them (``--explain-cpu 0``)."""
    options = [
        "--epochs",
        str(args.epochs),
        "--seed",
        str(seed),
        "--hidden",
        str(args.hidden),
        "--eval-every",
        str(args.epochs),
        "--metrics-out",
        str(out),
        "--quiet",
        "--timeout",
        "600",
        *extra,
    ]
    sampler = "dgs" if trainer.startswith("dgs") else trainer
    if trainer != "full":
        options += ["--sampler", sampler, "--batch-size", str(args.batch_size), "--peer-rows", "network"]
        if args.steps_per_epoch is not None:
            options += ["--steps-per-epoch", str(args.steps_per_epoch)]
    if sampler in ("neighbor", "dgs"):
        options += ["--fanout", args.fanout]
    if trainer in DGS_VARIANTS:
        options += ["--explain-cpu", "0", *variant_flags(trainer)] + (["--dgs-masks", str(masks)] if masks else [])
    if sampler in ("fastgcn", "ladies"):
        options += ["--layer-size", str(args.layer_size)]
    job = subprocess.run(
        [sys.executable, "-m", "commgraph", "train", str(partdir), "--workers", str(workers), *options],
        capture_output=True,
        text=True,
    )
    if job.returncode != 0:
        raise SystemExit(f"{trainer} on {partdir} failed:\n{job.stderr}")
    return [json.loads(line) for line in out.read_text().splitlines()]


def make_masks(partdir: Path, workers: int, args, seed: int, out: Path) -> tuple[Path, float]:
    """Every worker's masks from the project's explainer: ``--mask-epochs`` epochs of DGS (sampling
    as neighbor, no explainer beside it), then ``--dgs-masks-out`` explains the trained model on
    every worker (T_E epochs, L, one thread each). Returns the file and the job's wall seconds."""
    masks = out.parent / f"masks-{seed}.npz"
    started = time.perf_counter()
    train_run(
        partdir,
        workers,
        "dgs",
        argparse.Namespace(**{**vars(args), "epochs": args.mask_epochs}),
        seed,
        out,
        None,
        ("--dgs-masks-out", str(masks)),
    )
    return masks, time.perf_counter() - started


def summarise(records: list[dict]) -> dict[str, float]:
    """Per epoch: bytes by kind (mean over the epochs), seconds (median from epoch 2 on, past
    start-up), the last epoch's test accuracy and the share of steps sampled with DGS's masks."""

    def mean_mb(key: str) -> float:
        return float(np.mean([r[key] for r in records])) / 1e6

    masked = [r["dgs_masked_steps"] for r in records if r.get("dgs_steps") is not None]
    steps = [r["dgs_steps"] for r in records if r.get("dgs_steps") is not None]
    return {
        "feature_mb": mean_mb("feature_bytes"),
        "request_mb": mean_mb("structure_bytes"),
        "gradient_mb": mean_mb("allreduce_bytes"),
        "total_mb": mean_mb("total_bytes"),
        "sync_mb": mean_mb("sync_bytes"),
        "halo_mb": float(np.mean([r["comm_bytes"] - r["feature_bytes"] - r["structure_bytes"] for r in records])) / 1e6,
        "epoch_s": float(np.median([r["epoch_seconds"] for r in records[1:]] or [records[0]["epoch_seconds"]])),
        "steps": records[-1]["steps"],
        "test_acc": records[-1]["test_acc"],
        "masked_share": sum(masked) / sum(steps) if steps and sum(steps) else float("nan"),
    }


def partition_set(graph, workers: int, args) -> tuple[Path, float]:
    """``graph`` split by ``--partition`` into ``workers`` parts (seed 0), made once and kept in
    the partition cache under ``$COMMGRAPH_HOME`` (later runs, seeds and trainers reuse it); the
    set's directory and its edge cut as a share of the edges."""
    partdir = cached_partition_set(graph, workers, args.partition, 0, log=lambda line: print(line, flush=True))
    metrics = load_partition_set(partdir).manifest["metrics"]
    return partdir, metrics["edge_cut"] / max(graph.num_edges, 1)


def explain_table(args) -> dict:
    """``--explain-graph``: one explanation of part 0 of a ``--partition`` split into the first
    ``--workers`` count, timed ``--explain-repeats`` times (target: <= 10 s on one core for a
    100k-node, degree-100 graph)."""
    graph = load_graph(args.explain_graph)
    workers = int(args.workers.split(",")[0])
    partdir, _ = partition_set(graph, workers, args)
    explained = explanation_time(partdir, args)
    wall, cpu = explained["seconds"], explained["cpu_seconds"]
    print(
        f"{args.explain_graph}: {graph.num_nodes} nodes, {graph.num_edges} edges, {graph.num_features} features; "
        f"part 0 of {workers} ({args.partition}): {explained['remote']} remote nodes in its explanation graph; "
        f"one explanation (T_E = {explained['epochs']} epochs, hidden {args.hidden}, one thread): "
        f"median {np.median(wall):.2f} s wall "
        f"({min(wall):.2f}-{max(wall):.2f}), {np.median(cpu):.2f} s CPU ({min(cpu):.2f}-{max(cpu):.2f}) over "
        f"{len(wall)} repeats (target <= 10 s)"
    )
    return explained


def seed_list(args) -> range:
    return range(args.first_seed, args.first_seed + args.seeds)


def seed_of_masks(args, seed: int) -> int:
    """The seed whose model's explanation gives run ``seed`` its masks (``--masks-seed``)."""
    return seed if args.masks_seed is None else args.masks_seed


def train_table(args) -> dict:
    """Every trainer on each graph and worker count, ``--seeds`` seeds, side by side."""
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.train_graphs:
            graph = load_graph(spec)
            for workers in (int(w) for w in args.workers.split(",")):
                partdir, cut = partition_set(graph, workers, args)
                trainers = args.trainers.split(",")
                runs: dict[str, list] = {t: [] for t in trainers}
                mask_seconds = []
                for seed in seed_list(args):
                    masks = None
                    if any(t in DGS_VARIANTS for t in trainers) and args.masks_dir is not None:
                        # made part after part in this process (a mask job's 8 explainers at once do not fit)
                        pset, explained_seed = load_partition_set(partdir), seed_of_masks(args, seed)
                        seed_masks(pset, args, explained_seed)
                        masks = masks_file(pset, args, explained_seed)
                    elif any(t in DGS_VARIANTS for t in trainers):
                        masks, seconds = make_masks(partdir, workers, args, seed, Path(tmp) / "m.jsonl")
                        mask_seconds.append(seconds)
                    for t in trainers:
                        runs[t].append(
                            summarise(train_run(partdir, workers, t, args, seed, Path(tmp) / "m.jsonl", masks))
                        )
                explained = explanation_time(partdir, args) if masks is not None else None
                results[f"{spec} x{workers}"] = {
                    "runs": runs,
                    "edge_cut": cut,
                    "explanation": explained,
                    "mask_job_seconds": mask_seconds,
                }
                print_runs(spec, graph, workers, args, runs, cut, explained, mask_seconds)
    return results


def count_fetch(
    whole: SamplingGraph, trains: list[np.ndarray], trainer: str, args, seed: int, masks: list[DGSMasks]
) -> dict[str, float]:
    """What ``trainer``'s workers fetch in the first ``--count-steps`` steps of a ``commgraph
    train --seed seed`` run, drawn exactly as they draw them (each worker's generator, seeds and
    sampler, DGS with ``masks`` from step 1), without training: per step, summed over workers,
    feature bytes, request bytes (8 per remote row, and DGS's column list once to every other
    worker), and with ``--first-layer owner`` the first-layer rows the owners would send instead
    of the feature rows (GraphSAGE: each remote row's neighbour row and a root row per remote
    destination of layer 0, ``--hidden`` wide; as many gradient rows come back); per worker:
    remote rows, sampled edges (the GNN's work) and seconds sampling."""
    fanouts, parts = parse_fanouts(args.fanout), len(trains)
    steps = epoch_steps([t.shape[0] for t in trains], args.batch_size)
    width = masks[0].feature_mask.shape[0]
    features = requests = rows = edges = counted = activations = 0
    seconds = 0.0
    for k, train in enumerate(trains):
        graph = replace(whole, part=k)
        if trainer == "neighbor":
            sampler = NeighborSampler(graph, fanouts)
        else:
            sampler = DGSSampler(graph, fanouts, **DGS_VARIANTS[trainer])
            sampler.set_masks(masks[k])
            requests += 8 * sampler.masks.feature_columns(sampler.feature_rate).shape[0] * (parts - 1)
        rng = np.random.default_rng([seed, k])  # the trainer's generator of rank k
        batches = seed_batches(train, steps, rng)[: args.count_steps]
        counted = max(counted, len(batches))
        for seeds in (b for b in batches if b is not None):
            started = time.perf_counter()
            batch = sampler.sample(seeds, rng)
            seconds += time.perf_counter() - started
            edges += batch.num_sampled_edges
            remote = int(batch.remote_input.sum())
            features += 4 * batch.fetched_values(width)
            destinations = batch.layers[0].dst.shape[0]
            activations += 4 * args.hidden * (remote + int(batch.remote_input[:destinations].sum()))
            requests += 8 * remote
            rows += remote
    return {
        "feature_mb": features / counted / 1e6,
        "request_mb": requests / counted / 1e6,
        "activation_mb": activations / counted / 1e6,
        "remote_rows": rows / counted / parts,
        "edges": edges / counted / parts,
        "sample_s": seconds / counted / parts,
        "steps": counted,
        "epoch_steps": steps,
    }


def count_table(args) -> dict:
    """``--count-steps N``: the offline count (no training) of each graph's bytes per step, for
    ``neighbor`` and DGS's Table 3.3 rows, ``--seeds`` seeds, with every part's masks from the
    project's explainer (:func:`seed_masks`). Gradients are the native all-reduce's bytes as the
    trainer counts them: every worker sends its parameters once per step."""
    results = {}
    for spec in args.train_graphs:
        graph = load_graph(spec)
        about = {
            "nodes": graph.num_nodes,
            "edges": graph.num_edges,
            "features": graph.num_features,
            "classes": graph.num_classes,
        }
        for workers in (int(w) for w in args.workers.split(",")):
            partdir, cut = partition_set(graph, workers, args)
            pset = load_partition_set(partdir)
            if args.mask_parts is not None:  # only make these parts' masks, for a later count
                seed_masks(pset, args, args.masks_seed, [int(k) for k in args.mask_parts.split(",")])
                continue
            whole = SamplingGraph.from_partition(pset, 0)
            trains = [np.asarray(pset.part(k).owned)[np.asarray(pset.part(k).train_mask, bool)] for k in range(workers)]
            model = GNN(
                "sage", about["features"], args.hidden, about["classes"], layers=len(parse_fanouts(args.fanout))
            )
            gradient_mb = workers * 4 * sum(p.numel() for p in model.parameters()) / 1e6
            trainers = [t for t in args.trainers.split(",") if t == "neighbor" or t in DGS_VARIANTS]
            counts: dict[str, list] = {t: [] for t in trainers}
            explain_seconds, spread = [], []
            for seed in seed_list(args):
                if args.uniform_masks:  # no preference: every remote node weighs 1, the first ceil(N_f F) columns
                    masks, seconds = [DGSMasks(np.ones(about["nodes"]), np.ones(about["features"]))] * workers, []
                else:
                    masks, seconds = seed_masks(pset, args, seed_of_masks(args, seed))
                explain_seconds += seconds
                remote = masks[0].node_prob[whole.owner != 0]
                spread.append([float(np.mean(remote > 0)), *np.percentile(remote[remote > 0], [5, 50, 95]).tolist()])
                for t in trainers:
                    counted = count_fetch(whole, trains, t, args, seed, masks)
                    counts[t].append(
                        {
                            **counted,
                            "gradient_mb": gradient_mb,
                            "total_mb": counted["feature_mb"] + counted["request_mb"] + gradient_mb,
                        }
                    )
            results[f"{spec} x{workers}"] = {
                "graph": about,
                "edge_cut": cut,
                "counts": counts,
                "explain_seconds": explain_seconds,
                "node_prob": spread,
            }
            print_counts(spec, about, workers, args, cut, counts, explain_seconds, spread)
    return results


def speed_table(args, fanouts: list[int]) -> dict:
    graph = load_graph(args.graph)
    sampling = SamplingGraph.from_graph(graph)
    train = np.flatnonzero(graph.train_mask)
    neighbor = NeighborSampler(sampling, fanouts)
    dgs = DGSSampler(sampling, fanouts, rule="split")  # one part: every node local, which keep-local would keep whole
    dgs.set_masks(DGSMasks(np.ones(graph.num_nodes), np.ones(graph.num_features)))
    sizes = [args.layer_size] * len(fanouts)
    samplers = {
        "neighbor": neighbor,
        "dgs": dgs,
        "fastgcn": FastGCNSampler(sampling, sizes),
        "ladies": LADIESSampler(sampling, sizes),
    }
    warm = batches_of(train, args.batch_size, 1, 99)
    for sampler in samplers.values():  # compile the kernels
        time_sampler(sampler, warm, 0)
    rows: dict[str, list[float]] = {
        name: [] for name in [*samplers, "numpy", "edges/s", "numpy edges/s", "step", "share"]
    }
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

    print(
        f"{graph.name}: {graph.num_nodes} nodes, {graph.num_edges} edges; batch {args.batch_size}, "
        f"fanout {args.fanout}, {args.batches} batches x {args.repeats} repeats, torch threads {args.threads}"
    )
    print(
        f"neighbor sampling: {fmt(rows['edges/s'], 1e-6)} M sampled edges/s on one core; "
        f"numpy baseline {fmt(rows['numpy edges/s'], 1e-6)} M/s; "
        f"speed-up {np.median(rows['edges/s']) / np.median(rows['numpy edges/s']):.2f}x"
    )
    for name in [*samplers, "numpy"]:
        print(f"  {name:9s} {fmt(rows[name], 1e3)} ms per batch")
    print(
        f"GraphSAGE step (hidden {args.hidden}) on a neighbor batch: {fmt(rows['step'], 1e3)} ms; "
        f"sampling's share of sample + step: {fmt(rows['share'], 100, 1)} % (target <= 20%)"
    )
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
    parser.add_argument("--train-graphs", nargs="*", default=[], help="graphs to train on with every trainer")
    parser.add_argument(
        "--trainers",
        default="neighbor,dgs-node,dgs-feature,dgs",
        help=f"of {','.join(TRAINERS)}: full-graph training, the samplers, and DGS's Table 3.3 rows",
    )
    parser.add_argument("--partition", default="metis", help="partitioner of the training runs")
    parser.add_argument("--mask-epochs", type=int, default=1, help="epochs trained before the masks are explained")
    parser.add_argument("--explain-repeats", type=int, default=3, help="timed explanations of part 0")
    parser.add_argument("--workers", default="4,8", help="worker counts for the training runs")
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the training runs")
    parser.add_argument("--first-seed", type=int, default=0, help="the first of the --seeds seeds")
    parser.add_argument("--epochs", type=int, default=40, help="epochs of the training runs")
    parser.add_argument(
        "--steps-per-epoch",
        type=int,
        help="cap on the training runs' steps per epoch (commgraph train --steps-per-epoch)",
    )
    parser.add_argument(
        "--count-steps",
        type=int,
        help="instead of training on --train-graphs, count the bytes of the first N steps offline",
    )
    parser.add_argument(
        "--masks-dir",
        help="DGS's masks made part after part in this process (the explainer on each "
        "seed's initial model), kept here and reused; without it training runs use a mask job",
    )
    parser.add_argument(
        "--masks-seed", type=int, help="with --masks-dir: every seed samples with this seed's masks (default: its own)"
    )
    parser.add_argument(
        "--uniform-masks",
        action="store_true",
        help="--count-steps: DGS with masks that prefer nothing, to tell its rule from its masks",
    )
    parser.add_argument(
        "--mask-parts",
        metavar="K,K",
        help="--count-steps: only explain these parts (seed --masks-seed) into --masks-dir, no count",
    )
    parser.add_argument(
        "--explain-period", type=int, default=30, help="DGS's T_ex, against which one explanation's time is set"
    )
    parser.add_argument("--explain-graph", help="time one explanation of part 0 of this graph (--workers parts)")
    parser.add_argument("--skip-speed", action="store_true", help="only the training runs")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    for name in ("steps_per_epoch", "count_steps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.mask_parts is not None and (args.masks_dir is None or args.masks_seed is None):
        parser.error("--mask-parts keeps masks for a later count: give --masks-dir and --masks-seed")
    torch.set_num_threads(args.threads)
    fanouts = parse_fanouts(args.fanout)
    figures = {"args": vars(args)}
    try:
        if not args.skip_speed:
            figures["speed"] = speed_table(args, fanouts)
        if args.explain_graph:
            figures["explanation"] = explain_table(args)
        if args.train_graphs and args.count_steps:
            figures["count"] = count_table(args)
        elif args.train_graphs:
            figures["training"] = train_table(args)
    except CommgraphError as error:  # e.g. a registry dataset not downloaded: the error says how to get it
        parser.exit(2, f"sampling.py: error: {error}\n")
    if args.json:
        with atomic_write(args.json) as handle:
            handle.write(json.dumps(figures, indent=1).encode())


if __name__ == "__main__":
    main()
