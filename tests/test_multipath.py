"""Communication paths as data, multi-path selection (LEO) and the bulk host -> GPU split."""

import itertools
import json

import numpy as np
import pytest

from commgraph.cli.main import main
from commgraph.errors import PlanError
from commgraph.plan.multipath import (
    FAITHFUL_GREEDY,
    SELECTORS,
    PathTable,
    Selector,
    SolveStats,
    Toll,
    TollBytes,
    load_workload,
    make_selector,
    plan_bulk,
    select,
)
from commgraph.plan.paths import CommPath, PathSet, RequestType, auto_path_set, candidate_paths, read_paths, write_paths
from commgraph.sim import Compute, simulate
from commgraph.study.selectors import price_selection, sustainable, sweep
from commgraph.topology import Device, Link, Topology, load_preset
from commgraph.workload.requests import RequestStream, parse_kvs, parse_poisson

GB = 1e9


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def two_ways() -> Topology:
    """Host memory reaches gpu0 over its own switch (10 GB/s) or over a second switch (5 GB/s)
    shared by gpu1 and gpu2, each NVLinked to gpu0."""
    devices = [
        Device("cpu0", "cpu"),
        Device("sw0", "pcie_switch"),
        Device("sw1", "pcie_switch"),
        Device("gpu0", "gpu"),
        Device("gpu1", "gpu"),
        Device("gpu2", "gpu"),
    ]
    links = [
        Link("cpu0", "sw0", "pcie", 1, 10.0, 1.0),
        Link("sw0", "gpu0", "pcie", 1, 10.0, 1.0),
        Link("cpu0", "sw1", "pcie", 1, 5.0, 1.0),
        Link("sw1", "gpu1", "pcie", 1, 5.0, 1.0),
        Link("sw1", "gpu2", "pcie", 1, 5.0, 1.0),
        Link("gpu1", "gpu0", "nvlink", 2, 40.0, 1.0),
        Link("gpu2", "gpu0", "nvlink", 1, 20.0, 1.0),
    ]
    return Topology("two-ways", devices, links)


def stream(arrival, kind=None, nbytes=1e6, after=None) -> RequestStream:
    arrival = np.asarray(arrival, dtype=np.float64)
    n = arrival.shape[0]
    return RequestStream(
        arrival,
        np.zeros(n, dtype=np.int64) if kind is None else np.asarray(kind),
        np.full(n, float(nbytes)),
        np.full(n, -1) if after is None else np.asarray(after),
    )


class Fixed(Selector):
    name = "fixed"

    def __init__(self, paths):
        self.paths = paths

    def choose(self, t, backlog):
        return int(self.paths[t])


# -- paths as data ---------------------------------------------------------------------------------


def test_candidates_and_traverse_times():
    topology = two_ways()
    names = [p.name for p in candidate_paths(topology, "cpu0", "gpu0")]
    assert names == ["cpu0>sw0>gpu0", "cpu0>sw1>gpu1>gpu0", "cpu0>sw1>gpu2>gpu0"]
    table = PathTable(topology, auto_path_set(topology, ["cpu0:gpu0"], 1e6))
    assert table.traverse(0, 1e6) == pytest.approx(2e-6 + 1e6 / 10e9)
    assert table.traverse(1, 1e6) == pytest.approx(3e-6 + 1e6 / 5e9)  # at the 5 GB/s bottleneck
    assert table.paths[1].toll_seconds(1e6) == pytest.approx(2 * 1e6 / 5e9 + 1e6 / 40e9)
    dgx = candidate_paths(load_preset("dgx1-v100"), "cpu0", "gpu0")
    assert dgx[0].devices == ("cpu0", "pcie0", "gpu0")
    assert {p.devices[-2] for p in dgx[1:]} == {"gpu1", "gpu2", "gpu3", "gpu4"}  # gpu0's NVLink peers


