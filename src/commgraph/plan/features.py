"""Where a feature table lives: in GPU memory, or in host memory that GPU threads read directly.

PyTorch-Direct (Min et al., "Large Graph Convolutional Network Training with GPU-Oriented Data
Communication Architecture", section 4.3) keeps the whole feature table in host memory as a
*unified tensor* and lets the GPU gather the rows a step needs over PCIe (zero-copy); the gathered
rows are a GPU tensor, because the layers read them many times. Its placement rule says when
each side of that trade wins: data reused many times by the GPU belongs in GPU memory, data read
once per step and too large for the GPU stays on the host.

For a feature table that gives the default (``auto``): the table goes to the GPU when it fits with
headroom (at most ``HEADROOM`` of the memory free on the device, leaving the rest for
activations, gradients and gathered batches), otherwise it stays in host memory, pinned in place,
and every gather is a zero-copy read. ``gpu`` and ``host`` force one side; on a CPU device the
table is host memory whatever is asked.
"""

from __future__ import annotations

from dataclasses import dataclass

from commgraph.errors import FeatureError

MODES = ("auto", "gpu", "host")
PLACEMENTS = ("gpu", "host", "cpu")
HEADROOM = 0.5  # auto: the table may take at most this share of the device's free memory


@dataclass(frozen=True)
class FeaturePlacement:
    """Where a feature table goes (``gpu``, ``host`` or ``cpu``) and why, in words."""

    placement: str
    reason: str


def place_features(mode: str, device_type: str, table_bytes: int, free_bytes: int | None = None) -> FeaturePlacement:
    """The placement of a feature table by PyTorch-Direct's rule (the module's description).

    Args:
        mode: ``auto``, ``gpu`` or ``host`` (``--features``).
        device_type: ``cuda`` or ``cpu``; on a CPU the table is host memory whatever is asked.
        table_bytes: the table's size.
        free_bytes: the device's free memory (needed for ``cuda``).

    Returns:
        FeaturePlacement: ``gpu``, ``host`` (pinned, zero-copy reads) or ``cpu``, and why.

    Raises:
        FeatureError: an unknown mode, or ``gpu`` asked for a table larger than the free memory.
    """
    if mode not in MODES:
        raise FeatureError(f"unknown --features {mode!r}; choose one of {', '.join(MODES)}")
    size = _gb(table_bytes)
    if device_type != "cuda":
        asked = "" if mode == "auto" else f" (--features {mode})"
        return FeaturePlacement(
            "cpu", f"{size} table in host memory: the device is the CPU{asked}, rows are gathered with index_select"
        )
    if free_bytes is None:
        raise FeatureError("placing features on a GPU needs its free memory")
    free = _gb(free_bytes)
    if mode == "gpu":
        if table_bytes > free_bytes:
            raise FeatureError(
                f"--features gpu: the {size} table does not fit in the {free} free on the GPU; "
                "use --features host (or auto) to keep it in host memory"
            )
        return FeaturePlacement("gpu", f"{size} table in GPU memory (--features gpu)")
    if mode == "host":
        return FeaturePlacement("host", f"{size} table in pinned host memory, rows read by the GPU (--features host)")
    if table_bytes <= HEADROOM * free_bytes:
        return FeaturePlacement(
            "gpu", f"{size} table in GPU memory: it fits in {HEADROOM:.0%} of the {free} free (--features auto)"
        )
    return FeaturePlacement(
        "host",
        f"{size} table in pinned host memory, rows read by the GPU: it is more than "
        f"{HEADROOM:.0%} of the {free} free on the GPU (--features auto)",
    )


def _gb(nbytes: int) -> str:
    return f"{nbytes / 1e9:.3f} GB" if nbytes >= 1e7 else f"{nbytes / 1e6:.3f} MB"
