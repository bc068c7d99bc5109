"""Pictures of multi-path selection (LEO): completion-time CDFs and sweeps of offered rate."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from commgraph.plotting import pyplot, save_png


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
