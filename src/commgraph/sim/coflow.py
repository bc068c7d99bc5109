"""Coflows (Chowdhury & Stoica, HotNets'12): named groups of a DAG's transfers that finish together,
labelled with what a coflow scheduler orders them by. For LLM training these are Hermod's three model
factors (thesis-dgs-g3-hermod-leo, chapter 5): microbatch ID, coflow type and layer ID."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commgraph.errors import SimulationError
from commgraph.sim.dag import Task, Transfer

KINDS = ("tp", "pp", "dp", "ep")


@dataclass(frozen=True)
class Coflow:
    """``flows`` are positions of this coflow's transfers in the task list; ``iteration`` counts
    training iterations from 0 when a DAG holds several."""

    id: str
    kind: str
    microbatch: int
    layer: int
    flows: tuple[int, ...]
    iteration: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SimulationError(f"coflow {self.id!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if not self.flows:
            raise SimulationError(f"coflow {self.id!r} has no flows")


def check_coflows(tasks: list[Task], coflows: list[Coflow]) -> None:
    """Every coflow names transfers, and no transfer is in two coflows."""
    owner = np.full(len(tasks), -1, dtype=np.int64)
    for c, coflow in enumerate(coflows):
        flows = np.asarray(coflow.flows, dtype=np.int64)
        if flows.min() < 0 or flows.max() >= len(tasks):
            raise SimulationError(f"coflow {coflow.id!r} names a task outside the task list")
        if (owner[flows] >= 0).any():
            raise SimulationError(f"coflow {coflow.id!r} shares a transfer with another coflow")
        if not all(isinstance(tasks[i], Transfer) for i in coflow.flows):
            raise SimulationError(f"coflow {coflow.id!r} names a task that is not a transfer")
        owner[flows] = c


def coflow_times(start: np.ndarray, finish: np.ndarray, coflows: list[Coflow]) -> tuple[np.ndarray, np.ndarray]:
    """Per coflow, when its first flow started and its last flow finished."""
    if not coflows:
        return np.empty(0), np.empty(0)
    lengths = np.array([len(c.flows) for c in coflows])
    flat = np.concatenate([np.asarray(c.flows, dtype=np.int64) for c in coflows])
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.minimum.reduceat(start[flat], offsets), np.maximum.reduceat(finish[flat], offsets)
