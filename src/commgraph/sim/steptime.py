r"""A training step's time, priced before it runs: a compute cost model of the layers beside the
simulator's price of the step's communication, as DGCL prices a step (its Fig. 10: modelled
against measured time).

A step's seconds on the busiest worker are five parts:

.. math::
    t = t_\mathrm{compute} + t_\mathrm{sample} + t_\mathrm{fetch} + t_\mathrm{halo} + t_\mathrm{allreduce}

- **compute**: each layer :math:`l` aggregates :math:`E_l` edges at width :math:`a_l` and
  transforms :math:`R_l` rows from width :math:`w_l` to :math:`o_l`; forward and backward,
  :math:`\sum_l (c^\mathrm{edge}_m E_l a_l + c^\mathrm{row}_m R_l w_l o_l) / s(T)` for model
  :math:`m`, where :math:`s(T) = 1 + (T - 1) e` is the speed-up of :math:`T` threads a worker at
  parallel efficiency :math:`e`;
- **sampling**: :math:`c^\mathrm{sample} \cdot` the batch's sampled edges;
- **feature fetch**: :math:`c^\mathrm{gather} \cdot` the bytes of the batch's input rows;
- **halo exchange** and **all-reduce**: the simulator's prices on the job's plan and topology
  (:func:`~commgraph.plan.choose.choose_allgather`, :func:`~commgraph.plan.choose.choose_job_allreduce`),
  given here in seconds.

An epoch is the step times the steps it runs. The coefficients (:class:`ComputeModel`) are
measured by ``commgraph topo calibrate`` and kept in the topology YAML it writes
(``calibrated.compute``); a topology without them gets :data:`DEFAULTS`, and the prediction says so.
"""

from __future__ import annotations

import math
import os
import platform
from dataclasses import asdict, dataclass, field

from commgraph.errors import TopologyError
from commgraph.topology.model import Topology

MODELS = ("gcn", "sage", "gat", "gin")
# Defaults: one thread of a 2020s x86 server core (seconds per edge and column aggregated, per
# multiply-add of a transform, per sampled edge, per byte gathered), forward and backward.
DEFAULT_EDGE_S = {"gcn": 4e-9, "sage": 4e-9, "gat": 1.2e-8, "gin": 4e-9}
DEFAULT_ROW_S = {"gcn": 6e-11, "sage": 1.2e-10, "gat": 8e-11, "gin": 1.2e-10}
DEFAULT_SAMPLE_EDGE_S = 5e-8
DEFAULT_GATHER_BYTE_S = 2e-10
DEFAULT_EFFICIENCY = 0.7
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
    """The compute coefficients of a step (see the module's description).

    Args:
        edge_s: seconds per edge and column aggregated, by model (forward and backward, one thread).
        row_s: seconds per multiply-add of a layer's transform, by model.
        sample_edge_s: seconds per sampled edge.
        gather_byte_s: seconds per byte of feature rows gathered into a batch's table.
        efficiency: parallel efficiency of a worker's threads, in ``(0, 1]``.
        machine: the machine kind it was measured on (:func:`machine_kind`; empty: the defaults).
        errors: each probe's worst relative error of the fit (``gcn``, ..., ``sample``, ``gather``).
    """

    edge_s: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_EDGE_S))
    row_s: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_ROW_S))
    sample_edge_s: float = DEFAULT_SAMPLE_EDGE_S
    gather_byte_s: float = DEFAULT_GATHER_BYTE_S
    efficiency: float = DEFAULT_EFFICIENCY
    machine: str = ""
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
        for name in ("edge_s", "row_s"):
            table = getattr(model, name)
            if (
                not isinstance(table, dict)
                or sorted(table) != sorted(MODELS)
                or not all(_positive(v) for v in table.values())
            ):
                raise TopologyError(
                    f"{where}.{name} must map each of {', '.join(MODELS)} to seconds > 0, got {table!r}"
                )
        for name in ("sample_edge_s", "gather_byte_s"):
            if not _positive(getattr(model, name)):
                raise TopologyError(f"{where}.{name} must be seconds > 0, got {getattr(model, name)!r}")
        if not _positive(model.efficiency) or model.efficiency > 1:
            raise TopologyError(f"{where}.efficiency must be in (0, 1], got {model.efficiency!r}")
        if not isinstance(model.machine, str) or not isinstance(model.errors, dict):
            raise TopologyError(f"{where}: machine must be a string and errors a mapping")
        return model

    def speedup(self, threads: int) -> float:
        """How much faster ``threads`` threads of one worker compute than one."""
        return 1 + (max(threads, 1) - 1) * self.efficiency

    def worst_probe(self) -> tuple[str, float] | None:
        """The probe whose fit is worst, with its error (None: no errors recorded)."""
        return max(self.errors.items(), key=lambda item: item[1]) if self.errors else None


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class LayerWork:
    """One layer's work on the busiest worker: ``edges`` aggregated at width ``aggregated``, and
    ``rows`` transformed from ``width_in`` to ``width_out``."""

    edges: float
    aggregated: int
    rows: float
    width_in: int
    width_out: int


