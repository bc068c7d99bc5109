"""What the planner sees of a training run: its :class:`~commgraph.plan.memory.JobShape` (what the
memory estimate and the step time read), its first layer's choice
(:func:`~commgraph.plan.first_layer.choose_first_layer`) and its step priced
(:func:`~commgraph.plan.steptime.predict_job`). Each takes the run's
:class:`~commgraph.train.config.TrainConfig` and hands the plan its own sections, never the whole
configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from commgraph.logs import get_logger
from commgraph.nn.options import HETERO_MODELS
from commgraph.plan.choose import choose_job_allreduce
from commgraph.plan.first_layer import FirstLayerChoice, choose_first_layer, evaluation_passes
from commgraph.plan.memory import JobShape, label_classes, model_parameters
from commgraph.plan.steptime import SampledHops, predict_job
from commgraph.sample.options import hop_fanouts
from commgraph.sim.steptime import StepTime, compute_model, other_machine
from commgraph.topology import read_yaml
from commgraph.topology.compute import MODELS as COMPUTE_MODELS
from commgraph.train.sampling_options import FANOUT

if TYPE_CHECKING:
    from commgraph.partition import PartitionSet
    from commgraph.topology.model import Topology
    from commgraph.train.config import TrainConfig


log = get_logger(__name__)


def first_layer_choice(config: TrainConfig, width: int, workers: int, streamed: bool = False) -> FirstLayerChoice:
    """How layer 0's remote rows cross in the run's full-graph pass, for input features ``width``
    wide, ``workers`` workers, rows ``streamed`` from a host feature table."""
    return choose_first_layer(
        config.comm.first_layer,
        model=config.gnn.model,
        width=width,
        hidden=config.gnn.hidden,
        epochs=config.optim.epochs,
        evaluations=evaluation_passes(config.optim.epochs, config.log.eval_every),
        sampled=bool(config.sampling.sampler),
        replicate=config.comm.exchange == "replicate",
        workers=workers,
        streamed=streamed,
    )


def job_shape(config: TrainConfig, pset: PartitionSet, workers: int) -> JobShape:
    """The shape of the run's job on ``pset`` with ``workers`` workers, all on this machine (a
    configuration not yet resolved is resolved for one machine, as the launcher resolves it)."""
    sampling, gnn = config.resolved(spans_machines=False).sampling, config.gnn
    return JobShape(
        workers,
        workers,
        gnn.hidden,
        gnn.layers,
        sampling.sampler,
        sampling.batch_size,
        hop_fanouts(sampling.fanouts) if sampling.fanouts else (FANOUT,) * gnn.layers,  # no fanouts: the default
        sampling.peer_rows,
        sampling.structure if sampling.sampler == "neighbor" else "replicated",  # the others map the whole graph
        model=gnn.model,
        explainer=sampling.sampler == "dgs"
        and gnn.model not in HETERO_MODELS
        and (sampling.explain_cpu != 0 or sampling.dgs_masks_out is not None),
        explainer_process=sampling.explain_in != "worker",
        first_layer=_first_layer_mode(config, pset, workers),
        memory_budget=config.comm.memory_budget,
        eval_fanouts=sampling.eval_fanouts,
    )


def _first_layer_mode(config: TrainConfig, pset: PartitionSet, workers: int) -> str:
    """How the full-graph pass's layer 0 reads its halo rows (R-GCN: its projected rows, hidden wide)."""
    features = pset.part(0, check=False).features
    if config.comm.evaluation_first_layer is not None:  # decided by the launcher
        return config.comm.evaluation_first_layer
    if config.gnn.model in HETERO_MODELS or features is None:
        return "features"
    return first_layer_choice(config, int(features.shape[1]), workers).mode


def predicts_step_time(config: TrainConfig) -> bool:
    """Whether the step's cost model knows the run's model (:data:`~commgraph.topology.compute.MODELS`)."""
    return config.gnn.model in COMPUTE_MODELS


def step_time(
    config: TrainConfig,
    pset: PartitionSet,
    topology: Topology,
    devices: list[str],
    plan_seconds: float,
    allreduce_seconds: float | None = None,
    *,
    threads: int | None = None,
    warn: bool = True,
) -> StepTime:
    """The run's step priced on ``topology`` with the cost model of ``--cost-model`` or the
    topology's calibration; ``allreduce_seconds`` None: the gradients' all-reduce priced here
    (``--allreduce`` on the topology); ``threads`` a worker's compute threads (None: the cores
    shared by the machine's workers). A cost model from another kind of machine is warned about on
    stderr (where ``warn``)."""
    shape = job_shape(config, pset, len(devices))
    cost = None if config.log.cost_model is None else read_yaml(config.log.cost_model)
    model = compute_model(topology, cost)
    warning = other_machine(model)
    if warning is not None and warn:
        log.warning(f"commgraph: {warning}")
    if allreduce_seconds is None:
        classes = label_classes(pset)
        width = int(pset.part(0, check=False).features.shape[1])
        nbytes = 4 * model_parameters(width, shape.hidden, shape.layers, classes)
        allreduce_seconds = choose_job_allreduce(config.comm.allreduce, topology, devices, nbytes).modeled_seconds
    return predict_job(
        pset,
        shape,
        model,
        topology,
        devices,
        plan_seconds,
        allreduce_seconds,
        heads=config.gnn.heads,
        threads=threads,
        steps_cap=config.sampling.steps_per_epoch,
        hops=None if shape.sampler is None else sampled_hops(pset, shape.fanouts, shape.batch_size),
    )


HOP_BATCHES = 4  # batches drawn before launch to measure a sampled batch's size


def sampled_hops(
    pset: PartitionSet, fanouts: tuple[int, ...], batch_size: int, batches: int = HOP_BATCHES, seed: int = 0
) -> SampledHops:
    """A sampled batch's mean sizes by hop (:class:`~commgraph.plan.steptime.SampledHops`) over
    ``batches`` batches that a neighbour sampler draws with ``fanouts`` from ``batch_size`` training
    nodes of the part with the most of them, on the set's whole structure as a worker samples it."""
    from commgraph.sample.base import SamplingGraph
    from commgraph.sample.neighbor import NeighborSampler

    parts = [pset.part(k, check=False) for k in range(pset.num_parts)]
    busiest = max(range(len(parts)), key=lambda k: int(np.count_nonzero(parts[k].train_mask)))
    owned = np.asarray(parts[busiest].owned)
    train = owned[np.asarray(parts[busiest].train_mask, dtype=bool)]
    seeds_from = train if train.size else owned
    sampler = NeighborSampler(SamplingGraph.from_partition(pset, busiest), fanouts)
    rng = np.random.default_rng(seed)
    sizes = np.array(
        [
            [
                (layer.dst.shape[0], layer.src.shape[0], layer.num_edges)
                for layer in sampler.sample(
                    rng.choice(seeds_from, min(batch_size, seeds_from.size), replace=False), rng
                ).layers[::-1]
            ]
            for _ in range(batches)
        ],
        dtype=float,
    ).mean(axis=0)
    return SampledHops(*(tuple(float(v) for v in column) for column in sizes.T))
