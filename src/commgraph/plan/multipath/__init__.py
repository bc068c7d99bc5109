"""Multi-path selection inside a host (LEO, thesis chapter 6.2.2): which communication path each
request of a stream takes, decided online on a request-level model and priced on the flow
simulator, and bulk host -> GPU copies split over paths. The model, the selectors, the LP and the
figures are described in ``docs/multipath.md``.

- :mod:`.model`: :class:`PathTable` (the queue model) and the :class:`Selector` interface;
- :mod:`.workloads`: a request stream bound to its paths (:func:`load_workload`);
- :mod:`.selectors`: the rules (:data:`SELECTORS`) and the online run (:func:`select`);
- :mod:`.lp`: the k-step MILP (:class:`LookaheadLP`);
- :mod:`.bulk`: :func:`plan_bulk`.

Selections priced on the simulator, compared and swept over the offered rate are a study:
:mod:`commgraph.study.selectors`.
"""

from commgraph.plan.multipath.bulk import BULK_PLANNERS, BulkPart, BulkPlan, plan_bulk
from commgraph.plan.multipath.lp import LP_SECONDS, LookaheadLP
from commgraph.plan.multipath.model import PathTable, Selector, SolveStats
from commgraph.plan.multipath.selectors import (
    FAITHFUL_GREEDY,
    JITTER,
    SELECTORS,
    Selection,
    Toll,
    TollBytes,
    TollInflight,
    make_selector,
    select,
)
from commgraph.plan.multipath.workloads import Workload, kvs_paths, kvs_workload, load_workload

__all__ = [
    "BULK_PLANNERS",
    "FAITHFUL_GREEDY",
    "JITTER",
    "LP_SECONDS",
    "SELECTORS",
    "BulkPart",
    "BulkPlan",
    "LookaheadLP",
    "PathTable",
    "Selection",
    "Selector",
    "SolveStats",
    "Toll",
    "TollBytes",
    "TollInflight",
    "Workload",
    "kvs_paths",
    "kvs_workload",
    "load_workload",
    "make_selector",
    "plan_bulk",
    "select",
]
