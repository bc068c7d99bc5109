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
