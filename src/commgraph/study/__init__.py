"""Experiments as typed reports, above :mod:`commgraph.plan`, :mod:`commgraph.sim` and
:mod:`commgraph.workload`: the CLI and ``benchmarks/`` call the same study and render its report.

- :mod:`.schedulers`: an LLM iteration under each coflow scheduler against the oracle, the link
  bound and the floor (:func:`compare_schedulers`); :mod:`.coflow`: one scheduler's run and the bounds;
- :mod:`.selectors`: multi-path selectors compared on one workload (:func:`compare_selectors`) and
  swept over the offered rate (:func:`sweep_selectors`);
- :mod:`.plans`: planners compared on one collective and topology, priced beside the bounds, with
  the one ``auto`` takes (:func:`compare_halo`, :func:`compare_allreduce`, :func:`compare_collective`,
  :func:`compare_broadcast`);
- :mod:`.training`: training runs summarised from their metrics files (:func:`summarize_runs`);
- :mod:`.plot` and :mod:`.coflow_plot`: their pictures (and a plan's traffic), and traces.

Each study takes an optional ``progress`` callback, called with each step's label as it ends.
"""

from commgraph.study.coflow import Outcome, Progress, run_schedule
from commgraph.study.plans import (
    PlanComparison,
    compare_allreduce,
    compare_broadcast,
    compare_collective,
    compare_halo,
)
from commgraph.study.schedulers import SchedulerComparison, check_dag_size, compare_schedulers
from commgraph.study.selectors import SelectorComparison, SelectorSweep, compare_selectors, sweep_selectors
from commgraph.study.training import RunSummary, TrainingSummary, summarize_runs

__all__ = [
    "Outcome",
    "PlanComparison",
    "Progress",
    "RunSummary",
    "SchedulerComparison",
    "SelectorComparison",
    "SelectorSweep",
    "TrainingSummary",
    "check_dag_size",
    "compare_allreduce",
    "compare_broadcast",
    "compare_collective",
    "compare_halo",
    "compare_schedulers",
    "compare_selectors",
    "run_schedule",
    "summarize_runs",
    "sweep_selectors",
]
