"""Communication planning: CommPlan (plain data), all-gather and all-reduce planners, pricing.

Pure and deterministic (numpy/scipy); depends on topology, partition (read-only) and sim (pricing).
"""

from commgraph.plan.allgather import PLANNERS as ALLGATHER_PLANNERS
from commgraph.plan.allgather import plan_allgather
from commgraph.plan.model import CommPlan, Send
from commgraph.plan.price import price

__all__ = ["ALLGATHER_PLANNERS", "CommPlan", "Send", "plan_allgather", "price"]
