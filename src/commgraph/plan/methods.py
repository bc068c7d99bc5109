"""How a GPU moves rows to another device, and what each way costs (ChattyGraph).

Zero-copy (UVA) lets the destination read the source's memory directly: almost no set-up, but the
reads cannot drive the link at full speed. A peer copy (``cudaMemcpyPeerAsync``) gathers rows into a
buffer and copies it: a larger fixed cost, then the full link bandwidth. The parameters come from
ChattyGraph's measurements (seeds/chattygraph.txt, the 4 KB - 16 MB table): for each method a
latency and a per-KB time fitted by least squares on relative error; a method's efficiency is the
copy's per-KB time over its own. Which method wins for a message then follows from the model and the
route's bandwidth (on PCIe at 11.13 GB/s the crossover falls between 64 KB and 256 KB, as in the
table); no size threshold is written anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# ChattyGraph, table of transfer times: size (KB), zero-copy (ms), MemCpyAsync (ms)
SEED_SIZES_KB = np.array([4, 16, 64, 256, 1024, 4096, 16384], dtype=np.float64)
SEED_ZERO_COPY_MS = np.array([0.017, 0.037, 0.118, 0.621, 3.317, 25.272, 174.579])
SEED_COPY_MS = np.array([0.025, 0.050, 0.124, 0.372, 1.419, 5.307, 28.302])


@dataclass(frozen=True)
class TransferMethod:
    r"""One way of moving a message, priced as

    .. math::
        t(s) = t_0 + \ell + \frac{s}{\eta \, B},

    :math:`s` bytes over a route of latency :math:`\ell` and bandwidth :math:`B`.

    Args:
        name: ``zero_copy`` or ``copy``.
        overhead_s: the fixed cost per message :math:`t_0`, in seconds.
        efficiency: the fraction :math:`\eta` of the route's bandwidth the method sustains.
    """

    name: str
    overhead_s: float  # fixed cost per message
    efficiency: float  # fraction of the route's bandwidth the method sustains

    def seconds(self, nbytes: float, route_gbps: float, route_latency_s: float) -> float:
        """The time of one message of ``nbytes`` alone on a route of ``route_gbps`` GB/s and
        ``route_latency_s`` seconds."""
        return self.overhead_s + route_latency_s + nbytes / (self.efficiency * route_gbps * 1e9)


def _fit(times_ms: np.ndarray) -> tuple[float, float]:
    """(latency s, seconds per KB) minimising sum ((a + b * size) / t - 1)^2."""
    design = np.stack([1.0 / times_ms, SEED_SIZES_KB / times_ms], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(times_ms), rcond=None)
    return a * 1e-3, b * 1e-3


def fitted_methods() -> dict[str, TransferMethod]:
    """Both methods, fitted to ChattyGraph's table (the module's description); the copy's
    efficiency is 1 by definition."""
    zero_latency, zero_per_kb = _fit(SEED_ZERO_COPY_MS)
    copy_latency, copy_per_kb = _fit(SEED_COPY_MS)
    return {
        "zero_copy": TransferMethod("zero_copy", float(zero_latency), float(copy_per_kb / zero_per_kb)),
        "copy": TransferMethod("copy", float(copy_latency), 1.0),
    }


METHODS = fitted_methods()
