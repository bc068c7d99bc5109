"""Generators of what is scheduled: LLM training iterations as task DAGs with labelled coflows, and
request streams for multi-path selection (:mod:`.requests`: Poisson, traces, the key-value store)."""

from commgraph.workload.iteration import Iteration, build_iteration
from commgraph.workload.layout import Layout, Op
from commgraph.workload.models import DEFAULT_LAYOUT, GPUS, MODELS, GPUSpec, ModelSpec, gpu, model

__all__ = [
    "DEFAULT_LAYOUT",
    "GPUS",
    "GPUSpec",
    "Iteration",
    "Layout",
    "MODELS",
    "ModelSpec",
    "Op",
    "build_iteration",
    "gpu",
    "model",
]
