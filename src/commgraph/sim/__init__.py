"""Flow-level network simulator: prices task DAGs (and, later, CommPlans) on any Topology."""

from commgraph.sim.dag import Compute, Transfer, check_dag, read_dag
from commgraph.sim.engine import SimResult, simulate

__all__ = ["Compute", "SimResult", "Transfer", "check_dag", "read_dag", "simulate"]
