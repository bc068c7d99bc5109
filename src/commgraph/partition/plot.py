"""Bar chart of a partition's per-part nodes, edges and remote nodes."""

from __future__ import annotations

from pathlib import Path

from commgraph.plotting import pyplot, save_png


def plot_metrics(metrics: dict, title: str, path: str | Path) -> None:
    plt = pyplot()

    parts = metrics["parts"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, key, label in zip(
        axes, ("num_nodes", "num_edges", "num_remote"), ("|V_i| nodes", "|E(V_i)| edges", "|V_i^remote| remote nodes")
    ):
        values = [p[key] for p in parts]
        ax.bar(range(len(values)), values, color="tab:blue")
        ax.axhline(sum(values) / len(values), color="black", linestyle="--", linewidth=1, label="mean")
        ax.set_title(label)
        ax.set_xlabel("part")
        ax.set_xticks(range(len(values)))
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"{title}: total remote {metrics['total_remote']:,}, edge cut {metrics['edge_cut']:,}, "
        f"remote min/max {metrics['remote_min_max']:.3f}"
    )
    save_png(fig, path)
