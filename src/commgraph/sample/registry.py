"""The samplers by name: what ``commgraph train --sampler``, the trainer and the bridge's
``NeighborLoader`` choose from, with :func:`register_sampler` for a sampler of one's own.

A sampler turns seeds into blocks (:class:`Sampler`: ``sample(seeds, rng)``) or draws an epoch's
batches itself (:class:`EpochSampler`: ``epoch(rng)``, ClusterGCN's clusters). The registry maps a
name to a factory that makes one on a worker's structure from a :class:`SamplerSpec`, the run's
resolved options; the built-in samplers' classes load on first use, so this module, like
:mod:`commgraph.sample.options`, does not import torch.

Example::

    from commgraph.sample import NeighborSampler, register_sampler

    register_sampler("wide", lambda graph, spec: NeighborSampler(graph, [2 * f for f in spec.fanouts]))
    # commgraph train ... --sampler wide, in the process that registered it
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from commgraph.errors import SamplingError

if TYPE_CHECKING:
    from commgraph.sample.base import SampledBatch, SamplingGraph


@runtime_checkable
class Sampler(Protocol):
    """Draws a batch's blocks from its seeds; ``name`` is its registry name."""

    name: str

    def sample(self, seeds: np.ndarray, rng: np.random.Generator) -> SampledBatch: ...


@runtime_checkable
class EpochSampler(Protocol):
    """Draws an epoch's batches itself (the trainer hands it no seeds)."""

    name: str

    def epoch(self, rng: np.random.Generator) -> Iterator[SampledBatch]: ...


@dataclass(frozen=True)
class SamplerSpec:
    """A run's sampling options, resolved (every default filled in), as a factory reads them.

    Attributes:
        fanouts: neighbours per destination at each hop, the seeds' hop first (-1: all).
        layers: the model's message-passing layers (blocks per batch).
        train: this worker's training nodes (global ids).
        batch_size: seeds per batch.
        seed: the run's seed.
        feature_rate, epsilon, rule: DGS's ``N_f``, deviation and local rule.
        layer_size: FastGCN's and LADIES's nodes per layer.
        clusters, clusters_per_batch: ClusterGCN's clusters and clusters per batch.
    """

    fanouts: tuple[int, ...]
    layers: int
    train: np.ndarray = field(repr=False)
    batch_size: int
    seed: int
    feature_rate: float
    epsilon: float
    rule: str
    layer_size: int
    clusters: int | None  # None: one per batch of the worker's local nodes
    clusters_per_batch: int


Factory = Callable[["SamplingGraph", SamplerSpec], "Sampler | EpochSampler"]


@dataclass(frozen=True)
class SamplerEntry:
    """A registered sampler: its factory, whether it can sample on a machine's partitioned
    structure (``--structure partitioned``: it draws through ``graph.sample_rows``), and whether
    the bridge's ``NeighborLoader`` draws it with its own hop code, in PyG's layout (the built-in
    ``neighbor`` and ``dgs``)."""

    name: str
    make: Factory
    partitioned: bool = False
    bridge: bool = False


_REGISTRY: dict[str, SamplerEntry] = {}


class SamplerNames(Sequence):
    """The registered names, in registration order, read when asked: a parser's choices and an
    option's check see samplers registered after the import."""

    def __getitem__(self, index):
        return tuple(_REGISTRY)[index]

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __contains__(self, name) -> bool:
        return name in _REGISTRY

    def __repr__(self) -> str:
        return repr(tuple(_REGISTRY))


SAMPLERS = SamplerNames()


def register_sampler(name: str, make: Factory, *, partitioned: bool = False) -> None:
    """Make ``name`` a sampler ``--sampler`` and the trainer accept: ``make(graph, spec)`` returns
    a :class:`Sampler` or :class:`EpochSampler` on the worker's structure
    (:class:`~commgraph.sample.base.SamplingGraph`, or with ``partitioned`` a
    :class:`~commgraph.sample.partitioned.PartitionedGraph` under ``--structure partitioned``) from
    the run's :class:`SamplerSpec`. Workers started as processes of their own (``spawn``,
    torchrun) see it only where their entry point registers it too.

    Raises:
        SamplingError: an empty name or one already registered.
    """
    if not isinstance(name, str) or not name:
        raise SamplingError(f"a sampler's name is a non-empty string; got {name!r}")
    if name in _REGISTRY:
        raise SamplingError(f"sampler {name!r} is already registered: pick another name, or unregister it first")
    _REGISTRY[name] = SamplerEntry(name, make, partitioned)


def unregister_sampler(name: str) -> None:
    """Forget ``name`` (a sampler registered by :func:`register_sampler`).

    Raises:
        SamplingError: ``name`` is not registered.
    """
    sampler_entry(name)
    del _REGISTRY[name]


def sampler_entry(name: str) -> SamplerEntry:
    """The registered sampler ``name``.

    Raises:
        SamplingError: no sampler of that name; the error lists the registered ones.
    """
    entry = _REGISTRY.get(name)
    if entry is None:
        raise SamplingError(f"unknown sampler {name!r}; choose one of {', '.join(_REGISTRY)}, or register_sampler it")
    return entry


def bridge_samplers() -> tuple[str, ...]:
    """The names the bridge's ``NeighborLoader`` draws (:attr:`SamplerEntry.bridge`)."""
    return tuple(name for name, entry in _REGISTRY.items() if entry.bridge)


def make_sampler(name: str, graph: SamplingGraph, spec: SamplerSpec) -> Sampler | EpochSampler:
    """The sampler registered as ``name``, on ``graph``, from ``spec``.

    Raises:
        SamplingError: an unknown name, or a factory's result that has neither ``sample`` nor ``epoch``.
    """
    made = sampler_entry(name).make(graph, spec)
    if not isinstance(made, (Sampler, EpochSampler)):
        raise SamplingError(
            f"sampler {name!r}'s factory returned {type(made).__name__}, which has no name with sample(seeds, rng) "
            "or epoch(rng): return a Sampler or EpochSampler"
        )
    return made


def _neighbor(graph, spec: SamplerSpec):
    from commgraph.sample.neighbor import NeighborSampler

    return NeighborSampler(graph, list(spec.fanouts))


def _dgs(graph, spec: SamplerSpec):
    from commgraph.sample.dgs import DGSSampler

    return DGSSampler(graph, list(spec.fanouts), feature_rate=spec.feature_rate, epsilon=spec.epsilon, rule=spec.rule)


def _fastgcn(graph, spec: SamplerSpec):
    from commgraph.sample.layerwise import FastGCNSampler

    return FastGCNSampler(graph, [spec.layer_size] * spec.layers)


def _ladies(graph, spec: SamplerSpec):
    from commgraph.sample.layerwise import LADIESSampler

    return LADIESSampler(graph, [spec.layer_size] * spec.layers)


def _cluster(graph, spec: SamplerSpec):
    from commgraph.sample.cluster import ClusterSampler

    local = graph.local_nodes().shape[0]
    return ClusterSampler(
        graph,
        spec.layers,
        spec.train,
        num_clusters=spec.clusters or max(1, math.ceil(local / spec.batch_size)),
        clusters_per_batch=spec.clusters_per_batch,
        seed=spec.seed,
    )


_REGISTRY.update(
    (entry.name, entry)
    for entry in (
        SamplerEntry("neighbor", _neighbor, partitioned=True, bridge=True),
        SamplerEntry("fastgcn", _fastgcn),
        SamplerEntry("ladies", _ladies),
        SamplerEntry("cluster", _cluster),
        SamplerEntry("dgs", _dgs, bridge=True),
    )
)
