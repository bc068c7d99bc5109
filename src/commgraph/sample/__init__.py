"""Samplers that turn a batch of seed nodes into per-layer blocks: ``neighbor`` (GraphSAGE),
``fastgcn``, ``ladies``, ``cluster`` (ClusterGCN) and ``dgs`` (thesis chapter 3), with DGS's online
explainer. Its names load on first use (:mod:`commgraph.lazy`): the samplers' options
(:mod:`commgraph.sample.options`) do not import torch."""

from commgraph.lazy import exports

__all__ = [
    "SAMPLERS",
    "ClusterSampler",
    "DGSMasks",
    "DGSSampler",
    "FastGCNSampler",
    "LADIESSampler",
    "LayerSample",
    "NeighborSampler",
    "SampledBatch",
    "SamplingGraph",
    "forward_blocks",
    "parse_fanouts",
]

__getattr__ = exports(
    __name__,
    {
        "LayerSample": "base",
        "SampledBatch": "base",
        "SamplingGraph": "base",
        "forward_blocks": "base",
        "parse_fanouts": "options",
        "SAMPLERS": "options",
        "ClusterSampler": "cluster",
        "DGSMasks": "dgs",
        "DGSSampler": "dgs",
        "FastGCNSampler": "layerwise",
        "LADIESSampler": "layerwise",
        "NeighborSampler": "neighbor",
    },
)