def test_yaml_round_trip_and_refused_hops(tmp_path):
    topology = load_preset("dgx1-v100")
    kind = RequestType(
        "h2d",
        1e6,
        (CommPath(("cpu0", "pcie0", "gpu0")), CommPath(("cpu0", "pcie1", "gpu3", "gpu0"))),
        {"gpu0": 2e-5},
        "ordered",
    )
    write_paths(PathSet((kind,)), tmp_path / "p.yaml")
    again = read_paths(tmp_path / "p.yaml")
    assert again == PathSet((kind,))
    steps = PathTable(topology, again).paths[1].steps
    assert [type(s).__name__ for s in steps] == ["Segment", "ComputeStep"]
    bad = PathSet((RequestType("h2d", 1e6, (CommPath(("cpu0", "pcie0", "gpu3")),)),))
    with pytest.raises(PlanError, match=r"path cpu0>pcie0>gpu3: hop 2 pcie0 -> gpu3 has no link"):
        PathTable(topology, bad)
    with pytest.raises(PlanError, match=r"device 2 'gpu9' is not in topology"):
        PathTable(topology, PathSet((RequestType("x", 1.0, (CommPath(("cpu0", "pcie0", "gpu9")),)),)))
    (tmp_path / "bad.yaml").write_text("types:\n- name: h2d\n  bytes: 1M\n  paths: [[cpu0, gpu0]]\n")
    with pytest.raises(PlanError, match="bytes must be a number"):
        read_paths(tmp_path / "bad.yaml")
    (tmp_path / "bad.yaml").write_text("types:\n- name: h2d\n  bytes: 1\n  dependency: addr\n  paths: [[a, b]]\n")
    with pytest.raises(PlanError, match="dependency must be one of none, ordered"):
        read_paths(tmp_path / "bad.yaml")
    # an ordered type: each request follows the previous one of its type
    workload = load_workload(topology, "poisson:rate=1000,types=h2d,n=5", again)
    assert workload.stream.after.tolist() == [-1, 0, 1, 2, 3]


@pytest.mark.multiproc
def test_paths_cli(capsys, tmp_path):
    code, out, _ = run(
        capsys, "sim", "multipath", "paths", "--topology", "dgx1-v100", "--src", "cpu0", "--dst", "gpu3", "--json"
    )
    rows = json.loads(out)["paths"]
    assert code == 0 and rows[0]["devices"] == ["cpu0", "pcie1", "gpu3"]
    assert rows[0]["traverse_s"] == pytest.approx(3e-6 + (1 << 20) / 11.13e9)
    code, out, _ = run(
        capsys, "sim", "multipath", "paths", "--topology", "dgx1-v100", "--src", "cpu0", "--dst", "gpu3", "--yaml"
    )
    (tmp_path / "p.yaml").write_text(out.replace("[cpu0, pcie0, gpu0, gpu3]", "[cpu0, pcie0, gpu2, gpu3]"))
    code, _, err = run(
        capsys, "sim", "multipath", "paths", "--topology", "dgx1-v100", "--file", str(tmp_path / "p.yaml")
    )
    assert code == 2 and "hop 2 pcie0 -> gpu2 has no link" in err and err.count("\n") == 1


# -- selection -------------------------------------------------------------------------------------


def model_total(table, requests, paths) -> float:
    return float(select(table, requests, Fixed(paths)).model_jct(requests).sum())


@pytest.mark.parametrize("seed", [0, 1])
def test_lp_is_the_optimum_and_never_worse_than_any_selector(seed):
    topology = two_ways()
    table = PathTable(topology, auto_path_set(topology, ["cpu0:gpu0"], 2e6))
    rng = np.random.default_rng(seed)
    requests = stream(np.cumsum(rng.exponential(1.2e-4, 6)), nbytes=2e6)
    totals = {
        name: float(select(table, requests, make_selector(name, k=6)).model_jct(requests).sum()) for name in SELECTORS
    }
    brute = min(model_total(table, requests, p) for p in itertools.product(range(3), repeat=6))
    assert totals["lp"] == pytest.approx(brute, rel=1e-6)
    assert all(totals["lp"] <= v * (1 + 1e-6) for v in totals.values())
    assert totals["direct"] > totals["lp"] * 1.05  # there was contention to avoid


def test_no_contention_every_selector_is_direct_and_the_model_is_the_simulator():
    topology = load_preset("dgx1-v100")
    table = PathTable(topology, auto_path_set(topology, ["cpu0:gpu0", "nic1:gpu3", "cpu1:gpu4"], 4e6))
    requests = RequestStream(np.arange(9) * 0.01, np.tile([0, 1, 2], 3), np.full(9, 4e6), np.full(9, -1))
    direct = select(table, requests, make_selector("direct")).path
    for name in SELECTORS:
        # the relays are 1-2 us slower than the route: 3-9 us of requester-NIC jitter would make
        # greedy-e2e misselect with no contention at all (the thesis's point), so none here
        selection = select(table, requests, make_selector(name, k=2, jitter=(0.0, 0.0)))
        assert np.array_equal(selection.path, direct), name
        priced = price_selection(table, requests, selection.path)
        alone = [table.traverse(p, 4e6) for p in selection.path]
        np.testing.assert_allclose(selection.model_jct(requests), alone, rtol=1e-12)
        np.testing.assert_allclose(priced.jct, alone, rtol=1e-6)


