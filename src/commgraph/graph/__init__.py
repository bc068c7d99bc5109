"""Graphs: the CSR model, loaders for real formats, the named-dataset registry and cache, synthetic
generators.

Depends on numpy, scipy and numba only (torch just inside :mod:`commgraph.graph.pyg`).
"""

from commgraph.graph.build import from_edges, split_masks
from commgraph.graph.core import Graph
from commgraph.graph.datasets import load_dataset
from commgraph.graph.hetero import HeteroGraph, HomogeneousView, Relation
from commgraph.graph.hetero_synthetic import mag_shaped, movielens_shaped
from commgraph.graph.npz import load_npz, save_npz
from commgraph.graph.ogb import load_ogb, load_ogb_hetero
from commgraph.graph.planetoid import load_planetoid
from commgraph.graph.pyg import from_pyg, to_pyg
from commgraph.graph.registry import REGISTRY
from commgraph.graph.resolve import BUNDLED, FORMATS, GENERATORS, load_graph
from commgraph.graph.snap import load_snap
from commgraph.graph.synthetic import rmat, sbm

__all__ = [
    "BUNDLED",
    "FORMATS",
    "GENERATORS",
    "Graph",
    "HeteroGraph",
    "HomogeneousView",
    "Relation",
    "REGISTRY",
    "from_edges",
    "from_pyg",
    "load_dataset",
    "load_graph",
    "load_npz",
    "load_ogb",
    "load_ogb_hetero",
    "load_planetoid",
    "load_snap",
    "mag_shaped",
    "movielens_shaped",
    "rmat",
    "save_npz",
    "sbm",
    "split_masks",
    "to_pyg",
]
