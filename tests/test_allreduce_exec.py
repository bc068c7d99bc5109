"""Executed all-reduce schedules: the schedule every all-reduce plan keeps (pure data), the program
each rank compiles from it (pure: all ranks run in lockstep in one process), and real runs on 2, 4
and 8 Gloo workers that must sum like torch's all_reduce, bucketed gradients included."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from commgraph.errors import PlanError
from commgraph.plan import (
    PLANNERS,
    AllReduceSchedule,
    CommPlan,
    Tree,
    allreduce_schedule,
    choose_allreduce,
    make_allreduce,
    plan_allreduce,
)
from commgraph.plan.allreduce import Ring, Route
from commgraph.runtime.allreduce import compile_program, tree_shares
from commgraph.topology import load_preset, load_topology, write_yaml
from forked import launch_forked

TESTS = Path(__file__).parent
TOPOLOGIES = (
    "localhost-cpu:2",
    "localhost-cpu:5",
    "p3.8xlarge",
    "dgx1-v100",
    "p2.16xlarge",
    "2xp3.8xlarge-ib",
    "dgx-a100",
)


def schedules(topology: str):
    for planner in PLANNERS["allreduce"]:
        yield allreduce_schedule(plan_allreduce(planner, load_preset(topology), 1e8))


def bytes_sent(schedule: AllReduceSchedule, device: str, numel: int) -> int:
    """What the device sends in one all-reduce of ``numel`` float32 values."""
    if schedule.rings:
        total = 0
        for ring, share in zip(schedule.rings, np.diff(tree_shares(schedule.rings, numel))):
            n, i = len(ring.order), ring.order.index(device)
            bounds = (np.arange(n + 1) * int(share)) // n
            segment = lambda k: int(bounds[k % n + 1] - bounds[k % n])  # noqa: E731
            total += 4 * (2 * int(share) - segment(i + 1) - segment(i + 2))  # every segment but one, twice
        return total
    shares = np.diff(tree_shares(schedule.trees, numel))
    return 4 * int(
        sum(
            share * (len(tree.children()[device]) + (device != tree.root))
            for tree, share in zip(schedule.trees, shares)
        )
    )


# -- the schedule as data -------------------------------------------------------------------------


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_every_plan_keeps_a_schedule_of_spanning_trees_or_a_ring(topology):
    workers = [d.id for d in load_preset(topology).workers]
    for schedule in schedules(topology):
        assert list(schedule.devices) == workers
        if schedule.planner in ("ring", "ring1"):
            assert all(sorted(r.order) == sorted(workers) for r in schedule.rings) and not schedule.trees
            continue
        assert sum(t.weight for t in schedule.trees) == pytest.approx(1.0, abs=1e-9)
        for tree in schedule.trees:
            assert len(tree.edges) == len(workers) - 1
            assert set(tree.depths()) == set(workers)  # every device reaches the root
    lp = plan_allreduce("lp", load_preset(topology), 1e8)
    rooted = allreduce_schedule(lp).trees
    assert [t.weight for t in rooted] == [t["weight"] for t in lp.notes["trees"]]
    assert [{frozenset(e) for e in t.edges} for t in rooted] == [
        {frozenset(e) for e in t["edges"]} for t in lp.notes["trees"]
    ]


def test_lp_roots_each_tree_at_a_centre():
    for tree in allreduce_schedule(plan_allreduce("lp", load_preset("dgx1-v100"), 1e8)).trees:
        depth = max(tree.depths().values())
        for root in tree.depths():  # no other root gives a shallower tree
            other = Tree(tree.weight, root, _reroot(tree.edges, root))
            assert max(other.depths().values()) >= depth


def _reroot(edges, root):
    neighbours = {}
    for a, b in edges:
        neighbours.setdefault(a, []).append(b)
        neighbours.setdefault(b, []).append(a)
    result, seen, queue = [], {root}, [root]
    for node in queue:
        for nxt in neighbours[node]:
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
                result.append((nxt, node))
    return tuple(result)


@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_schedules_round_trip_through_plan_files(tmp_path, suffix):
    for planner in PLANNERS["allreduce"]:
        plan = plan_allreduce(planner, load_preset("dgx1-v100"), 1e8)
        plan.save(tmp_path / f"{planner}{suffix}")
        assert allreduce_schedule(CommPlan.load(tmp_path / f"{planner}{suffix}")) == allreduce_schedule(plan)


def test_malformed_schedules_are_refused():
    devices = ("a", "b", "c")
    with pytest.raises(PlanError, match="does not visit each"):
        AllReduceSchedule("ring", devices, rings=(Ring(1.0, ("a", "b")),))
    with pytest.raises(PlanError, match="does not lead from b to a"):
        AllReduceSchedule(
            "tree",
            devices,
            trees=(
                Tree(1.0, "a", (("b", "a"), ("c", "a")), ((Route(1.0, ("b", "x", "c")),), (Route(1.0, ("c", "a")),))),
            ),
        )
    with pytest.raises(PlanError, match="shares summing to 1"):
        AllReduceSchedule(
            "tree",
            devices,
            trees=(Tree(1.0, "a", (("b", "a"), ("c", "a")), ((Route(0.5, ("b", "a")),), (Route(1.0, ("c", "a")),))),),
        )
    with pytest.raises(PlanError, match="exactly one"):
        AllReduceSchedule("tree", devices)
    with pytest.raises(PlanError, match="sum to 0.9"):
        AllReduceSchedule("tree", devices, trees=(Tree(0.9, "a", (("b", "a"), ("c", "a"))),))
    with pytest.raises(PlanError, match="not a spanning tree"):
        AllReduceSchedule("tree", devices, trees=(Tree(1.0, "a", (("b", "a"), ("b", "c"))),))
    with pytest.raises(PlanError, match="hold a cycle"):
        AllReduceSchedule("tree", devices, trees=(Tree(1.0, "a", (("b", "c"), ("c", "b"))),))
    with pytest.raises(PlanError, match="is malformed"):
        AllReduceSchedule.from_json("lp", {"trees": [{"weight": 1.0}]})
    plan = plan_allreduce("lp", load_preset("p3.8xlarge"), 1e6)
    del plan.notes["schedule"]
    with pytest.raises(PlanError, match="carries no schedule"):
        allreduce_schedule(plan)


@pytest.mark.slow
def test_auto_chooses_the_cheapest_by_price_and_native_stands_for_the_ring():
    assert choose_allreduce(load_preset("dgx-a100"), 1e8) == "lp"
    assert choose_allreduce(load_preset("p3.8xlarge"), 1e8) == "lp"
    # NCCL's six NVLink rings on a DGX-1 reach the LP's optimum: a tie, which goes to native
    assert choose_allreduce(load_preset("dgx1-v100"), 1e8) == "native"
    assert choose_allreduce(load_preset("localhost-cpu:4"), 1e8) == "native"  # a star: every schedule ties
    assert make_allreduce("auto", load_preset("localhost-cpu:4"), 1e8) is None
    assert make_allreduce("auto", load_preset("p3.8xlarge"), 1e8).planner == "lp"
    assert make_allreduce("native", load_preset("dgx1-v100"), 1e8) is None
    with pytest.raises(PlanError, match="unknown --allreduce 'magic'"):
        make_allreduce("magic", load_preset("dgx1-v100"), 1e8)


# -- programs, run in lockstep in one process -----------------------------------------------------


def run_in_lockstep(schedule: AllReduceSchedule, devices: list[str], data: list[np.ndarray], chunk: int) -> list:
    """Every rank's program, round by round: each message must be received in the round it is sent."""
    programs = [compile_program(schedule, devices, r, data[0].size, chunk) for r in range(len(devices))]
    data = [x.copy() for x in data]
    for index in sorted({r.index for p in programs for r in p.rounds}):
        mail = {
            (rank, t.peer, t.tag): data[rank][t.start : t.stop].copy()
            for rank, p in enumerate(programs)
            for r in p.rounds
            if r.index == index
            for t in r.sends
        }
        for rank, p in enumerate(programs):
            for t in (t for r in p.rounds if r.index == index for t in r.recvs):
                message = mail.pop((t.peer, rank, t.tag))
                assert message.size == t.size
                if t.add:
                    data[rank][t.start : t.stop] += message
                else:
                    data[rank][t.start : t.stop] = message
        assert not mail  # nothing sent that no one received
    return data, programs


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_programs_sum_exactly_and_send_what_the_schedule_says(topology):
    rng = np.random.default_rng(0)
    for schedule in schedules(topology):
        devices = list(schedule.devices)[::-1]  # rank r on the r-th worker from the end
        for numel, chunk in ((1, 1), (7, 2), (1003, 64)):
            data = [rng.random(numel, dtype=np.float32) for _ in devices]
            summed, programs = run_in_lockstep(schedule, devices, data, chunk)
            want = np.sum(data, axis=0, dtype=np.float64)
            for rank, got in enumerate(summed):
                np.testing.assert_allclose(got, want, rtol=1e-6)
                assert 4 * programs[rank].elements_sent == bytes_sent(schedule, devices[rank], numel)
            assert sum(p.elements_sent for p in programs) == 2 * (len(devices) - 1) * numel