def test_model_matches_the_simulator_on_a_burst():
    """n requests at once on one path, transfer then compute: every one of them in the simulator
    and the model's last finish at the same time (both keep the link and the device busy)."""
    topology = load_preset("dgx1-v100")
    kind = RequestType("h2d", 1e6, (CommPath(("cpu0", "pcie0", "gpu0")),), {"gpu0": 5e-5})
    table = PathTable(topology, PathSet((kind,)))
    requests = stream(np.zeros(5))
    selection = select(table, requests, make_selector("direct"))
    priced = price_selection(table, requests, selection.path)
    assert selection.completion.max() == pytest.approx(priced.result.makespan, rel=1e-9)
    assert selection.completion.max() == pytest.approx(3e-6 + 5 * (1e6 / 11.13e9 + 5e-5), rel=1e-9)


def test_dependencies_are_never_reordered():
    topology = load_preset("dgx1-v100")
    workload = load_workload(topology, "poisson:load=0.95,size=1M,types=cpu0:gpu0+cpu0:gpu5,n=80,dep=0.6,seed=3")
    requests = workload.stream
    follows = np.flatnonzero(requests.after >= 0)
    assert follows.size > 30
    for name in SELECTORS:
        selection = select(workload.table, requests, make_selector(name, k=3))
        before = requests.after[follows]
        assert np.all(selection.completion[follows] >= selection.completion[before])
        busy = selection.completion[before] > requests.arrival[follows]
        assert np.array_equal(selection.path[follows][busy], selection.path[before][busy])
        priced = price_selection(workload.table, requests, selection.path)
        finish = priced.jct + requests.arrival
        assert np.all(finish[follows] >= finish[before])


def test_toll_counts_queued_completions():
    topology = two_ways()
    table = PathTable(topology, auto_path_set(topology, ["cpu0:gpu0"], 1e6))
    toll = Toll()
    toll.start(table, stream([0.0, 1.0]))
    assert toll.choose(0, None) == 0
    base = table.traverse(0, 1e6)
    for _ in range(2):
        toll.observe(0, 0, base * 2, base)
    assert toll.k_hat[0] == 2
    # 2 x toll(direct) + T(direct) against T of the relays
    costs = [toll.k_hat[p] * table.paths[p].toll_seconds(1e6) + table.traverse(p, 1e6) for p in range(3)]
    assert toll.choose(1, None) == int(np.argmin(costs)) == 1
    toll.observe(0, 0, base, base)
    assert toll.k_hat[0] == 0 and toll.choose(1, None) == 0


def test_workload_errors(tmp_path):
    topology = load_preset("dgx1-v100")
    with pytest.raises(PlanError, match="exactly one of load"):
        parse_poisson("poisson:size=1M,types=cpu0:gpu0")
    with pytest.raises(PlanError, match="bad workload option 'lod=1'"):
        parse_poisson("poisson:lod=1")
    trace = tmp_path / "t.csv"
    trace.write_text("time,type,bytes,after\n0,cpu0:gpu0,1000,\n1e-6,cpu0:gpu3,2000,0\n2e-6,cpu0:gpu0,1000,5\n")
    with pytest.raises(PlanError, match=r"line 4: after=5 must name an earlier row"):
        load_workload(topology, str(trace))
    trace.write_text("time,type,bytes,after\n0,cpu0:gpu0,1000,\n1e-6,cpu0:gpu3,2000,0\n")
    workload = load_workload(topology, str(trace))
    assert workload.stream.after.tolist() == [-1, 0] and workload.stream.nbytes.tolist() == [1000, 2000]


@pytest.mark.multiproc
def test_multipath_cli(capsys, tmp_path):
    code, out, _ = run(
        capsys,
        "sim",
        "multipath",
        "simulate",
        "--topology",
        "dgx1-v100",
        "--workload",
        "poisson:load=0.9,size=1M,types=cpu0:gpu0,n=40",
        "--k",
        "2",
        "--json",
        "--png",
        str(tmp_path / "cdf.png"),
    )
    result = json.loads(out)["selectors"]
    assert code == 0 and set(result) == set(SELECTORS)
    for row in result.values():
        assert row["median_s"] <= row["p99_s"] <= row["max_s"] and row["mean_s"] > 0
        assert sum(row["paths"].values()) == 40
    assert result["greedy-queue"]["mean_s"] < result["direct"]["mean_s"]
    assert (tmp_path / "cdf.png").read_bytes()[:4] == b"\x89PNG"
    code, _, err = run(
        capsys,
        "sim",
        "multipath",
        "simulate",
        "--topology",
        "dgx1-v100",
        "--workload",
        "poisson:load=0.5",
        "--selector",
        "toll",
    )
    assert code == 2 and "types=SRC:DST" in err


