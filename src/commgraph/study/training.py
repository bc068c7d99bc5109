"""Training runs summarised from their metrics files (``commgraph train --metrics-out``: one
:class:`~commgraph.train.records.EpochRecord` a line, as JSON).

For each run: its epochs; the epoch time's median, minimum and maximum (rank 0's training step);
the communication wait's (rank 0 blocked on halo, feature or gradient messages), and its share of
the epochs' time, :math:`\\sum_e w_e / \\sum_e t_e`; the bytes each epoch moves by kind (the mean
over epochs, every worker's together); and, where the run recorded them, the step time predicted
before launch against the one measured (medians over epochs, and measured over predicted). A
field a run of an older commgraph did not record is None, never a zero.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from commgraph.study.coflow import Progress, report_step

BYTE_KINDS = {
    "comm_bytes": "halo",
    "allreduce_bytes": "all-reduce",
    "feature_bytes": "features",
    "local_bytes": "local features",
    "structure_bytes": "requests",
    "sampling_bytes": "sampling",
    "sync_bytes": "sync",
    "activation_bytes": "activations",
    "activation_grad_bytes": "activation gradients",
    "total_bytes": "total",
}
"""Each byte field of an epoch record, and the kind it counts."""


@dataclass(frozen=True)
class Spread:
    """A figure over a run's epochs: its median, minimum and maximum."""

    median: float
    min: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Spread | None:
        """The spread of ``values`` (None: no value)."""
        return cls(statistics.median(values), min(values), max(values)) if values else None


@dataclass(frozen=True)
class RunSummary:
    """One training run, summarised (the module's description).

    Args:
        epochs: epochs recorded.
        loss: the last epoch's loss.
        epoch_seconds: the epoch time's spread (None: not recorded).
        comm_wait_seconds: the communication wait's spread (None: not recorded).
        wait_share: the wait's share of the epochs' time (None: not recorded, or no time).
        bytes: per kind of :data:`BYTE_KINDS` a run recorded, the mean bytes an epoch moves.
        predicted_step_seconds: the median step time predicted before launch (None: not recorded).
        measured_step_seconds: the median step time measured (None: not recorded).
    """

    epochs: int
    loss: float
    epoch_seconds: Spread | None
    comm_wait_seconds: Spread | None
    wait_share: float | None
    bytes: dict[str, float]
    predicted_step_seconds: float | None
    measured_step_seconds: float | None

    @property
    def measured_over_predicted(self) -> float | None:
        """Measured step time over predicted (None: either is missing, or the prediction is 0)."""
        if not self.predicted_step_seconds or self.measured_step_seconds is None:
            return None
        return self.measured_step_seconds / self.predicted_step_seconds

    def to_dict(self) -> dict:
        """Plain data, with ``measured_over_predicted``."""
        return {**asdict(self), "measured_over_predicted": self.measured_over_predicted}


@dataclass(frozen=True)
class TrainingSummary:
    """Several runs summarised, by label (:func:`summarize_runs`)."""

    runs: dict[str, RunSummary]

    def to_dict(self) -> dict:
        """Plain data: ``runs``, each its :meth:`RunSummary.to_dict`."""
        return {"runs": {label: run.to_dict() for label, run in self.runs.items()}}


def _recorded(records: list[dict], key: str) -> list[float]:
    """``key``'s values over the epochs that recorded it."""
    return [float(r[key]) for r in records if r.get(key) is not None]


def summarize_run(records: list[dict]) -> RunSummary:
    """One run's summary from its epoch records (each a dict with at least ``epoch`` and ``loss``)."""
    epochs, waits = _recorded(records, "epoch_seconds"), _recorded(records, "comm_wait_seconds")
    timed = [r for r in records if r.get("epoch_seconds") is not None and r.get("comm_wait_seconds") is not None]
    total = sum(r["epoch_seconds"] for r in timed)
    moved = {kind: _recorded(records, key) for key, kind in BYTE_KINDS.items()}
    predicted, measured = _recorded(records, "predicted_step_seconds"), _recorded(records, "measured_step_seconds")
    return RunSummary(
        epochs=len(records),
        loss=float(records[-1]["loss"]),
        epoch_seconds=Spread.of(epochs),
        comm_wait_seconds=Spread.of(waits),
        wait_share=sum(r["comm_wait_seconds"] for r in timed) / total if total > 0 else None,
        bytes={kind: statistics.fmean(values) for kind, values in moved.items() if values and any(values)},
        predicted_step_seconds=statistics.median(predicted) if predicted else None,
        measured_step_seconds=statistics.median(measured) if measured else None,
    )


def summarize_runs(runs: dict[str, list[dict]], *, progress: Progress | None = None) -> TrainingSummary:
    """Each run of ``runs`` (label to its epoch records) summarised; ``progress`` is called with
    ``summarise LABEL`` as each is done."""
    summaries = {}
    for label, records in runs.items():
        summaries[label] = summarize_run(records)
        report_step(f"summarise {label}", progress)
    return TrainingSummary(summaries)