@dataclass(frozen=True)
class StepWork:
    """What one step does on the busiest worker, beside its communication.

    Args:
        model: the GNN kind.
        layers: each layer's work, input layer first.
        sampled_edges: edges the sampler draws (0: full-graph).
        gathered_bytes: bytes of input rows gathered into the batch's table.
        threads: compute threads per worker.
        steps: steps in an epoch.
    """

    model: str
    layers: tuple[LayerWork, ...]
    sampled_edges: float = 0.0
    gathered_bytes: float = 0.0
    threads: int = 1
    steps: int = 1


@dataclass(frozen=True)
class StepTime:
    """A step's predicted seconds by part, and an epoch's; ``defaults`` names the coefficients
    that are defaults (the topology has no calibration of them)."""

    compute: float
    sampling: float
    feature_fetch: float
    halo_exchange: float
    allreduce: float
    steps: int
    defaults: tuple[str, ...] = ()

    @property
    def step_seconds(self) -> float:
        return self.compute + self.sampling + self.feature_fetch + self.halo_exchange + self.allreduce

    @property
    def epoch_seconds(self) -> float:
        return self.step_seconds * self.steps

    def to_dict(self) -> dict:
        """The prediction as JSON-ready data (``--dry-run --json``'s ``step_time``)."""
        return {
            "step_seconds": self.step_seconds,
            "epoch_seconds": self.epoch_seconds,
            "steps_per_epoch": self.steps,
            "compute_seconds": self.compute,
            "sampling_seconds": self.sampling,
            "feature_fetch_seconds": self.feature_fetch,
            "halo_exchange_seconds": self.halo_exchange,
            "allreduce_seconds": self.allreduce,
            "defaults": list(self.defaults),
        }

    def lines(self) -> list[str]:
        """The prediction as a few readable lines."""
        parts = ", ".join(
            f"{name} {seconds * 1e3:.3f}"
            for name, seconds in (
                ("compute", self.compute),
                ("sampling", self.sampling),
                ("feature fetch", self.feature_fetch),
                ("halo exchange", self.halo_exchange),
                ("all-reduce", self.allreduce),
            )
        )
        lines = [
            f"step time estimate: {self.step_seconds * 1e3:.2f} ms a step, {self.epoch_seconds:.3f} s an epoch "
            f"({self.steps} step(s))",
            f"  each step (ms): {parts}",
        ]
        if self.defaults:
            lines.append(
                f"  defaults, not measured here: {', '.join(self.defaults)} "
                "(run commgraph topo calibrate --out FILE.yaml and pass --topology FILE.yaml or --cost-model FILE.yaml)"
            )
        return lines


def compute_seconds(work: StepWork, model: ComputeModel) -> float:
    """The compute of ``work``'s step under ``model`` (the module's first formula)."""
    edges, rows = work_terms(work.layers)
    return (model.edge_s[work.model] * edges + model.row_s[work.model] * rows) / model.speedup(work.threads)


def work_terms(layers: tuple[LayerWork, ...]) -> tuple[float, float]:
    """The layers' edge term :math:`\\sum_l E_l a_l` and row term :math:`\\sum_l R_l w_l o_l`."""
    edges = sum(layer.edges * layer.aggregated for layer in layers)
    rows = sum(layer.rows * layer.width_in * layer.width_out for layer in layers)
    return float(edges), float(rows)


def predict_step(work: StepWork, model: ComputeModel, halo_seconds: float, allreduce_seconds: float) -> StepTime:
    """``work``'s step priced: its compute, sampling and fetch by ``model``, its halo exchange and
    all-reduce as the simulator priced them."""
    return StepTime(
        compute=compute_seconds(work, model),
        sampling=model.sample_edge_s * work.sampled_edges,
        feature_fetch=model.gather_byte_s * work.gathered_bytes,
        halo_exchange=halo_seconds,
        allreduce=allreduce_seconds,
        steps=work.steps,
        defaults=default_figures(model),
    )


def default_figures(model: ComputeModel) -> tuple[str, ...]:
    """Which of the step's figures come from :data:`DEFAULTS` rather than a calibration."""
    return ("compute", "sampling", "feature fetch") if model.is_default else ()


def threads_per_worker(machine_workers: int, threads: int | None = None) -> int:
    """A worker's compute threads: ``threads`` when given, else the cores shared by the machine's workers."""
    return threads if threads is not None else max(1, (os.cpu_count() or 1) // max(machine_workers, 1))


DEFAULTS = ComputeModel()


def compute_model(topology: Topology, cost_model: Topology | None = None) -> ComputeModel:
    """The cost model a job is priced with: ``cost_model``'s calibration (``--cost-model``), else
    ``topology``'s, else :data:`DEFAULTS`."""
    for source in (cost_model, topology):
        if source is not None and source.calibrated is not None and source.calibrated.compute is not None:
            return ComputeModel.from_dict(source.calibrated.compute)
    return DEFAULTS


def other_machine(model: ComputeModel) -> str | None:
    """A warning when ``model`` was measured on another kind of machine than this one (None: the same, or defaults)."""
    here = machine_kind()
    if model.is_default or model.machine == here:
        return None
    return (
        f"warning: the compute cost model was calibrated on {model.machine!r}, not this machine ({here!r}): "
        "its compute figures are that machine's (run commgraph topo calibrate here to measure this one)"
    )