def test_multipath_cli_with_a_path_set_and_a_trace(capsys, tmp_path):
    kvs = RequestType(
        "get",
        65536.0,
        (CommPath(("nic0", "pcie0", "gpu0")), CommPath(("nic0", "pcie0", "cpu0"))),
        {"gpu0": 2e-5, "cpu0": 6e-5},
    )
    write_paths(PathSet((kvs,)), tmp_path / "kvs.yaml")
    (tmp_path / "trace.csv").write_text(
        "time,type,after\n" + "".join(f"{i * 1e-5},get,\n" for i in range(6)) + "6e-5,get,5\n"
    )
    code, out, _ = run(
        capsys,
        "sim",
        "multipath",
        "simulate",
        "--topology",
        "dgx1-v100",
        "--paths",
        str(tmp_path / "kvs.yaml"),
        "--workload",
        str(tmp_path / "trace.csv"),
        "--selector",
        "direct,greedy-queue,lp",
        "--k",
        "3",
        "--json",
    )
    result = json.loads(out)
    assert code == 0 and result["requests"] == 7 and result["rate_per_s"] is None
    # one GET every 10 us on a 26 us GPU path: greedy-queue sends some to the CPU
    assert result["selectors"]["direct"]["paths"] == {"nic0>pcie0>gpu0": 7}
    assert set(result["selectors"]["greedy-queue"]["paths"]) == {"nic0>pcie0>gpu0", "nic0>pcie0>cpu0"}
    assert result["selectors"]["lp"]["mean_s"] <= result["selectors"]["direct"]["mean_s"]


# -- bulk split ------------------------------------------------------------------------------------


def test_bulk_split_meets_the_max_flow_bound():
    topology = two_ways()
    one = plan_bulk(topology, "cpu0", ["gpu0"], GB, "lp")
    assert one.bound_seconds == pytest.approx(GB / 15e9, rel=1e-9)  # both switches' uplinks
    assert simulate(topology, one.tasks()).makespan == pytest.approx(GB / 15e9, abs=4e-6)
    # gpu1 and gpu2 share sw1's uplink with gpu0's relays: all three need everything through 15 GB/s
    three = plan_bulk(topology, "cpu0", ["gpu0", "gpu1", "gpu2"], GB, "lp")
    assert three.bound_seconds == pytest.approx(3 * GB / 15e9, rel=1e-9)
    assert simulate(topology, three.tasks()).makespan == pytest.approx(3 * GB / 15e9, abs=4e-6)
    direct = plan_bulk(topology, "cpu0", ["gpu0", "gpu1", "gpu2"], GB, "direct")
    assert direct.bound_seconds == pytest.approx(2 * GB / 5e9, rel=1e-9)
    with pytest.raises(PlanError, match="give each target GPU once"):
        plan_bulk(topology, "cpu0", ["gpu0", "gpu0"], GB, "lp")


@pytest.mark.multiproc
def test_plan_h2d_cli(capsys):
    code, out, _ = run(
        capsys, "sim", "multipath", "h2d", "--topology", "dgx1-v100", "--bytes", "1G", "--gpus", "0", "--json"
    )
    planners = json.loads(out)["planners"]
    assert code == 0 and planners["direct"]["seconds"] / planners["lp"]["seconds"] >= 1.8
    assert sum(p["bytes"] for p in planners["lp"]["paths"]) == pytest.approx(1 << 30)
    code, out, _ = run(
        capsys, "sim", "multipath", "h2d", "--topology", "dgx1-v100", "--gpus", "0,1,2,3,4,5,6,7", "--json"
    )
    planners = json.loads(out)["planners"]
    assert planners["lp"]["seconds"] <= planners["direct"]["seconds"]
    code, out, _ = run(capsys, "sim", "multipath", "h2d", "--topology", "dgx1-v100", "--gpus", "0")
    assert code == 0 and "simulated only" in out
    code, _, err = run(capsys, "sim", "multipath", "h2d", "--topology", "dgx1-v100", "--gpus", "9")
    assert code == 2 and "GPU 9 out of range" in err


# -- the thesis's baselines, its key-value store, toll-inflight ---------------------------------------


def two_paths() -> tuple[PathTable, RequestStream]:
    """A hand-built host: cpu0 reaches gpu0 over its own switch at 10 GB/s or through gpu1 (8 GB/s
    PCIe, then NVLink); 1 MB requests, the second sent 1 us after the first, long before it ends."""
    devices = [
        Device("cpu0", "cpu"),
        Device("sw0", "pcie_switch"),
        Device("sw1", "pcie_switch"),
        Device("gpu0", "gpu"),
        Device("gpu1", "gpu"),
    ]
    links = [
        Link("cpu0", "sw0", "pcie", 1, 10.0, 1.0),
        Link("sw0", "gpu0", "pcie", 1, 10.0, 1.0),
        Link("cpu0", "sw1", "pcie", 1, 8.0, 1.0),
        Link("sw1", "gpu1", "pcie", 1, 8.0, 1.0),
        Link("gpu1", "gpu0", "nvlink", 2, 40.0, 1.0),
    ]
    kind = RequestType("h2d", 1e6, (CommPath(("cpu0", "sw0", "gpu0")), CommPath(("cpu0", "sw1", "gpu1", "gpu0"))))
    return PathTable(Topology("two-paths", devices, links), PathSet((kind,))), stream([0.0, 1e-6])


