"""Progress of a long simulation, on stderr: nothing for its first :data:`AFTER_SECONDS` seconds
(short runs stay silent), then a line when a stage starts and, while the event loop runs, at most
one every :data:`EVERY_SECONDS` seconds: the stage, the simulated time reached, the tasks finished
out of all, and the wall time so far. Where a stage runs long without either (building a DAG,
solving an LP), a heartbeat names it as soon as the run is :data:`AFTER_SECONDS` old and says it
is still running every :data:`HEARTBEAT_SECONDS` seconds after.
``--json`` and every ``--format`` report too (stdout keeps only the result).

A command runs inside :func:`reporting` (or is decorated with :func:`reported`) and names its
stages with :func:`stage`; the event
loop (:mod:`commgraph.sim.events`) calls :func:`tick` every :data:`TICK_EVENTS` events. Outside
:func:`reporting` both do nothing.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

AFTER_SECONDS = 2.5  # silent before this much wall time (tests lower it): a 5 s command, imports too, says its stage
EVERY_SECONDS = 5.0  # at most one event-loop line per this much wall time
TICK_EVENTS = 1 << 14  # events between two of the loop's calls to :func:`tick` (a power of two)
HEARTBEAT_SECONDS = 15.0  # a line at least this often once a run is long, whatever it is doing
WAKE_SECONDS = 0.25  # how often the heartbeat looks: a long run's first line comes this soon after AFTER_SECONDS


@dataclass
class _Report:
    """The running report: the command's label, when it began, the current stage, the last line's time."""

    label: str
    began: float
    stage: str = ""
    shown: float = -np.inf


_current: _Report | None = None


@contextmanager
def reporting(label: str) -> Iterator[None]:
    """Report the progress of the simulations run inside, as ``label`` (e.g. ``sim llm``)."""
    global _current
    outer, _current = _current, _Report(label, time.perf_counter())
    done = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(_current, done), name="commgraph-progress", daemon=True)
    beat.start()
    try:
        yield
    finally:
        done.set()
        beat.join()
        _current = outer


def _heartbeat(report: _Report, done: threading.Event) -> None:
    """Until ``done``: once the run is past :data:`AFTER_SECONDS`, say the stage is running if no
    line was printed yet, and still running whenever none was for :data:`HEARTBEAT_SECONDS`."""
    while not done.wait(min(HEARTBEAT_SECONDS, WAKE_SECONDS)):
        clock = time.perf_counter()
        if clock - report.began < AFTER_SECONDS:
            continue
        if report.shown == -np.inf:
            _say(report.stage or "working", report)
        elif clock - report.shown >= HEARTBEAT_SECONDS:
            _say(f"{report.stage or 'working'}, still running", report)


def reported(label: str) -> Callable[[Callable], Callable]:
    """A decorator: the command runs inside :func:`reporting` as ``label``."""

    def wrap(run: Callable) -> Callable:
        @functools.wraps(run)
        def reporting_run(*args, **kwargs):
            with reporting(label):
                return run(*args, **kwargs)

        return reporting_run

    return wrap


def stage(name: str) -> None:
    """A stage begins (``scheduling hermod``, ``simulating hermod``); printed once the run is long."""
    if _current is None:
        return
    _current.stage = name
    if _due(force=True):
        _say(name)


def tick(now: float, finish: np.ndarray) -> None:
    """The event loop's heartbeat: ``now`` simulated seconds reached, ``finish`` per task (NaN
    until it finishes)."""
    if _current is None or not _due(force=False):
        return
    done = finish.shape[0] - int(np.isnan(finish).sum())
    _say(f"{_current.stage}: {now:.4f} simulated s, {done:,} of {finish.shape[0]:,} tasks done")


def _due(force: bool) -> bool:
    """Whether a line may print now: past :data:`AFTER_SECONDS`, and (unless ``force``) at least
    :data:`EVERY_SECONDS` after the last line."""
    clock = time.perf_counter()
    return clock - _current.began >= AFTER_SECONDS and (force or clock - _current.shown >= EVERY_SECONDS)


def _say(text: str, report: _Report | None = None) -> None:
    """Print ``text`` on stderr with the label and the wall time so far (of ``report``, the
    current one unless given)."""
    report = report or _current
    report.shown = clock = time.perf_counter()
    print(f"{report.label}: {text} ({clock - report.began:.0f} s)", file=sys.stderr, flush=True)
