"""Diagnostics go through :mod:`logging` (:mod:`commgraph.logs`): a library user silences the
runtime with the ``commgraph`` logger's level."""

from __future__ import annotations

import logging

import pytest
import torch

import commgraph.pyg as cg
from commgraph.logs import get_logger
from pyg_driver import Net, cora


@pytest.fixture
def level():
    """The ``commgraph`` logger, its level restored after the test."""
    logger = logging.getLogger("commgraph")
    before = logger.level
    yield logger
    logger.setLevel(before)


def _bridge_run(part) -> None:
    """A one-process bridge run: the model wrapped, one training step."""
    model = cg.full_graph(Net("sage", part.num_features, 7), part)
    loss = torch.nn.functional.cross_entropy(model(part)[part.train_mask], part.y[part.train_mask])
    loss.backward()


def _ours(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("commgraph:")]


def test_the_commgraph_logger_s_level_silences_a_bridge_run(bridge_alone, level, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    part = cg.partition(cora())
    level.setLevel(logging.DEBUG)
    _bridge_run(part)
    said = _ours(capsys.readouterr().err)
    assert any(line.startswith("commgraph: job: rank 0 of 1 on cpu reads part 0") for line in said), said
    level.setLevel(logging.ERROR)
    _bridge_run(part)
    assert _ours(capsys.readouterr().err) == []


def test_records_go_to_stderr_as_they_are_from_info_on(level, capsys):
    assert level.level == logging.INFO and not level.propagate
    get_logger("commgraph.test").info("commgraph: a note")
    get_logger("commgraph.test").debug("commgraph: hidden below INFO")
    assert capsys.readouterr().err == "commgraph: a note\n"


def test_the_commgraph_logger_s_level_silences_the_epoch_lines(level, tmp_path, monkeypatch, capsys):
    import torch.distributed as dist

    from commgraph.graph import load_graph
    from commgraph.partition import partition_graph, partition_metrics, write_partition_set
    from commgraph.runtime import join
    from commgraph.train import train_worker
    from commgraph.train.config import TrainConfig

    graph = load_graph("cora")
    assignment, _ = partition_graph(graph, 1, "chunk", 0)
    metrics = partition_metrics(graph, assignment, 1)
    write_partition_set(graph, assignment, 1, tmp_path / "cora-1", method="chunk", seed=0, seconds=0.0, metrics=metrics)
    config = TrainConfig.build(epochs=2, hidden=8, progress=True)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # a world of one rank
    for name, value in dict(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    world = join(timeout=60, device="cpu")
    try:
        capsys.readouterr()
        train_worker(world, tmp_path / "cora-1", config)
        epochs = [line for line in capsys.readouterr().err.splitlines() if line.startswith("epoch")]
        assert [line.split()[:2] for line in epochs] == [["epoch", "1"], ["epoch", "2"]]
        level.setLevel(logging.ERROR)
        train_worker(world, tmp_path / "cora-1", config)
        assert capsys.readouterr().err == ""
    finally:
        world.close()
