"""Samplers that turn a batch of seed nodes into per-layer blocks: ``neighbor`` (GraphSAGE),
``fastgcn``, ``ladies``, ``cluster`` (ClusterGCN) and ``dgs`` (thesis chapter 3), with DGS's online
explainer."""

from commgraph.sample.base import (LayerSample, SampledBatch, SamplingGraph, forward_blocks,
                                   parse_fanouts)
from commgraph.sample.cluster import ClusterSampler
from commgraph.sample.dgs import DGSMasks, DGSSampler
from commgraph.sample.layerwise import FastGCNSampler, LADIESSampler
from commgraph.sample.neighbor import NeighborSampler

SAMPLERS = ("neighbor", "fastgcn", "ladies", "cluster", "dgs")

__all__ = [
    "SAMPLERS", "ClusterSampler", "DGSMasks", "DGSSampler", "FastGCNSampler", "LADIESSampler", "LayerSample",
    "NeighborSampler", "SampledBatch", "SamplingGraph", "forward_blocks", "parse_fanouts",
]