def test_completion_fed_greedy_cannot_see_a_request_in_flight_and_greedy_queue_can():
    table, requests = two_paths()
    assert table.traverse(0, 1e6) < table.traverse(1, 1e6) < table.traverse(0, 1e6) + 1e6 / 10e9
    # nothing has completed when the second request comes: the thesis's greedy rules see two idle paths
    for name in FAITHFUL_GREEDY:
        assert select(table, requests, make_selector(name)).path.tolist() == [0, 0], name
    # the model's queue holds the first request: greedy-queue (the k = 1 LP) sends the second around it
    assert select(table, requests, make_selector("greedy-queue")).path.tolist() == [0, 1]
    # so does the dispatcher that counts its own requests in flight, reading no queue
    assert select(table, requests, make_selector("toll-inflight")).path.tolist() == [0, 1]
    # once the first has completed, the completion-fed greedy sees an idle direct path again
    later = stream([0.0, 1.0])
    assert select(table, later, make_selector("greedy-intra")).path.tolist() == [0, 0]


def test_toll_jct_reads_the_latest_completed_jct():
    workload = load_workload(load_preset("leo-fnic"), "kvs:load=1,n=5")
    table, requests = workload.table, workload.stream
    literal, current = Toll(), make_selector("toll-jct")
    for toll in (literal, current):
        toll.start(table, requests)
        toll.observe(0, 0, 12e-6, table.traverse(0, 72))  # a GET on the accelerator queued to 12 us
    assert literal.k_hat[0] == current.k_hat[0] == 1
    # base time T: 1 x toll (0.2 us) + T(accelerator) 3.4 us, below the CPU's 10.8 us
    assert literal.choose(1, None) == 0
    # the current JCT, 12 us, in place of T: the CPU
    assert current.choose(1, None) == 1


def kvs_devices(table: PathTable, path: int) -> tuple[str, ...]:
    return table.paths[path].path.devices


def test_kvs_puts_never_take_the_accelerator_and_each_key_stays_in_order():
    topology = load_preset("leo-fnic")
    workload = load_workload(topology, "kvs:ycsb=b,put=0.2,get=0.8,load=1.25,n=400,keys=20,seed=4")
    requests, keys, table = workload.stream, workload.keys, workload.table
    puts = np.flatnonzero(requests.kind == 1)
    assert puts.size > 50 and (requests.after >= 0).sum() > 100
    assert [p.path.name for p in table.paths] == [
        "nic0>fpga0>nic0>cpu0>nic0",
        "nic0>cpu0>nic0>cpu0>nic0",
        "nic0>cpu0>nic0>cpu0>nic0",
    ]
    assert table.cores == {"cpu0": 8}
    names = [n for n in SELECTORS if n != "lp"]
    for name in names + ["lp"]:
        short = (
            requests
            if name != "lp"
            else RequestStream(*(a[:60] for a in (requests.arrival, requests.kind, requests.nbytes, requests.after)))
        )
        selection = select(table, short, make_selector(name, k=2))
        assert not any("fpga0" in kvs_devices(table, p) for p in selection.path[short.kind == 1]), name
        if name == "direct":  # a GET after a PUT still in progress takes its path (the CPU)
            chosen = selection.path[(short.kind == 0) & selection.decided]
            assert all("fpga0" in kvs_devices(table, p) for p in chosen)
            pinned = selection.path[(short.kind == 0) & ~selection.decided]
            assert pinned.size > 0 and all("fpga0" not in kvs_devices(table, p) for p in pinned)
        priced = price_selection(table, short, selection.path)
        for finish in (selection.completion, priced.jct + short.arrival):
            for key in np.unique(keys[: len(short)]):
                mine = np.flatnonzero(keys[: len(short)] == key)
                for p in mine[short.kind[mine] == 1]:
                    earlier, later = mine[mine < p], mine[mine > p]
                    # a PUT ends after the key's request before it, every later request after the PUT
                    assert earlier.size == 0 or finish[p] >= finish[earlier[-1]] - 1e-12, (name, key)
                    assert np.all(finish[later] >= finish[p] - 1e-12), (name, key)
    selection = select(table, requests, make_selector("toll-inflight"))  # GETs do use the CPU under load
    assert any(p == 1 for p in selection.path[requests.kind == 0])


