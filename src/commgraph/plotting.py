"""Figures written to files: matplotlib's pyplot with the non-interactive Agg backend, and a PNG
written atomically. Every plotting module draws through these two, so a figure never needs a display
and a reader never sees a half-written picture."""

from __future__ import annotations

import os
from types import ModuleType

from commgraph.atomic import atomic_write

DPI = 110


def pyplot() -> ModuleType:
    """``matplotlib.pyplot`` with the Agg backend selected (no display needed). matplotlib is
    imported here, on first use, so commands that draw nothing never pay for it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: str | os.PathLike[str]) -> None:
    """Write ``fig`` to ``path`` as a PNG (tight bounding box, :data:`DPI` dots per inch),
    atomically, and close it."""
    with atomic_write(path) as handle:
        fig.savefig(handle, format="png", dpi=DPI, bbox_inches="tight")
    pyplot().close(fig)
