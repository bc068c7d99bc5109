r"""A training step's time, priced before it runs: a compute cost model of the layers beside the
simulator's price of the step's communication, as DGCL prices a step (its Fig. 10: modelled
against measured time).

A step's seconds on the busiest worker are five parts:

.. math::
    t = t_\mathrm{compute} + t_\mathrm{sample} + t_\mathrm{fetch} + t_\mathrm{halo} + t_\mathrm{allreduce}

- **compute**: each layer :math:`l` aggregates :math:`E_l` edges at width :math:`a_l` and
  transforms :math:`R_l` rows from width :math:`w_l` to :math:`o_l`; forward and backward, for
  model :math:`m` with :math:`L` layers,

  .. math::
      t_\mathrm{compute} = c^\mathrm{step}_m + L\, c^\mathrm{layer}_m
          + \frac{\sum_l (c^\mathrm{edge}_m E_l a_l + c^\mathrm{row}_m R_l w_l o_l)}{s(T)}

  where :math:`c^\mathrm{step}_m` and :math:`c^\mathrm{layer}_m` are the fixed costs of a step (its
  loss, autograd's start, the optimiser's step) and of a layer (its operators' dispatch) whatever
  their size, and :math:`s(T) = 1 + (T - 1) e` is the speed-up of :math:`T` threads a worker at
  parallel efficiency :math:`e` (the fixed costs are one thread's: Python and dispatch do not
  spread over threads);
- **sampling**: :math:`c^\mathrm{batch} + c^\mathrm{sample} \cdot` the batch's sampled edges;
- **feature fetch**: :math:`c^\mathrm{row} N + c^\mathrm{byte} B` for the batch's :math:`N` input
  rows of :math:`B` bytes in all (a narrow row costs its index's work, a wide one its bytes), and
  on several workers the step's request round: :math:`k` collectives (every worker tells every
  other what it asks) of :math:`t_\mathrm{coll}` each, the calibrated cost of one small collective
  across the workers (``calibrated.collective_us``, :data:`DEFAULT_COLLECTIVE_S` where it was not
  measured), whatever bytes they carry;
- **halo exchange** and **all-reduce**: the simulator's prices on the job's plan and topology
  (:func:`~commgraph.plan.choose.choose_allgather`, :func:`~commgraph.plan.choose.choose_job_allreduce`),
  given here in seconds.

A machine's :math:`W` one-thread workers share its :math:`C` cores, which slow one another when
busy together (:math:`\rho`, ``corun``, measured: each of :math:`C` workers computing at once
takes :math:`\rho` times one alone): compute, sampling and the rows' reads are each multiplied by

.. math::
    \kappa(W) = 1 + (\rho - 1)\frac{W - 1}{C - 1} \quad (W \le C), \qquad
    \kappa(W) = \rho \frac{W}{C} \quad (W > C: \text{they take turns})

(:func:`~commgraph.topology.compute.contention`). An epoch is the step times the
steps it runs. The coefficients (:class:`ComputeModel`) are
measured by ``commgraph topo calibrate`` and kept in the topology YAML it writes
(``calibrated.compute``); a topology without them gets :data:`DEFAULTS`, and the prediction says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from commgraph.topology.compute import ComputeModel, machine_kind
from commgraph.topology.model import Topology

DEFAULT_COLLECTIVE_S = 1e-4  # one small Gloo collective between the processes of one machine


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
        sampled: whether a sampler draws each step's batch (False: full-graph).
        sampled_edges: edges the sampler draws.
        gathered_bytes: bytes of input rows gathered into the batch's table.
        gathered_rows: the rows those bytes make.
        threads: compute threads per worker.
        steps: steps in an epoch.
        contention: how many times slower the busiest machine's workers compute than one alone
            (:func:`~commgraph.topology.compute.contention`), at least 1.
        collectives: the collectives of the step's request round, per worker (0: one worker, or
            no sampled batch to fetch).
    """

    model: str
    layers: tuple[LayerWork, ...]
    sampled: bool = False
    sampled_edges: float = 0.0
    gathered_bytes: float = 0.0
    gathered_rows: float = 0.0
    threads: int = 1
    steps: int = 1
    contention: float = 1.0
    collectives: int = 0


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


def compute_seconds(work: StepWork, model: ComputeModel) -> float:
    """The compute of ``work``'s step under ``model`` (the module's second formula)."""
    edges, rows = work_terms(work.layers)
    fixed = model.step_s[work.model] + len(work.layers) * model.layer_s[work.model]
    return fixed + (model.edge_s[work.model] * edges + model.row_s[work.model] * rows) / model.speedup(work.threads)


def sampling_seconds(work: StepWork, model: ComputeModel) -> float:
    """The sampler's seconds for ``work``'s batch under ``model`` (0: full-graph)."""
    return model.sample_batch_s + model.sample_edge_s * work.sampled_edges if work.sampled else 0.0


def work_terms(layers: tuple[LayerWork, ...]) -> tuple[float, float]:
    """The layers' edge term :math:`\\sum_l E_l a_l` and row term :math:`\\sum_l R_l w_l o_l`."""
    edges = sum(layer.edges * layer.aggregated for layer in layers)
    rows = sum(layer.rows * layer.width_in * layer.width_out for layer in layers)
    return float(edges), float(rows)


def predict_step(
    work: StepWork,
    model: ComputeModel,
    halo_seconds: float,
    allreduce_seconds: float,
    collective_seconds: float | None = None,
) -> StepTime:
    """``work``'s step priced: its compute, sampling and fetch by ``model``, its request round's
    collectives at ``collective_seconds`` each (None: not calibrated, :data:`DEFAULT_COLLECTIVE_S`,
    named among the defaults), its halo exchange and all-reduce as the simulator priced them."""
    share = work.contention
    defaults = default_figures(model)
    if collective_seconds is None:
        collective_seconds = DEFAULT_COLLECTIVE_S
        defaults += ("collective latency",) if work.collectives else ()
    reads = model.gather_row_s * work.gathered_rows + model.gather_byte_s * work.gathered_bytes
    return StepTime(
        compute=share * compute_seconds(work, model),
        sampling=share * sampling_seconds(work, model),
        feature_fetch=share * reads + work.collectives * collective_seconds,
        halo_exchange=halo_seconds,
        allreduce=allreduce_seconds,
        steps=work.steps,
        defaults=defaults,
    )


def default_figures(model: ComputeModel) -> tuple[str, ...]:
    """Which of the step's figures come from :data:`DEFAULTS` rather than a calibration."""
    return ("compute", "sampling", "feature fetch") if model.is_default else ()


def collective_seconds(topology: Topology) -> float | None:
    """One small collective across ``topology``'s workers as its calibration measured it (None: not measured)."""
    calibrated = topology.calibrated
    return None if calibrated is None or calibrated.collective_us is None else calibrated.collective_us * 1e-6


def threads_per_worker(machine_workers: int, cores: int, threads: int | None = None) -> int:
    """A worker's compute threads: ``threads`` when given, else the machine's ``cores`` shared by its workers."""
    return threads if threads is not None else max(1, cores // max(machine_workers, 1))


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
