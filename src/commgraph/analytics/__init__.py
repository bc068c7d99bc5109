"""Graph analytics as vertex programs (ChattyGraph's API), one worker per part of a partition set.

Depends on :mod:`commgraph.partition` and, for several workers, :mod:`commgraph.runtime`.
"""

from commgraph.analytics.algorithms import BFS, SSSP, ConnectedComponents, PageRank
from commgraph.analytics.job import ALGORITHMS, Analysis, AnalyzeOptions, analyze, seeded_weights, symmetrized
from commgraph.analytics.program import Alone, Boundary, LocalGraph, RunStats, VertexProgram, run_program

__all__ = [
    "ALGORITHMS",
    "Alone",
    "Analysis",
    "AnalyzeOptions",
    "BFS",
    "Boundary",
    "ConnectedComponents",
    "LocalGraph",
    "PageRank",
    "RunStats",
    "SSSP",
    "VertexProgram",
    "analyze",
    "run_program",
    "seeded_weights",
    "symmetrized",
]