def test_kvs_with_no_contention_every_selector_is_direct():
    topology = load_preset("leo-fnic")
    workload = load_workload(topology, "kvs:ycsb=b,put=0.3,get=0.7,rate=10000,n=40,keys=5")
    direct = select(workload.table, workload.stream, make_selector("direct"))
    for name in SELECTORS:  # the default 3-9 us jitter: the CPU path is 7.4 us slower than the accelerator's
        selection = select(workload.table, workload.stream, make_selector(name, k=3))
        assert np.array_equal(selection.path, direct.path), name
        np.testing.assert_allclose(selection.completion, direct.completion)
    alone = [workload.table.traverse(p, 72) for p in direct.path]
    np.testing.assert_allclose(price_selection(workload.table, workload.stream, direct.path).jct, alone, rtol=1e-6)
    assert alone[0] == pytest.approx(0.2e-6 + 2 * 0.1e-6 + 2 * 1.5e-6 + 72 / 12.5e9 + 72 / 11.13e9)


@pytest.mark.parametrize(
    "workload, message",
    [
        ("kvs:rate=0", "rate must be > 0"),
        ("kvs:rate=-5,ycsb=b", "rate must be > 0"),
        ("kvs:load=0", "load must be > 0"),
        ("kvs:load=1,get=0.5,put=0.4", "must be >= 0 and sum to 1"),
        ("kvs:load=1,cores=0", "cores must be >= 1"),
        ("kvs:load=1,ycsb=a", "ycsb must be one of c, b"),
        ("kvs:load=1,colour=red", "bad workload option 'colour=red'"),
        ("kvs:ycsb=c", "exactly one of load"),
    ],
)
def test_bad_kvs_options_are_one_line_and_exit_2(capsys, workload, message):
    code, out, err = run(capsys, "sim", "multipath", "simulate", "--topology", "leo-fnic", "--workload", workload)
    assert code == 2 and message in err and err.count("\n") == 1 and out == ""


def test_kvs_defaults_are_the_thesis_testbed():
    spec = parse_kvs("kvs:load=1")
    assert (spec.get, spec.put, spec.key, spec.value, spec.cores) == (1.0, 0.0, 8, 64, 8)
    assert parse_kvs("kvs:ycsb=b,load=1").put == 0.05
    workload = load_workload(load_preset("leo-fnic"), "kvs:load=1,n=10")
    # the accelerator serves 3x the 8 cores together; the CPU adds a third of its capacity
    assert workload.direct_rate() == pytest.approx(5e6)
    assert workload.combined_rate() == pytest.approx(5e6 + 8 / 4.8e-6)
    # on an NVSwitch server the first GPU is the accelerator, behind the NIC's PCIe switch
    gpu = load_workload(load_preset("dgx-a100"), "kvs:load=1,n=10")
    assert gpu.table.paths[0].path.devices[:3] == ("nic0", "pcie0", "gpu0")


def test_sweep_cli_reports_sustainable_throughput_and_draws_the_curves(capsys, tmp_path):
    code, out, _ = run(
        capsys,
        "sim",
        "multipath",
        "simulate",
        "--topology",
        "leo-fnic",
        "--workload",
        "kvs:ycsb=c,n=200",
        "--sweep",
        "0.3,1.0,1.4",
        "--selector",
        "direct,greedy-intra,toll-inflight",
        "--bound-us",
        "6",
        "--json",
        "--png",
        str(tmp_path / "curve.png"),
    )
    result = json.loads(out)
    assert code == 0 and result["bound_s"] == pytest.approx(6e-6)
    assert result["direct_rate_per_s"] == pytest.approx(5e6)
    rows = result["selectors"]["toll-inflight"]
    assert [r["load"] for r in rows] == [0.3, 1.0, 1.4]
    assert [r["rate_per_s"] for r in rows] == pytest.approx([1.5e6, 5e6, 7e6])
    assert all(r["median_s"] <= r["p99_s"] for r in rows)
    assert result["sustainable_per_s"]["toll-inflight"] >= result["sustainable_per_s"]["direct"] > 0
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"
    code, _, err = run(
        capsys,
        "sim",
        "multipath",
        "simulate",
        "--topology",
        "leo-fnic",
        "--workload",
        "kvs:ycsb=c",
        "--sweep",
        "0.5,-1",
    )
    assert code == 2 and "--sweep loads must be finite and > 0" in err


def test_sustainable_throughput_is_the_last_rate_under_the_bound():
    points = sweep(load_preset("leo-fnic"), "kvs:n=100", [0.3, 0.6], ["direct"])
    assert sustainable(points, "direct", 1.0) == pytest.approx(3e6)
    assert sustainable(points, "direct", 1e-9) == 0.0


def test_simulator_runs_as_many_computes_at_once_as_a_device_has_cores():
    topology = load_preset("leo-fnic")
    tasks = [Compute(f"c{i}", "cpu0", 1.0) for i in range(5)]
    assert simulate(topology, tasks, timeline=False).makespan == pytest.approx(5.0)
    assert simulate(topology, tasks, timeline=False, cores={"cpu0": 2}).makespan == pytest.approx(3.0)
    with pytest.raises(Exception, match="cores"):
        simulate(topology, tasks, cores={"cpu0": 0})


