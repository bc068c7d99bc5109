"""Quantities as a person reads them: seconds scaled to s, ms, us or ns, and byte counts in the
decimal (SI) system, B, KB, MB, GB and TB (1 MB = 10^6 bytes, as GB/s link speeds count them; the
K/M/G suffixes users type are read as powers of 1024 by :mod:`commgraph.units`).

Every scaled value keeps three significant figures (``125 ms``, ``1.23 GB``, ``45.6 us``), and a zero
is written ``0``, never ``0.00``.
"""

from __future__ import annotations

import math

TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))
BYTE_UNITS = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB"), (1.0, "B"))


def significant(value: float) -> str:
    """``value`` with three significant figures and thousands separators above 1,000 (``1,234``,
    ``12.3``, ``1.23``, ``0.0670``); zero is ``0``."""
    if value == 0:
        return "0"
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 1:
        return f"{value:.2f}"
    return f"{value:#.3g}"


def _scaled(value: float, units: tuple[tuple[float, str], ...]) -> str:
    """``value`` in the largest of ``units`` (scale, name; largest first) that leaves it >= 1."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0 " + next(name for scale, name in units if scale == 1.0)
    for scale, name in units:
        if abs(value) >= scale:
            return f"{significant(value / scale)} {name}"
    scale, name = units[-1]
    return f"{significant(value / scale)} {name}"


def seconds(value: float) -> str:
    """Seconds scaled to the value: ``0.12501`` is ``125 ms``, ``2.9e-4`` is ``290 us``, ``0`` is ``0 s``."""
    return _scaled(value, TIME_UNITS)


def nbytes(value: float) -> str:
    """A byte count in decimal units: ``1234567`` is ``1.23 MB``, ``0`` is ``0 B``."""
    return _scaled(value, BYTE_UNITS)


def count(value: float, noun: str, plural: str | None = None) -> str:
    """``1 epoch``, ``2 epochs``, ``1,024 nodes``: a count with its noun, singular for exactly one."""
    number = f"{value:,}" if isinstance(value, int) else significant(value)
    return f"{number} {noun if value == 1 else plural or noun + 's'}"
