"""A step's compute cost model as plain, validated data: the coefficients ``commgraph topo
calibrate`` measures on a machine and keeps in the topology YAML it writes (``calibrated.compute``),
which :mod:`commgraph.sim.steptime` prices a step with."""

from __future__ import annotations

import math
import os
import platform
from dataclasses import asdict, dataclass, field

from commgraph.errors import TopologyError

MODELS = ("gcn", "sage", "gat", "gin")
# Defaults: one thread of a 2020s x86 server core (seconds per edge and column aggregated, per
# multiply-add of a transform, per layer and per step whatever their size, per sampled edge and per
# batch sampled, per row and per byte gathered), forward and backward.
DEFAULT_EDGE_S = {"gcn": 4e-9, "sage": 4e-9, "gat": 1.2e-8, "gin": 4e-9}
DEFAULT_ROW_S = {"gcn": 6e-11, "sage": 1.2e-10, "gat": 8e-11, "gin": 1.2e-10}
DEFAULT_LAYER_S = {"gcn": 3e-4, "sage": 3e-4, "gat": 6e-4, "gin": 3e-4}
DEFAULT_STEP_S = {"gcn": 1e-3, "sage": 1e-3, "gat": 1e-3, "gin": 1e-3}
DEFAULT_SAMPLE_EDGE_S = 5e-8
DEFAULT_SAMPLE_BATCH_S = 2e-4
DEFAULT_GATHER_BYTE_S = 2e-10
DEFAULT_GATHER_ROW_S = 5e-8
DEFAULT_EFFICIENCY = 0.7
DEFAULT_CORUN = 1.0  # each of a machine's cores as fast with every core busy as alone
REFUSED_ERROR = 0.5  # a probe's fit worse than this is refused (topo calibrate --force writes it)


def machine_kind() -> str:
    """This machine's kind as a calibration names it: its architecture and CPU model (``/proc/cpuinfo``)."""
    model = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{platform.machine()} {model}"


@dataclass(frozen=True)
class ComputeModel:
    """The compute coefficients of a step (:mod:`commgraph.sim.steptime` gives the formula).

    Args:
        edge_s: seconds per edge and column aggregated, by model (forward and backward, one thread).
        row_s: seconds per multiply-add of a layer's transform, by model.
        layer_s: seconds each layer costs whatever its size (its operators' dispatch, forward and
            backward), by model.
        step_s: seconds each step costs whatever its size (the loss, autograd's start, the
            optimiser's step), by model.
        sample_edge_s: seconds per sampled edge.
        sample_batch_s: seconds each sampled batch costs whatever its size.
        gather_byte_s: seconds per byte of feature rows gathered into a batch's table.
        gather_row_s: seconds per row gathered, whatever its width (the index's own work).
        efficiency: parallel efficiency of a worker's threads, in ``(0, 1]``.
        corun: how many times slower each of ``cores`` one-thread workers computes when all of them
            compute at once than one alone (1: the cores do not slow one another), at least 1.
        machine: the machine kind it was measured on (:func:`machine_kind`; empty: the defaults).
        cores: the cores of that machine, which its workers share (0: this machine's count).
        errors: each probe's worst relative error of the fit (``gcn``, ..., ``sample``, ``gather``).
    """

    edge_s: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_EDGE_S))
    row_s: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_ROW_S))
    layer_s: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_LAYER_S))
    step_s: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_STEP_S))
    sample_edge_s: float = DEFAULT_SAMPLE_EDGE_S
    sample_batch_s: float = DEFAULT_SAMPLE_BATCH_S
    gather_byte_s: float = DEFAULT_GATHER_BYTE_S
    gather_row_s: float = DEFAULT_GATHER_ROW_S
    efficiency: float = DEFAULT_EFFICIENCY
    corun: float = DEFAULT_CORUN
    machine: str = ""
    cores: int = 0
    errors: dict[str, float] = field(default_factory=dict)

    @property
    def is_default(self) -> bool:
        return not self.machine

    def to_dict(self) -> dict:
        """Plain data, as the YAML file's ``calibrated.compute`` holds it."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data, where: str = "calibrated.compute") -> ComputeModel:
        """The model ``data`` describes; a wrong field raises :class:`TopologyError` naming it."""
        if not isinstance(data, dict):
            raise TopologyError(f"{where} must be a mapping, got {data!r}")
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise TopologyError(f"{where}: unknown field(s) {unknown}; expected {list(cls.__dataclass_fields__)}")
        model = cls(**data)
        for name in ("edge_s", "row_s", "layer_s", "step_s"):
            table = getattr(model, name)
            if (
                not isinstance(table, dict)
                or sorted(table) != sorted(MODELS)
                or not all(_non_negative(v) for v in table.values())
            ):
                raise TopologyError(
                    f"{where}.{name} must map each of {', '.join(MODELS)} to seconds >= 0, got {table!r}"
                )
        for name in ("sample_edge_s", "sample_batch_s", "gather_byte_s", "gather_row_s"):
            if not _non_negative(getattr(model, name)):
                raise TopologyError(f"{where}.{name} must be seconds >= 0, got {getattr(model, name)!r}")
        if not (_non_negative(model.efficiency) and model.efficiency > 0) or model.efficiency > 1:
            raise TopologyError(f"{where}.efficiency must be in (0, 1], got {model.efficiency!r}")
        if not (_non_negative(model.corun) and model.corun >= 1):
            raise TopologyError(f"{where}.corun must be a slowdown >= 1, got {model.corun!r}")
        if not isinstance(model.cores, int) or isinstance(model.cores, bool) or model.cores < 0:
            raise TopologyError(f"{where}.cores must be a whole number of cores >= 0, got {model.cores!r}")
        if not isinstance(model.machine, str) or not isinstance(model.errors, dict):
            raise TopologyError(f"{where}: machine must be a string and errors a mapping")
        return model

    def speedup(self, threads: int) -> float:
        """How much faster ``threads`` threads of one worker compute than one."""
        return 1 + (max(threads, 1) - 1) * self.efficiency

    def machine_cores(self) -> int:
        """The cores the machine's workers share: the calibrated machine's, else this one's."""
        return self.cores or os.cpu_count() or 1

    def worst_probe(self) -> tuple[str, float] | None:
        """The probe whose fit is worst, with its error (None: no errors recorded)."""
        return max(self.errors.items(), key=lambda item: item[1]) if self.errors else None


def contention(workers: int, cores: int, corun: float = DEFAULT_CORUN) -> float:
    """How many times slower each of ``workers`` one-thread workers computes on a machine of
    ``cores`` cores than one alone, where ``cores`` busy at once slow one another ``corun`` times
    (:attr:`ComputeModel.corun`): up to the cores, from 1 to ``corun`` in proportion to the other
    busy cores; beyond them, ``corun`` times the workers per core (they take turns)."""
    workers, cores = max(workers, 1), max(cores, 1)
    if workers > cores:
        return corun * workers / cores
    return 1.0 if cores == 1 else 1 + (corun - 1) * (workers - 1) / (cores - 1)


def _non_negative(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
