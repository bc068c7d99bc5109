"""Bounds for tests that time what they check (a job stops within 2 s, a phase's bound ends it): the
bound a quiet machine meets with a margin, scaled by how loaded this machine is now, so that a test
fails for a slow stop and not for a busy machine (a second ``make test`` beside this one, say). Waits
for a state (processes gone) poll it and return as soon as it holds, within the scaled bound."""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def slowness() -> float:
    """How many runnable processes share each core now: the 1-minute load average per core, at least 1."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def scaled(seconds: float) -> float:
    """``seconds`` on a quiet machine, scaled by :func:`slowness`."""
    return seconds * slowness()


def wait_until(done: Callable[[], bool], seconds: float, every: float = 0.05) -> bool:
    """Poll ``done`` until it holds or :func:`scaled` ``(seconds)`` pass; whether it held."""
    deadline = time.monotonic() + scaled(seconds)
    while not done():
        if time.monotonic() > deadline:
            return done()
        time.sleep(every)
    return True
