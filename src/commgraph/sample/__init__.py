"""Samplers that turn a batch of seed nodes into per-layer blocks: ``neighbor`` (GraphSAGE),
``fastgcn``, ``ladies``, ``cluster`` (ClusterGCN) and ``dgs`` (thesis chapter 3), with DGS's online
explainer; :func:`register_sampler` adds one of one's own (:mod:`commgraph.sample.registry`). Its
names load on first use (:mod:`commgraph.lazy`): the samplers' options
(:mod:`commgraph.sample.options`) and registry do not import torch."""

from commgraph.lazy import exports

__all__ = [
    "SAMPLERS",
    "ClusterSampler",
    "DGSMasks",
    "DGSSampler",
    "EpochSampler",
    "FastGCNSampler",
    "LADIESSampler",
    "LayerSample",
    "NeighborSampler",
    "SampledBatch",
    "Sampler",
    "SamplerSpec",
    "SamplingGraph",
    "forward_blocks",
    "make_sampler",
    "parse_fanouts",
    "register_sampler",
    "sampler_entry",
    "unregister_sampler",
]

__getattr__ = exports(
    __name__,
    {
        "LayerSample": "base",
        "SampledBatch": "base",
        "SamplingGraph": "base",
        "forward_blocks": "base",
        "parse_fanouts": "options",
        "SAMPLERS": "registry",
        "EpochSampler": "registry",
        "Sampler": "registry",
        "SamplerSpec": "registry",
        "make_sampler": "registry",
        "register_sampler": "registry",
        "sampler_entry": "registry",
        "unregister_sampler": "registry",
        "ClusterSampler": "cluster",
        "DGSMasks": "dgs",
        "DGSSampler": "dgs",
        "FastGCNSampler": "layerwise",
        "LADIESSampler": "layerwise",
        "NeighborSampler": "neighbor",
    },
)