def test_pipelined_trees_take_chunks_plus_twice_the_height_rounds():
    schedule = allreduce_schedule(plan_allreduce("tree", load_preset("localhost-cpu:8"), 1e8))  # height 3
    programs = [compile_program(schedule, list(schedule.devices), r, 1600, 100) for r in range(8)]
    assert max(r.index for p in programs for r in p.rounds) + 1 == 8 + 2 * 3 - 1  # 8 chunks per tree


def test_a_schedule_for_other_devices_is_refused():
    schedule = allreduce_schedule(plan_allreduce("lp", load_preset("localhost-cpu:4"), 1e6))
    with pytest.raises(PlanError, match="spans 4 devices .* the job's 3 ranks run on cpu0, cpu1, cpu2"):
        compile_program(schedule, ["cpu0", "cpu1", "cpu2"], 0, 10, 4)
    with pytest.raises(PlanError, match="an all-reduce schedule comes from an all-reduce plan"):
        allreduce_schedule(CommPlan("allgather", "p2p", "dgx1-v100"))


# -- real runs on Gloo ----------------------------------------------------------------------------


@pytest.mark.timeout(300)  # 8 processes on 2 shared cores: about 35 s alone, a minute when the machine is busy
@pytest.mark.parametrize(
    "workers, topology, reverse",
    [(2, "planes:3", False), (4, "p3.8xlarge", True), (4, "planes:2", True), (8, "dgx-a100", False)],
)
@pytest.mark.multiproc
def test_schedules_sum_like_native_on_gloo_workers(tmp_path, monkeypatch, switch_planes, workers, topology, reverse):
    """Every planner, split-route schedules among them (``lp`` over NVSwitch planes: each tree edge's
    messages cut into one piece per plane), sums like torch's all_reduce on 2, 4 and 8 workers."""
    if topology.startswith("planes:"):  # a YAML file of NVSwitch planes
        write_yaml(switch_planes(workers, int(topology.split(":")[1])), tmp_path / "planes.yaml")
        topology = str(tmp_path / "planes.yaml")
    if topology != "p3.8xlarge":
        assert make_allreduce("lp", load_topology(topology), 4e6).fan_out > 1  # the routes are split
    sizes = [1, 7, 1000003]
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "out": str(tmp_path),
                "sizes": sizes,
                "chunk_bytes": 65536,
                "topologies": [{"name": topology, "reverse": reverse}],
            }
        )
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    assert launch_forked([str(spec)], workers, grace=30, module="allreduce_driver", threads_per_worker=1) == 0
    devices = [d.id for d in load_topology(topology).workers][:: -1 if reverse else 1]
    schedules = {planner: make_allreduce(planner, load_topology(topology), 4e6) for planner in PLANNERS["allreduce"]}
    for rank in range(workers):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        for planner, schedule in schedules.items():
            for size in sizes:
                assert result["cases"][f"{topology}/{planner}/{size}"]["error"] <= 1e-6, (rank, planner, size)
            assert result["cases"][f"{topology}/{planner}/bytes"] == sum(
                bytes_sent(schedule, devices[rank], size) for size in sizes
            )
        assert result["sync"][topology]["buckets"] > 1 and result["sync"][topology]["error"] <= 1e-5
        assert f"but the job has {workers} ranks" in result["refused"]


