"""Quantities as users type them: byte counts (``4096``, ``64K``, ``1M``, ``1G``, ``1e9``).

Every byte count a command or a workload spec takes is read here, so ``1G`` means the same
everywhere: K, M and G are powers of 1024. Rates follow one rule in names and help: ``_gbps`` is
gigabytes per second (GB/s, as ``bandwidth_gbps``), ``_gbits`` gigabits per second (Gbit/s, as a
network link's rated speed).
"""

from __future__ import annotations

import math

from commgraph.errors import OptionError

BYTE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text: str) -> float:
    """Bytes from ``4096``, ``64K``, ``1M``, ``1G`` (powers of 1024) or ``1e9``.

    Raises:
        OptionError: not a number with an optional K/M/G suffix, or not finite and > 0.
    """
    text = text.strip()
    number, unit = (text[:-1], text[-1].upper()) if text and text[-1].upper() in "KMG" else (text, "")
    try:
        value = float(number) * BYTE_UNITS[unit]
    except ValueError:
        raise OptionError(f"bad size {text!r}: expected bytes such as 4096, 64K, 1M or 1e9") from None
    if not (value > 0 and math.isfinite(value)):
        raise OptionError(f"bad size {text!r}: must be a finite number > 0")
    return value


def size(text: str) -> int:
    """Whole bytes from a size as :func:`parse_bytes` reads it (``8G``: 8589934592), rounded down.

    Raises:
        OptionError: as :func:`parse_bytes`.
    """
    return int(parse_bytes(text))
