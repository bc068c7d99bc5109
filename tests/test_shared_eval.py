"""Sampled training's evaluation through machine-shared layer tables (``train.shared_eval``): the
same logits as the full-graph executor and as one worker, layer 0 reading the parts' feature files
in place (no input table), the later tables mapped by every rank while the pass runs and by none
after it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from commgraph.graph import load_graph
from commgraph.partition import partition_graph, partition_metrics, write_partition_set
from forked import launch_forked

TESTS = Path(__file__).parent
PAGE = os.sysconf("SC_PAGE_SIZE")
GRAPHS = {"cora": "cora", "sbm": "sbm:nodes=600,classes=4,features=12,degree=8,seed=2"}


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """Each graph in 1 part and in 3 METIS parts."""
    root, made = tmp_path_factory.mktemp("shared-eval"), {}
    for name, spec in GRAPHS.items():
        graph = load_graph(spec)
        for parts in (1, 3):
            assignment, _ = partition_graph(graph, parts, "metis" if parts > 1 else "chunk", 0)
            made[name, parts] = root / f"{name}-{parts}"
            write_partition_set(
                graph,
                assignment,
                parts,
                made[name, parts],
                method="metis",
                seed=0,
                seconds=0.0,
                metrics=partition_metrics(graph, assignment, parts),
            )
    return made


def _evaluate(partdir: Path, workers: int, out: Path, monkeypatch, **model) -> dict[int, dict]:
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "spec.json"
    spec.write_text(json.dumps({"partdir": str(partdir), "out": str(out), **model}))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    assert launch_forked([str(spec)], workers, grace=30, module="shared_eval_driver") == 0
    return {r: dict(np.load(out / f"rank-{r}.npz")) for r in range(workers)}


def _by_node(ranks: dict[int, dict], key: str) -> np.ndarray:
    owned = np.concatenate([r["owned"] for r in ranks.values()])
    rows = np.concatenate([r[key] for r in ranks.values()])
    out = np.empty_like(rows)
    out[owned] = rows
    return out


@pytest.mark.multiproc
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "graph, model, tables",
    [
        # the last layer narrows 16 -> 7 classes: the table before it holds its transformed rows
        ("cora", {"model": "sage", "layers": 3, "hidden": 16, "whole": True}, [16, 7]),
        ("sbm", {"model": "gcn", "layers": 2, "hidden": 8, "whole": False}, [4]),
        ("sbm", {"model": "commnet", "layers": 2, "hidden": 8, "whole": True}, [8]),  # layer 0 encodes each chunk
    ],
)
def test_shared_tables_give_the_executors_logits_on_one_and_three_workers(
    sets, tmp_path, monkeypatch, graph, model, tables
):
    one = _evaluate(sets[graph, 1], 1, tmp_path / "one", monkeypatch, **model)
    three = _evaluate(sets[graph, 3], 3, tmp_path / "three", monkeypatch, **model)
    for ranks in (one, three):
        for result in ranks.values():
            np.testing.assert_allclose(result["shared"], result["reference"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_by_node(three, "shared"), _by_node(one, "shared"), rtol=1e-5, atol=1e-6)
    # layer 0 reads the parts' feature files: only its output table; later layers their input and output
    # tables (the last layer's output stays with its worker), each table a row a node at its width
    nodes = sum(r["owned"].shape[0] for r in three.values())
    mapped = [0] + [-(-4 * nodes * width // PAGE) * PAGE for width in tables] + [0]
    expected = [mapped[l] + mapped[l + 1] for l in range(model["layers"])]
    assert all(r["during"].tolist() == expected and int(r["after"]) == 0 for r in three.values())
    assert all(r["during"].tolist() == [0] * model["layers"] for r in one.values())  # one worker: nothing to share
