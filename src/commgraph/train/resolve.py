"""A training run's ``auto`` options decided once, on the launcher, from what it knows of the job
(:class:`~commgraph.runtime.options.JobSite`: the partition set, the topology, each rank's device
on it, the device kind and each GPU's free memory); its workers receive the decided values as data
and never see ``auto``:

- ``features``: on a CPU device ``host`` (a CPU's table is host memory whatever is asked); on GPUs,
  PyTorch-Direct's rule (:func:`~commgraph.plan.features.place_features`) for the largest part's
  table against the least free memory: ``gpu`` when it fits in
  :data:`~commgraph.plan.features.HEADROOM` of it, else ``host``;
- ``allreduce``: :func:`~commgraph.plan.choose.choose_job_allreduce` for the gradient bytes of the
  run's model (built on PyTorch's ``meta`` device: shapes, no memory);
- ``first_layer``: :func:`~commgraph.train.shape.first_layer_choice` on the set's feature width
  and the job's workers, the rows streamed where the table is the GPU's host memory; ``features``
  where the run's full-graph pass has no halo rows to replace (R-GCN, HGT, the sampled evaluation).
  Sampled training's steps ship features under ``auto``: there ``first_layer`` is ``features`` and
  the rule's choice is its full-graph evaluation's (``evaluation_first_layer``);
- the job's options are the launcher's (:attr:`JobSite.options`: its plan, its topology and the
  message ``ordering``, ``ordered`` on NCCL and ``tagged`` on Gloo).

Link prediction (``--task link``) has no use for ``features`` nor ``first_layer``; it trains
PyG's own convs, and :func:`~commgraph.pyg.link_training.resolved_link_data` decides its job's
options and its ``allreduce`` with :func:`allreduce_decided`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch

from commgraph.logs import get_logger
from commgraph.nn import GNN
from commgraph.nn.options import HETERO_MODELS
from commgraph.plan.choose import choose_job_allreduce
from commgraph.plan.features import place_features
from commgraph.runtime.options import JobSite
from commgraph.train.config import CommOptions, TrainConfig, sampled_evaluation
from commgraph.train.rgcn import typed_model
from commgraph.train.shape import first_layer_choice

log = get_logger(__name__)


@dataclass(frozen=True)
class Resolved:
    """A configuration with nothing left ``auto``, and why each value was taken (one line each)."""

    config: TrainConfig
    reasons: tuple[str, ...]


def resolve_on_launcher(config: TrainConfig, site: JobSite) -> Resolved:
    """``config`` with every ``auto`` decided for the job ``site`` describes (the module's rules)."""
    config = replace(config, job=site.options)
    if config.task.task == "link":
        return Resolved(config, ())
    comm, reasons = config.comm, []
    if comm.features == "auto":
        placed = _place_features(site)
        comm = replace(comm, features="gpu" if placed.placement == "gpu" else "host")
        if site.device == "cuda":  # a CPU's table is host memory: its workers say so
            reasons.append(f"features: {placed.reason}")
    comm = allreduce_decided(comm, site, lambda: gradient_bytes(config, site))
    if comm.first_layer == "auto":
        mode, why = _first_layer(replace(config, comm=comm), site)
        if config.sampling.sampler is None:
            comm = replace(comm, first_layer=mode)
        else:  # the steps ship features; the full-graph evaluation follows the rule
            comm = replace(comm, first_layer="features", evaluation_first_layer=mode)
        reasons.append(f"first layer: {why}")
    return Resolved(replace(config, comm=comm), tuple(reasons))


def resolved_data(config: TrainConfig, site: JobSite) -> dict:
    """What each worker receives: ``config`` resolved for ``site`` (:meth:`TrainConfig.to_dict`),
    each decision's reason said once, here, when the run shows progress."""
    resolved = resolve_on_launcher(config, site)
    if config.log.progress:
        for reason in resolved.reasons:
            log.info(f"commgraph: {reason}")
    return resolved.config.to_dict()


def allreduce_decided(comm: CommOptions, site: JobSite, gradient: Callable[[], int]) -> CommOptions:
    """``comm`` with ``allreduce`` decided where it is ``auto``, for gradients of ``gradient()`` bytes."""
    if comm.allreduce != "auto":
        return comm
    return replace(comm, allreduce=choose_job_allreduce("auto", site.topology, site.devices, gradient()).name)


def _place_features(site: JobSite):
    """The placement ``auto`` gives the largest part's feature table (the module's rule)."""
    pset = site.pset
    tables = [pset.part(k, check=False).features for k in range(pset.num_parts)]
    table_bytes = max((0 if t is None else int(t.shape[0]) * int(t.shape[1]) * 4 for t in tables), default=0)
    free = None if site.free_bytes is None else min(site.free_bytes)
    return place_features("auto", site.device, table_bytes, free)


def _first_layer(config: TrainConfig, site: JobSite) -> tuple[str, str]:
    """``first_layer``'s value for the run, and why (``config``'s features already decided)."""
    features = site.pset.part(0, check=False).features
    if config.gnn.model in HETERO_MODELS or features is None or sampled_evaluation(config):
        return "features", "halo rows cross as features (the full-graph pass's layer 0 has no owner's transform)"
    on_disk = config.comm.memory_budget is not None and config.sampling.sampler is not None
    streamed = site.device == "cuda" and config.comm.features == "host" and not on_disk
    choice = first_layer_choice(config, int(features.shape[1]), site.pset.num_parts, streamed)
    return choice.mode, choice.reason


def gradient_bytes(config: TrainConfig, site: JobSite) -> int:
    """The bytes of the gradients the workers sum each step: the run's model's parameters (R-GCN's
    and HGT's but their embeddings' rows, which stay with their owners), float32."""
    pset, gnn = site.pset, config.gnn
    labels = [pset.part(k, check=False).labels for k in range(pset.num_parts)]
    classes = max(int(np.max(y, initial=-1)) for y in labels) + 1
    with torch.device("meta"):  # shapes only
        if gnn.model in HETERO_MODELS:
            typed = pset.manifest["typed"]
            widths = [int(typed["num_features"][t]) for t in typed["node_types"]]
            empty = [np.zeros(0, dtype=np.int64)] * len(widths)
            params = typed_model(config, widths, len(typed["relations"]), empty, classes).shared_parameters()
        else:
            width = int(pset.part(0, check=False).features.shape[1])
            model = GNN(gnn.model, width, gnn.hidden, classes, layers=gnn.layers, heads=gnn.heads, dropout=gnn.dropout)
            params = list(model.parameters())
    return sum(p.numel() * p.element_size() for p in params if p.requires_grad)
