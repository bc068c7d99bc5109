"""The tables ``benchmarks/sampling.py`` prints: the offline fetch counts per trainer and the
training runs side by side (means and min-max spreads over the seeds)."""

from __future__ import annotations

import os

import numpy as np

from sampling_masks import DGS_VARIANTS


def mean_spread(values, digits: int = 3) -> str:
    """The mean of ``values`` and their min-max, e.g. ``1.500 (1.000-2.000)``."""
    return f"{np.mean(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def print_counts(spec: str, about: dict, workers: int, args, cut: float, counts: dict, explain_seconds, spread) -> None:
    def fmt(values, digits: int = 1) -> str:
        return mean_spread(values, digits)

    first = next(iter(counts.values()))[0]
    print(
        f"{spec}: {about['nodes']} nodes, {about['edges']} edges (mean degree {about['edges'] / about['nodes']:.1f}), "
        f"{about['features']} features; {workers} workers, {args.partition} partition, edge cut {cut:.1%}; batch "
        f"{args.batch_size}, fanout {args.fanout}, hidden {args.hidden}; offline count (no training) of the first "
        f"{first['steps']} of {first['epoch_steps']} steps of epoch 1; DGS with "
        + (
            "uniform masks (no node preferred)"
            if args.uniform_masks
            else f"the explainer's masks of {'each seed' if args.masks_seed is None else f'seed {args.masks_seed}'}'s "
            "initial model"
        )
        + f"; mean (min-max) of {args.seeds} seed(s); MB per step, all workers"
    )
    p = np.array(spread)
    print(
        f"  part 0's node mask on remote nodes: {p[:, 0].mean():.1%} non-zero; 5th/50th/95th percentile "
        f"{p[:, 1].mean():.3f}/{p[:, 2].mean():.3f}/{p[:, 3].mean():.3f}"
        + (f"; explanations {fmt(explain_seconds)} s each (one thread)" if explain_seconds else "")
    )
    remote = about["nodes"] * (1 - 1 / workers)  # a part's remote nodes, on average
    print(
        f"  {'':11s} {'features':>22s} {'requests':>9s} {'gradients':>9s} {'total':>22s} {'remote rows/worker':>26s} "
        f"{'of remote':>9s} {'edges/worker':>12s} {'sample ms':>9s}"
    )
    for name, rows in counts.items():
        col = {k: [r[k] for r in rows] for k in rows[0]}
        print(
            f"  {name:11s} {fmt(col['feature_mb']):>22s} {np.mean(col['request_mb']):9.2f} "
            f"{np.mean(col['gradient_mb']):9.3f} {fmt(col['total_mb']):>22s} {fmt(col['remote_rows'], 0):>26s} "
            f"{np.mean(col['remote_rows']) / remote:9.1%} {np.mean(col['edges']):12.0f} "
            f"{np.mean(col['sample_s']) * 1e3:9.0f}"
        )
    print(
        f"  with --first-layer owner (hidden {args.hidden}): activations = gradient rows MB per step; feature "
        f"bytes per step shipped / owner's activations; total with owner (incl. both ways and the all-reduce)"
    )
    for name, rows in counts.items():
        act = [r["activation_mb"] for r in rows]
        owner_total = [r["activation_mb"] * 2 + r["request_mb"] + r["gradient_mb"] for r in rows]
        print(
            f"  {name:11s} {fmt(act, 2):>22s} {np.mean([r['feature_mb'] / r['activation_mb'] for r in rows]):8.1f}x "
            f"{fmt(owner_total, 2):>22s} ({np.mean([r['total_mb'] / t for r, t in zip(rows, owner_total)]):.1f}x "
            f"fewer total bytes)"
        )
    base = counts.get("neighbor")
    for name in (n for n in DGS_VARIANTS if n in counts and base):
        saved = [1 - d["total_mb"] / n["total_mb"] for d, n in zip(counts[name], base)]
        rows = [1 - d["remote_rows"] / n["remote_rows"] for d, n in zip(counts[name], base)]
        print(
            f"  {name} vs neighbor (per seed): total bytes {np.mean(saved):+.1%} fewer ({min(saved):+.1%} to "
            f"{max(saved):+.1%}; target for dgs >= 24%), remote rows {np.mean(rows):+.1%} fewer"
        )


