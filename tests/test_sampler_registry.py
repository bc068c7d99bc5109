"""The sampler registry: one source of the names for ``--sampler``, the trainer and the bridge's
loader; a sampler registered here is trained with by name."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch.distributed as dist

from commgraph.errors import BridgeError, SamplingError, TrainingError
from commgraph.graph import load_graph
from commgraph.partition import partition_graph, partition_metrics, write_partition_set
from commgraph.pyg.loader import check_batching
from commgraph.runtime import join
from commgraph.sample import (
    SAMPLERS,
    ClusterSampler,
    EpochSampler,
    NeighborSampler,
    Sampler,
    SamplingGraph,
    make_sampler,
    register_sampler,
    sampler_entry,
    unregister_sampler,
)
from commgraph.train import TrainConfig, train_worker
from commgraph.train.minibatch import sampler_spec

BUILT_IN = ("neighbor", "fastgcn", "ladies", "cluster", "dgs")


class CountingSampler(NeighborSampler):
    """GraphSAGE's sampler that counts the batches it drew."""

    name = "counting"
    drawn = 0

    def sample(self, seeds, rng):
        CountingSampler.drawn += 1
        return super().sample(seeds, rng)


@pytest.fixture
def counting():
    register_sampler("counting", lambda graph, spec: CountingSampler(graph, list(spec.fanouts)))
    CountingSampler.drawn = 0
    yield
    unregister_sampler("counting")


def test_an_unknown_name_is_refused_naming_every_registered_sampler():
    with pytest.raises(SamplingError) as error:
        sampler_entry("graphsaint")
    assert "'graphsaint'" in str(error.value)
    assert "choose one of neighbor, fastgcn, ladies, cluster, dgs" in str(error.value)
    assert tuple(SAMPLERS) == BUILT_IN


def test_a_name_is_registered_once():
    with pytest.raises(SamplingError, match="already registered"):
        register_sampler("neighbor", lambda graph, spec: None)
    with pytest.raises(SamplingError, match="non-empty string"):
        register_sampler("", lambda graph, spec: None)


def test_a_factory_must_return_a_sampler(counting):
    register_sampler("nothing", lambda graph, spec: object())
    try:
        graph = SamplingGraph.from_graph(load_graph("cora"))
        config = TrainConfig.build(sampler="neighbor")
        with pytest.raises(SamplingError, match="factory returned object"):
            make_sampler("nothing", graph, sampler_spec(config, np.arange(10)))
    finally:
        unregister_sampler("nothing")


def test_the_built_in_samplers_are_made_by_name_with_the_run_s_options():
    graph = SamplingGraph.from_graph(load_graph("cora"))
    train = np.arange(140)
    for name in BUILT_IN:
        config = TrainConfig.build(sampler=name, layers=2, **({"clusters": 4} if name == "cluster" else {}))
        made = make_sampler(name, graph, sampler_spec(config, train))
        assert made.name == name
        assert isinstance(made, EpochSampler if name == "cluster" else Sampler)
    cluster = make_sampler("cluster", graph, sampler_spec(TrainConfig.build(sampler="cluster", clusters=4), train))
    assert isinstance(cluster, ClusterSampler) and cluster.num_clusters == 4


def test_a_registered_sampler_is_a_choice_of_the_parser_and_the_configuration(counting):
    parser = argparse.ArgumentParser()
    TrainConfig.add_arguments(parser)
    args = parser.parse_args(["--sampler", "counting"])
    assert TrainConfig.from_args(args).sampling.sampler == "counting"
    unregister_sampler("counting")
    with pytest.raises(TrainingError, match="unknown sampler 'counting'; choose one of neighbor, fastgcn"):
        TrainConfig.build(sampler="counting")
    register_sampler("counting", lambda graph, spec: CountingSampler(graph, list(spec.fanouts)))


def test_the_bridge_loader_names_the_registered_samplers_it_draws(counting):
    with pytest.raises(BridgeError, match="sampler must be one of neighbor, dgs; got 'counting'"):
        check_batching(64, "counting", {})
    assert check_batching(64, "dgs", {}) == 64


def test_a_sampler_registered_by_a_test_trains_by_name(counting, tmp_path, monkeypatch):
    graph = load_graph("cora")
    assignment, _ = partition_graph(graph, 1, "chunk")
    write_partition_set(
        graph,
        assignment,
        1,
        tmp_path / "cora-1",
        method="chunk",
        seed=0,
        seconds=0.0,
        metrics=partition_metrics(graph, assignment, 1),
    )
    config = TrainConfig.build(sampler="counting", batch_size=70, epochs=1, progress=False)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    for name, value in dict(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    world = join(timeout=60, device="cpu")
    try:
        result = train_worker(world, tmp_path / "cora-1", config)
    finally:
        world.close()
    assert [record["steps"] for record in result.history] == [2]
    assert CountingSampler.drawn == 2
