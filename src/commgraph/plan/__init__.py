"""Communication planning: CommPlan (plain data), the planners of every collective, pricing.

``PLANNERS`` is the one registry: collective -> the planners that make it (``plan_allgather``,
``plan_allreduce``, ``plan_broadcast``, ``plan_bulk`` for host -> GPU copies split over paths).
Communication paths and the selectors that pick one per request (LEO) are in :mod:`.paths` and
:mod:`.multipath`. All-reduce plans also carry an executable
``AllReduceSchedule`` (``allreduce_schedule``). Pure and deterministic (numpy/scipy); depends on
topology, partition (read-only) and sim (pricing).
"""

from commgraph.plan.allgather import PLANNERS as ALLGATHER_PLANNERS
from commgraph.plan.allgather import plan_allgather
from commgraph.plan.allreduce import PLANNERS as ALLREDUCE_PLANNERS
from commgraph.plan.allreduce import (
    AllReduceSchedule,
    Tree,
    allreduce_schedule,
    choose_allreduce,
    make_allreduce,
    plan_allreduce,
)
from commgraph.plan.broadcast import PLANNERS as BROADCAST_PLANNERS
from commgraph.plan.broadcast import plan_broadcast
from commgraph.plan.model import CommPlan, Send
from commgraph.plan.multipath import BULK_PLANNERS, SELECTORS, plan_bulk
from commgraph.plan.price import price

PLANNERS = {
    "allgather": ALLGATHER_PLANNERS,
    "allreduce": ALLREDUCE_PLANNERS,
    "broadcast": BROADCAST_PLANNERS,
    "h2d": BULK_PLANNERS,
}

__all__ = [
    "ALLGATHER_PLANNERS",
    "PLANNERS",
    "SELECTORS",
    "AllReduceSchedule",
    "CommPlan",
    "Send",
    "Tree",
    "allreduce_schedule",
    "choose_allreduce",
    "make_allreduce",
    "plan_allgather",
    "plan_allreduce",
    "plan_broadcast",
    "plan_bulk",
    "price",
]
