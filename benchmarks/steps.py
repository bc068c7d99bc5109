"""The clock of a sampled training loop, shared by both sides of a comparison (``benchmarks/protocol.py``):
it imports neither commgraph nor DGL, so the DGL environment's scripts and commgraph's bridge scripts
time their steps alike.

:func:`timed_steps` runs ``warmup`` steps unclocked, then ``steps`` clocked ones, starting a new
epoch of batches whenever one runs out. Each clocked step is split into the wait for the next batch
(the loader: sampling and the gather of its rows, for loaders that gather) and the step itself (the
forward, the loss, backward and the optimiser).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable


def side_options(
    input_name: str, fanout: str, hidden: int, switches: dict[str, str] | None = None
) -> argparse.Namespace:
    """The options every side script of a comparison takes (the driver passes the same values to
    both sides): the input file, warm-up and clocked steps, the fanout in DGL's order (the first
    layer's first), the hidden width, the batch and the seed; and the side's own ``switches``
    (``--name``: its help), each false unless given."""
    parser = argparse.ArgumentParser()
    for name, help in (switches or {}).items():
        parser.add_argument(name, action="store_true", help=help)
    parser.add_argument(input_name)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--fanout", default=fanout, help="DGL's order: the first layer's first")
    parser.add_argument("--hidden", type=int, default=hidden)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def timed_steps(epoch: Callable[[], Iterable], step: Callable[[object], int], warmup: int, steps: int) -> dict:
    """Run ``warmup + steps`` steps of ``step`` over the batches of ``epoch()``.

    Args:
        epoch: a new iterable of batches (one epoch) each call.
        step: one training step on a batch; returns the units it trained (seeds, label edges).
        warmup: the steps run before the clock starts (loader start-up, allocator, lazy shapes).
        steps: the clocked steps.

    Returns:
        dict: ``warmup``, ``steps``, ``units`` (clocked), ``seconds`` (clocked), ``rate`` (units per
        second), ``step_ms``, ``sample_ms`` (mean wait for a batch) and ``compute_ms`` (mean step).
    """
    batches, waited, computed, units, started = iter(epoch()), 0.0, 0.0, 0, None
    for index in range(warmup + steps):
        if index == warmup:
            started, waited, computed, units = time.perf_counter(), 0.0, 0.0, 0
        tick = time.perf_counter()
        batch = next(batches, None)
        if batch is None:
            batches = iter(epoch())
            batch = next(batches)
        tock = time.perf_counter()
        units += step(batch)
        waited, computed = waited + tock - tick, computed + time.perf_counter() - tock
    seconds = time.perf_counter() - started
    return {
        "warmup": warmup,
        "steps": steps,
        "units": units,
        "seconds": seconds,
        "rate": units / seconds,
        "step_ms": seconds / steps * 1e3,
        "sample_ms": waited / steps * 1e3,
        "compute_ms": computed / steps * 1e3,
    }


PHASES = ("forward", "backward", "optimizer")


def optimised(loss: Callable[[], object], optimizer, phases: list[tuple[float, float, float]]) -> None:
    """One optimiser step: ``loss()`` (the forward pass and the loss), backward, the optimiser's step;
    their seconds appended to ``phases``, one tuple a step in :data:`PHASES`' order."""
    started = time.perf_counter()
    value = loss()
    forward = time.perf_counter()
    optimizer.zero_grad()
    value.backward()
    backward = time.perf_counter()
    optimizer.step()
    phases.append((forward - started, backward - forward, time.perf_counter() - backward))


def phase_ms(phases: list[tuple[float, float, float]], warmup: int) -> dict[str, float]:
    """The mean milliseconds of each of :data:`PHASES` over the steps after the ``warmup`` first."""
    clocked = phases[warmup:]
    return {name: sum(step[k] for step in clocked) / len(clocked) * 1e3 for k, name in enumerate(PHASES)}