def test_a_path_with_its_own_compute_pays_it_at_the_first_visit_and_splits_at_a_second_round_trip(tmp_path):
    topology = load_preset("leo-fnic")
    kind = RequestType("get", 72.0, (CommPath(("nic0", "cpu0", "nic0", "cpu0", "nic0"), (("cpu0", 4.8e-6),)),))
    write_paths(PathSet((kind,)), tmp_path / "p.yaml")
    assert "compute: {cpu0: 4.8e-06}" in (tmp_path / "p.yaml").read_text()
    again = read_paths(tmp_path / "p.yaml")
    assert again == PathSet((kind,))
    steps = PathTable(topology, again).paths[0].steps
    assert [type(s).__name__ for s in steps] == ["Segment", "ComputeStep", "Segment", "Segment"]
    assert [s.devices for s in steps if not hasattr(s, "seconds")] == [
        ("nic0", "cpu0"),
        ("cpu0", "nic0", "cpu0"),
        ("cpu0", "nic0"),
    ]


def test_modern_hosts_and_mma_h20_split():
    a100, h100 = load_preset("dgx-a100"), load_preset("hgx-h100")
    assert {l.bandwidth_gbps for l in a100.links if l.kind == "pcie"} == {24.0}  # gen4 x16
    assert {l.bandwidth_gbps for l in h100.links if l.kind == "pcie"} == {48.0}  # gen5 x16
    h20 = load_preset("hgx-h20")
    direct = plan_bulk(h20, "cpu0", ["gpu0"], float(1 << 30), "direct")
    split = plan_bulk(h20, "cpu0", ["gpu0"], float(1 << 30), "lp")
    seconds = {
        name: simulate(h20, plan.tasks(), timeline=False).makespan for name, plan in (("direct", direct), ("lp", split))
    }
    gbps = (1 << 30) / seconds["lp"] / 1e9
    assert gbps == pytest.approx(245, rel=0.10)  # MMA, arXiv 2512.16056: 245 GB/s on 8 x H20
    assert seconds["direct"] / seconds["lp"] == pytest.approx(4.62, rel=0.10)  # 4.62x one path


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lp_is_the_optimum_at_microseconds(seed):
    """A key-value host's requests take microseconds: the MILP is solved in units of a traverse
    time, or HiGHS's tolerances (1e-7) swallow whole services given in seconds."""
    workload = load_workload(load_preset("leo-fnic"), f"kvs:cores=1,cpu_us=0.6,load=1.6,n=7,seed={seed}")
    table, requests = workload.table, workload.stream
    lp = float(select(table, requests, make_selector("lp", k=7)).model_jct(requests).sum())
    brute = min(model_total(table, requests, p) for p in itertools.product(range(2), repeat=7))
    greedy = float(select(table, requests, make_selector("greedy-queue")).model_jct(requests).sum())
    assert lp == pytest.approx(brute, rel=1e-6) and lp <= greedy * (1 + 1e-9)


def test_lp_holds_a_path_that_crosses_a_link_twice():
    """The CPU's GET path crosses nic0 -> cpu0 in both round trips: the MILP's backlog ceilings add
    both, or the problem it builds is infeasible."""
    workload = load_workload(load_preset("leo-fnic"), "kvs:ycsb=b,load=1.1,n=60,seed=7")
    selection = select(workload.table, workload.stream, make_selector("lp", k=8))
    assert np.all(selection.path >= 0)


def test_lp_statistics_come_with_each_selection():
    """Every decided request is one MILP solve, counted per run (a second run of the same selector
    starts from zero); a rule that solves nothing reports none."""
    workload = load_workload(load_preset("leo-fnic"), "kvs:ycsb=b,load=1.1,n=40,seed=7")
    selector = make_selector("lp", k=4)
    first, second = (select(workload.table, workload.stream, selector) for _ in range(2))
    assert first.lp_stats == second.lp_stats == SolveStats(int(first.decided.sum()), 0)
    assert 0 < first.lp_stats.solves <= 40
    assert select(workload.table, workload.stream, make_selector("toll-inflight")).lp_stats is None
    point = sweep(load_preset("leo-fnic"), "kvs:ycsb=b,n=20", [1.1], ["lp", "direct"], k=3, seeds=2)[0]
    assert list(point.lp_stats) == ["lp"] and point.lp_stats["lp"].solves >= 2