# -- all-gather and reduce-scatter over the same machinery ------------------------------------------


@pytest.mark.parametrize("topology", ("localhost-cpu:5", "dgx-a100", "2xp3.8xlarge-ib"))
def test_allgather_and_reducescatter_programs_move_the_shards(topology):
    from commgraph.plan.gather import plan_collective
    from commgraph.runtime.allreduce import shard_bounds

    rng = np.random.default_rng(1)
    for planner in ("ring", "lp"):
        gather = allreduce_schedule(plan_collective("allgather", planner, load_preset(topology), 1e8))
        scatter = allreduce_schedule(plan_collective("reducescatter", planner, load_preset(topology), 1e8))
        devices = list(gather.devices)[::-1]
        n = len(devices)
        for numel, chunk in ((n, 1), (1003, 64)):
            shards = shard_bounds(gather, numel)
            assert sorted(shards.values())[0][0] == 0 and sum(b - a for a, b in shards.values()) == numel
            full = rng.random(numel, dtype=np.float32)
            mine = [np.zeros(numel, dtype=np.float32) for _ in devices]
            for rank, device in enumerate(devices):
                lo, hi = shards[device]
                mine[rank][lo:hi] = full[lo:hi]
            gathered, programs = run_in_lockstep(gather, devices, mine, chunk)
            for got in gathered:
                np.testing.assert_array_equal(got, full)
            assert sum(p.elements_sent for p in programs) == (n - 1) * numel  # every shard once to every other
            data = [rng.random(numel, dtype=np.float32) for _ in devices]
            reduced, programs = run_in_lockstep(scatter, devices, data, chunk)
            want = np.sum(data, axis=0, dtype=np.float64)
            for rank, device in enumerate(devices):
                lo, hi = shard_bounds(scatter, numel)[device]
                np.testing.assert_allclose(reduced[rank][lo:hi], want[lo:hi], rtol=1e-6)
            assert sum(p.elements_sent for p in programs) == (n - 1) * numel


