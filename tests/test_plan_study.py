"""``plan allgather|allreduce|broadcast`` print the plan-comparison study's report: the CLI's JSON
is :meth:`~commgraph.study.plans.PlanComparison.to_dict` of the same call, the study reports each
planner as it ends, and its chosen row is the one ``auto`` takes."""

import json

import pytest

from commgraph.cli.main import main
from commgraph.errors import PlanError
from commgraph.partition import load_partition_set
from commgraph.plan import PLANNERS
from commgraph.plan.allgather import placement
from commgraph.plan.allreduce import choose_allreduce
from commgraph.plan.choose import EXECUTABLE, fastest_plan
from commgraph.plan.gather import PLANNERS as GATHER_PLANNERS
from commgraph.study.plans import compare_allreduce, compare_broadcast, compare_collective, compare_halo
from commgraph.topology import resolve_topology


def printed(capsys, *argv: str) -> dict:
    assert main([*argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def plain(data: dict) -> dict:
    """``data`` as JSON reads it back (tuples as lists)."""
    return json.loads(json.dumps(data))


@pytest.mark.parametrize(("preset", "auto"), [("p3.8xlarge", "lp"), ("dgx1-v100", "native")])
def test_plan_allreduce_prints_the_study_s_report(capsys, preset, auto):
    topology = resolve_topology(preset, device="auto")
    steps = []
    found = compare_allreduce(topology, 1e8, PLANNERS["allreduce"], progress=steps.append)
    assert printed(capsys, "plan", "allreduce", "--topology", preset, "--bytes", "1e8") == plain(found.to_dict())
    assert steps == ["estimate", *(f"plan {name}" for name in PLANNERS["allreduce"])]
    assert found.chosen == choose_allreduce(topology, 1e8) == auto
    assert (found.native_seconds is not None) and set(found.planning_seconds) == set(PLANNERS["allreduce"])
    assert found.lower_bound == found.plans["lp"].notes["lower_bound"]


def test_one_planner_decides_nothing(capsys):
    found = compare_allreduce(resolve_topology("p3.8xlarge", device="auto"), 1e8, ["ring"])
    assert found.chosen is None and found.native_seconds is None and list(found.planners) == ["ring"]
    assert printed(capsys, "plan", "allreduce", "--topology", "p3.8xlarge", "--planner", "ring") == plain(
        found.to_dict()
    )


def test_plan_allgather_prints_the_study_s_report(capsys, cora_set):
    topology = resolve_topology("dgx1-v100", device="auto")
    devices = placement(cora_set, topology, None)
    found = compare_halo(cora_set, topology, 4 * 16, PLANNERS["allgather"], devices=devices)
    argv = ["plan", "allgather", str(cora_set.path), "--topology", "dgx1-v100", "--feature-dim", "16"]
    assert printed(capsys, *argv) == plain(found.to_dict())
    assert found.chosen == fastest_plan({name: found.planners[name]["modeled_seconds"] for name in EXECUTABLE})
    assert found.typed is None and "typed" not in found.to_dict()


def test_collectives_across_the_workers_and_broadcast_print_the_study_s_report(capsys):
    topology = resolve_topology("dgx-a100", device="auto")
    found = compare_collective("reducescatter", topology, 1e8, GATHER_PLANNERS)
    argv = ["plan", "allreduce", "--topology", "dgx-a100", "--bytes", "1e8", "--collective", "reducescatter"]
    assert printed(capsys, *argv) == plain(found.to_dict()) and found.to_dict()["collective"] == "reducescatter"
    cast = compare_broadcast(resolve_topology("p3.8xlarge", device="auto"), "gpu0", 1e8)
    argv = ["plan", "broadcast", "--topology", "p3.8xlarge", "--root", "gpu0", "--bytes", "1e8"]
    assert printed(capsys, *argv) == plain(cast.to_dict()) and list(cast.plans) == ["arborescence"]


def test_a_typed_set_s_halo_is_reported_by_type(tmp_path, capsys):
    out = tmp_path / "mag"
    argv = ["partition", "make", "mag-shaped:scale=0.001,seed=0", "--parts", "2", "--out", str(out), "--json"]
    assert main(argv) == 0
    capsys.readouterr()
    pset = load_partition_set(out)
    topology = resolve_topology("dgx1-v100", device="auto")
    found = compare_halo(pset, topology, 64, ["p2p"], devices=placement(pset, topology, None))
    assert set(found.typed) == {"by_type", "by_relation"} and found.chosen is None
    argv = ["plan", "allgather", str(out), "--topology", "dgx1-v100", "--feature-dim", "16", "--planner", "p2p"]
    assert printed(capsys, *argv) == plain(found.to_dict())


def test_planning_estimated_beyond_max_seconds_is_refused_naming_the_parameters():
    topology = resolve_topology("256xhgx-h100-ib", device="auto")
    with pytest.raises(PlanError, match="more than max_seconds 60: choose planner .* raise max_seconds") as refused:
        compare_allreduce(topology, 1e8, ["lp"], max_seconds=60)
    assert refused.value.parameters == ("max_seconds", "planner")
    with pytest.raises(PlanError, match="max_seconds must be a finite number"):
        compare_allreduce(topology, 1e8, ["lp"], max_seconds=float("inf"))
