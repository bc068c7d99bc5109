"""A picture of a topology for checking it by eye: hosts side by side, devices in rows by kind
(network switches on top, GPUs at the bottom), line width by bandwidth, NVLinks as arcs."""

from __future__ import annotations

from pathlib import Path

from commgraph.plotting import pyplot, save_png
from commgraph.topology.model import Topology

_ROWS = {"switch": 4.0, "cpu": 3.0, "nvswitch": 3.0, "nic": 2.3, "pcie_switch": 1.4, "gpu": 0.0, "accelerator": 0.0}
_COLOURS = {
    "nvlink": "tab:green",
    "nvswitch": "tab:green",
    "pcie": "tab:blue",
    "qpi": "tab:red",
    "infiniband": "tab:purple",
    "ethernet": "tab:orange",
    "shared_memory": "tab:gray",
    "loopback": "tab:gray",
}


def draw_topology(topology: Topology, path: str | Path) -> None:
    """A PNG of ``topology`` at ``path`` (layout: the module's description)."""
    plt = pyplot()
    from matplotlib.patches import FancyArrowPatch

    position = _layout(topology)
    width = max(6.0, min(40.0, 0.6 * max(x for x, _ in position.values()) + 2))
    fig, ax = plt.subplots(figsize=(width, 6))
    top = max(link.bandwidth_gbps for link in topology.links) if topology.links else 1.0
    for link in topology.links:
        (xa, ya), (xb, yb) = position[link.a], position[link.b]
        style = dict(color=_COLOURS[link.kind], linewidth=0.5 + 4.0 * link.bandwidth_gbps / top, alpha=0.7)
        if link.kind == "nvlink":
            ax.add_patch(FancyArrowPatch((xa, ya), (xb, yb), connectionstyle="arc3,rad=0.35", arrowstyle="-", **style))
        else:
            ax.plot([xa, xb], [ya, yb], **style, zorder=1)
    small = len(topology.devices) <= 80
    for device in topology.devices:
        x, y = position[device.id]
        ax.scatter(
            [x],
            [y],
            s=120 if small else 8,
            zorder=2,
            marker="s" if device.kind == "gpu" else "o",
            color="black" if device.kind == "gpu" else "white",
            edgecolors="black",
        )
        if small:
            ax.annotate(
                device.id, (x, y), textcoords="offset points", xytext=(0, -14 if y == 0 else 9), ha="center", fontsize=7
            )
    for kind, colour in _COLOURS.items():
        if any(link.kind == kind for link in topology.links):
            ax.plot([], [], color=colour, label=kind, linewidth=3)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(
        f"{topology.name}: {len(topology.gpus)} GPUs, {len(topology.devices)} devices, "
        f"{len(topology.links)} links (line width = bandwidth)"
    )
    ax.set_ylim(-1.0, 5.0)
    ax.axis("off")
    save_png(fig, path)


def _layout(topology: Topology) -> dict[str, tuple[float, float]]:
    """x: hosts left to right, devices of one row spread evenly inside their host's block."""
    position: dict[str, tuple[float, float]] = {}
    offset = 0.0
    for host in topology.hosts:
        members = [d for d in topology.devices if d.host == host]
        span = max(sum(1 for d in members if _ROWS[d.kind] == row) for row in set(_ROWS.values()))
        for row in set(_ROWS.values()):
            in_row = [d for d in members if _ROWS[d.kind] == row]
            for i, device in enumerate(in_row):
                position[device.id] = (offset + (i + 0.5) * span / len(in_row), row)
        offset += span + 1.0
    return position