def test_greedy_queue_prices_as_the_simulator_and_loses_to_a_rule_by_myopia():
    """On the key-value store past the accelerator's capacity, greedy-queue's model completion times
    are the simulator's (YCSB-C: the same mean and median, every request within 2%), so its loss to
    toll-inflight is not a pricing error: it sends GETs to the queued accelerator that toll-inflight
    sends to the CPU."""
    workload = load_workload(load_preset("leo-fnic"), "kvs:ycsb=c,n=1000,load=1.15,seed=0")
    table, stream = workload.table, workload.stream
    medians, accelerator = {}, {}
    for name in ("greedy-queue", "toll-inflight"):
        selection = select(table, stream, make_selector(name))
        simulated = price_selection(table, stream, selection.path).jct
        model = selection.model_jct(stream)
        np.testing.assert_allclose(model, simulated, rtol=0.02)
        assert model.mean() == pytest.approx(simulated.mean(), rel=2e-3)
        assert np.median(model) == pytest.approx(np.median(simulated), rel=2e-3)
        medians[name] = float(np.median(simulated))
        accelerator[name] = int(np.sum(selection.path == 0))
    assert medians["greedy-queue"] > 1.5 * medians["toll-inflight"]
    assert accelerator["greedy-queue"] > accelerator["toll-inflight"]


COPIES = "poisson:load=1.2,size=4M,types=cpu0:gpu0"


class _Watched(TollBytes):
    """toll-bytes that records how far its own estimate is from the model's queues at each decision."""

    def start(self, table, stream):
        super().start(table, stream)
        self.gap = 0.0

    def choose(self, t, backlog):
        choice = super().choose(t, backlog)
        self.gap = max(self.gap, float(np.abs(self.left() - backlog).max()))
        return choice


@pytest.mark.parametrize("topology,spec", [("hgx-h100", COPIES + ",n=120"), ("leo-fnic", "kvs:ycsb=b,load=1.2,n=300")])
def test_toll_bytes_estimate_is_the_models_queue_where_the_model_is_the_world(topology, spec):
    """From its own dispatches, the bytes' drain at link rates and its completions, a single
    dispatcher knows the model's backlog exactly (links shared between paths, a multi-core CPU and
    PUT ordering included): the completion cap never cuts below it."""
    workload = load_workload(load_preset(topology), spec)
    selector = _Watched()
    select(workload.table, workload.stream, selector)
    assert selector.gap < 1e-15
    assert len(selector.marks) < len(workload.stream)  # completions were heard


def test_toll_bytes_caps_its_estimate_at_a_completion():
    """Two 4 MiB copies sent together on cpu0 > pcie0 > gpu0 (48 GB/s links) leave 2 x 4 MiB / 48 GB/s
    on both links; the first completing after 1 us (faster than the fluid) leaves exactly the
    second's 4 MiB / 48 GB/s, and the second's completion leaves nothing."""
    table = load_workload(load_preset("hgx-h100"), COPIES + ",n=2").table
    size = float(4 << 20)
    stream = RequestStream(np.zeros(2), np.zeros(2, dtype=np.int64), np.full(2, size), np.full(2, -1))
    selector = TollBytes()
    selector.start(table, stream)
    selector.decided(0, 0)
    selector.decided(1, 0)
    links = table.elements[0]
    assert links.shape == (2,)
    np.testing.assert_allclose(selector.left()[links], 2 * size / 48e9, rtol=1e-12)
    selector.observe(0, 0, 1e-6, table.traverse(0, size))
    np.testing.assert_allclose(selector.left()[links], size / 48e9, rtol=1e-12)
    selector.observe(1, 0, 2e-6, table.traverse(0, size))
    assert np.all(selector.left() == 0)


def test_toll_bytes_prices_shared_links_on_copies_and_keeps_the_toll_on_the_key_value_store():
    """On 4 MiB host -> GPU copies (hgx-h100, 1.2x the direct path) toll-bytes is within 5% of
    greedy-queue's mean and beats toll-inflight, which counts requests per path and cannot see that
    two paths share the CPU's PCIe uplink; on the key-value store its toll keeps the accelerator's
    queue short, where greedy-queue's median is over 1.5x higher."""
    means = {}
    copies = load_workload(load_preset("hgx-h100"), COPIES + ",n=150")
    for name in ("toll-bytes", "greedy-queue", "toll-inflight"):
        path = select(copies.table, copies.stream, make_selector(name)).path
        means[name] = float(price_selection(copies.table, copies.stream, path).jct.mean())
    assert means["toll-bytes"] <= 1.05 * means["greedy-queue"] and means["toll-bytes"] < means["toll-inflight"]
    kvs = load_workload(load_preset("leo-fnic"), "kvs:ycsb=c,n=1000,load=1.15,seed=0")
    medians = {
        name: float(
            np.median(
                price_selection(kvs.table, kvs.stream, select(kvs.table, kvs.stream, make_selector(name)).path).jct
            )
        )
        for name in ("toll-bytes", "greedy-queue")
    }
    assert medians["greedy-queue"] > 1.5 * medians["toll-bytes"]