def test_collective_schedules_are_checked_and_round_trip():
    from commgraph.plan.gather import plan_collective

    plan = plan_collective("allgather", "lp", load_preset("dgx-a100"), 1e8)
    schedule = allreduce_schedule(plan)
    assert schedule.collective == "allgather" and AllReduceSchedule.from_json("lp", schedule.to_json()) == schedule
    first = schedule.trees[0]
    with pytest.raises(PlanError, match="rooted at every device, grouped by root"):
        AllReduceSchedule("lp", schedule.devices, trees=(Tree(1.0, first.root, first.edges),), collective="allgather")
    halved = tuple(Tree(t.weight * (2 if t.root == first.root else 1), t.root, t.edges) for t in schedule.trees)
    with pytest.raises(PlanError, match="carry .* of the data, not 1/8"):
        AllReduceSchedule("lp", schedule.devices, trees=halved, collective="reducescatter")
    with pytest.raises(PlanError, match="unknown collective"):
        AllReduceSchedule("lp", schedule.devices, trees=schedule.trees, collective="alltoall")


@pytest.mark.multiproc
@pytest.mark.timeout(300)
def test_allgather_and_reducescatter_run_on_gloo_workers(tmp_path, monkeypatch):
    """The ``ring`` and ``lp`` all-gather and reduce-scatter of a 4-GPU P3 (``lp``'s arborescences
    partly routed through a PCIe switch), executed on 4 Gloo workers: every rank ends with the whole
    tensor, or with its shard of the sum."""
    sizes = [4, 7, 100003]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"out": str(tmp_path), "sizes": sizes, "chunk_bytes": 65536, "topology": "p3.8xlarge"}))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    assert launch_forked([str(spec)], 4, grace=30, module="gather_driver", threads_per_worker=1) == 0
    for rank in range(4):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert len(result) == 2 * 2 * len(sizes)
        for case, error in result.items():
            assert error <= (0.0 if case.startswith("allgather") else 1e-6), (rank, case)
