"""The runtime executes all-gather plans for real: every halo row arrives with its value, and in
reverse every owner gets back one gradient per part that reads the row, for point-to-point plans,
SPST plans that relay rows through other workers, swap plans staged through host memory and
hybrid plans; tagged and in plan order alike; and each rank sends exactly the bytes the plan gives
it."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import numpy as np
import pytest

from commgraph.graph import load_graph
from commgraph.partition import partition_graph, partition_metrics, write_partition_set
from commgraph.plan import plan_allgather
from commgraph.topology import load_preset
from forked import launch_forked

pytestmark = pytest.mark.multiproc

TESTS = Path(__file__).parent
PLANNERS = ("p2p", "spst", "swap", "hybrid")


@pytest.mark.timeout(240)
def test_p2p_and_relayed_plans_move_every_row_both_ways(tmp_path, monkeypatch):
    graph, parts = load_graph("cora"), 8
    assignment, _ = partition_graph(graph, parts, "g3", 0)
    partdir = tmp_path / "parts"
    pset = write_partition_set(
        graph,
        assignment,
        parts,
        partdir,
        method="g3",
        seed=0,
        seconds=0.0,
        metrics=partition_metrics(graph, assignment, parts),
    )
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps({"partdir": str(partdir), "out": str(tmp_path), "topology": "dgx1-v100", "planners": list(PLANNERS)})
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    assert launch_forked([str(spec)], parts, grace=30, module="exchange_driver", threads_per_worker=1) == 0
    readers = np.zeros(graph.num_nodes)  # how many parts hold each node in their halo
    for k in range(parts):
        np.add.at(readers, np.asarray(pset.part(k).halo), 1)
    topology = load_preset("dgx1-v100")
    devices = [d.id for d in topology.workers]
    for planner, ordering in itertools.product(PLANNERS, ("tagged", "ordered")):
        plan = plan_allgather(planner, pset, topology, row_bytes=16)
        results = [np.load(tmp_path / f"{planner}-{ordering}-{k}.npz") for k in range(parts)]
        for k, result in enumerate(results):
            part = pset.part(k)
            halo, owned = np.asarray(part.halo), np.asarray(part.owned)
            np.testing.assert_array_equal(result["received"], np.stack([halo, -halo], axis=1))
            np.testing.assert_array_equal(result["grad"], np.stack([readers[owned]] * 2, axis=1))
            # the plan's bytes from this rank's device (and, for swap, from its host copies): 2 float64 a row
            from_device = sum(s.ids.size for stage in plan.stages for s in stage if s.src == devices[k])
            assert int(result["plan_rows"]) >= from_device
            assert int(result["sent_bytes"]) == 16 * int(result["plan_rows"])
        total_rows = sum(int(r["plan_rows"]) for r in results)
        assert total_rows == sum(s.ids.size for stage in plan.stages for s in stage)
        relayed = [bool(r["relayed"]) for r in results]
        assert any(relayed) if planner == "spst" else not any(relayed)  # spst relays through some ranks
