"""Heat maps of where a plan's bytes go: source device x destination device, one panel per plan."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from commgraph.plan.model import CommPlan
from commgraph.plotting import pyplot, save_png


def plot_traffic(plans: list[CommPlan], devices: list[str], path: str | Path) -> None:
    """Draw each plan's bytes between devices as a heat map, one panel a plan, to a PNG.

    Args:
        plans: the plans.
        devices: the devices in the order of the rows and columns (others, such as host memory in
            swap plans, follow them).
        path: the PNG file.
    """
    plt = pyplot()

    index = {d: i for i, d in enumerate(devices)}
    extra = sorted(
        {s.src for p in plans for st in p.stages for s in st} - set(index)
        | {s.dst for p in plans for st in p.stages for s in st} - set(index)
    )
    for name in extra:  # host memory in swap plans
        index[name] = len(index)
    labels = list(index)
    fig, axes = plt.subplots(1, len(plans), figsize=(4.2 * len(plans), 4), squeeze=False)
    for ax, plan in zip(axes[0], plans):
        grid = np.zeros((len(labels), len(labels)))
        for stage in plan.stages:
            for send in stage:
                grid[index[send.src], index[send.dst]] += send.nbytes
        image = ax.imshow(grid / 1e6, cmap="viridis")
        ax.set_title(f"{plan.planner}: {plan.total_bytes / 1e6:.2f} MB, {len(plan.stages)} stage(s)", fontsize=9)
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_xlabel("to")
        ax.set_ylabel("from")
        fig.colorbar(image, ax=ax, fraction=0.046, label="MB")
    save_png(fig, path)


def plot_completions(jct: dict[str, np.ndarray], title: str, path: str | Path) -> None:
    """Completion-time CDF of each selector's requests (log time axis)."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, seconds in jct.items():
        ordered = np.sort(seconds) * 1e6
        ax.step(
            ordered,
            np.arange(1, ordered.size + 1) / ordered.size,
            where="post",
            label=f"{name} (mean {ordered.mean():.1f} us)",
        )
    ax.set_xscale("log")
    ax.set_xlabel("completion time (us)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    save_png(fig, path)


def plot_sweep(
    curves: dict[str, tuple[list[float], list[float]]],
    direct_rate: float,
    combined_rate: float,
    bound_s: float,
    title: str,
    path: str | Path,
) -> None:
    """Median completion time against offered rate, one line per selector, with the direct paths'
    capacity, every path's together and the sustainable-throughput bound marked."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (name, (rates, medians)), marker in zip(curves.items(), "os^vD<>xP*"):
        ax.plot(np.array(rates) / 1e6, np.array(medians) * 1e6, marker=marker, markersize=4, label=name)
    ax.axvline(direct_rate / 1e6, color="gray", linestyle=":", label="direct paths' capacity")
    ax.axvline(combined_rate / 1e6, color="gray", linestyle="--", label="every path's capacity")
    ax.axhline(bound_s * 1e6, color="black", linewidth=0.8, linestyle="-.", label="median bound")
    ax.set_yscale("log")
    ax.set_xlabel("offered rate (million requests/s)")
    ax.set_ylabel("median completion time (us)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    save_png(fig, path)