def print_runs(spec: str, graph, workers: int, args, runs: dict, cut: float, explained, mask_seconds) -> None:
    fmt = mean_spread
    print(
        f"{spec}: {graph.num_nodes} nodes, {graph.num_edges} edges "
        f"(mean degree {graph.num_edges / graph.num_nodes:.1f}), "
        f"{graph.num_features} features; {workers} workers, {args.partition} partition, edge cut {cut:.1%}; "
        f"{args.epochs} epochs, batch {args.batch_size}, fanout {args.fanout}, hidden {args.hidden}; "
        + (
            f"DGS masks from the project's explainer after {args.mask_epochs} epoch(s)"
            if args.masks_dir is None
            else f"DGS masks from the project's explainer on seed "
            f"{args.masks_seed if args.masks_seed is not None else 'S'}'s initial model (--masks-dir)"
        )
        + ", in use from step 1; "
        + (f"at most {args.steps_per_epoch} steps per epoch; " if args.steps_per_epoch else "")
        + f"mean (min-max) of {args.seeds} seeds; MB per epoch, all workers"
    )
    print(
        f"  {'':11s} {'features':>20s} {'requests':>9s} {'gradients':>9s} {'total':>20s} {'sync':>7s} {'halo':>8s} "
        f"{'steps':>5s} {'epoch ms':>22s} {'test acc':>20s} {'masked':>6s}"
    )
    for name, rows in runs.items():
        col = {k: [r[k] for r in rows] for k in rows[0]}
        masked = "" if np.isnan(col["masked_share"][0]) else f"{min(col['masked_share']):.0%}"
        print(
            f"  {name:11s} {fmt(col['feature_mb']):>20s} {np.mean(col['request_mb']):9.3f} "
            f"{np.mean(col['gradient_mb']):9.3f} {fmt(col['total_mb']):>20s} {np.mean(col['sync_mb']):7.3f} "
            f"{np.mean(col['halo_mb']):8.3f} {col['steps'][0]:5d} {fmt([s * 1e3 for s in col['epoch_s']], 1):>22s} "
            f"{fmt(col['test_acc']):>20s} {masked:>6s}"
        )
    base = runs.get("neighbor")
    for name in (n for n in DGS_VARIANTS if n in runs and base):
        saved = [1 - d["total_mb"] / n["total_mb"] for d, n in zip(runs[name], base)]
        feat = [1 - d["feature_mb"] / n["feature_mb"] for d, n in zip(runs[name], base) if n["feature_mb"]]
        speed = [n["epoch_s"] / d["epoch_s"] for d, n in zip(runs[name], base)]
        acc = [(d["test_acc"] - n["test_acc"]) * 100 for d, n in zip(runs[name], base)]
        print(
            f"  {name} vs neighbor (per seed): total bytes {np.mean(saved):+.1%} fewer ({min(saved):+.1%} to "
            f"{max(saved):+.1%}; target for dgs >= 24%), feature bytes {np.mean(feat):+.1%} fewer; epoch speed-up "
            f"{np.mean(speed):.2f}x ({min(speed):.2f}-{max(speed):.2f}); test accuracy {np.mean(acc):+.2f} points "
            f"({min(acc):+.2f} to {max(acc):+.2f}; target within 0.5)"
        )
    if explained is not None:
        wall = explained["seconds"]
        print(
            f"  one explanation of part 0 ({explained['remote']} remote nodes, {explained['epochs']} epochs = T_E, one "
            f"thread): {fmt(wall, 2)} s wall, {fmt(explained['cpu_seconds'], 2)} s CPU over {len(wall)} repeats"
            + (
                f"; mask-making jobs ({args.mask_epochs} epoch(s) + the explanation on every worker): "
                f"{fmt(mask_seconds, 1)} s"
                if mask_seconds
                else ""
            )
        )
        if base:
            step = np.mean([n["epoch_s"] / n["steps"] for n in base])
            print(
                f"  T_ex = {args.explain_period} neighbor steps take {step * args.explain_period:.2f} s: an online "
                f"explainer keeping up needs {np.mean(explained['cpu_seconds']) / (step * args.explain_period):.2f} "
                f"cores per worker, {workers} worker(s) on {os.cpu_count()} cores here"
            )
