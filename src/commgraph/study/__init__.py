"""Experiments as typed reports, above :mod:`commgraph.plan`, :mod:`commgraph.sim` and
:mod:`commgraph.workload`: the CLI and ``benchmarks/`` call the same study and render its report."""

from commgraph.study.schedulers import SchedulerComparison, check_dag_size, compare_schedulers

__all__ = ["SchedulerComparison", "check_dag_size", "compare_schedulers"]
