import json

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from commgraph.cli.main import main
from commgraph.errors import PlanError, SimulationError, TopologyError
from commgraph.plan.assignment import max_assignment
from commgraph.plan.coflow import SCHEDULERS, bssi_order, dscp, hermod_keys, schedule
from commgraph.plan.matching import alg3, bvn, lower_bound
from commgraph.sim import Compute, Transfer, simulate
from commgraph.sim.coflow import Coflow, coflow_times
from commgraph.study.coflow import iteration_seconds, run_schedule
from commgraph.topology import Device, Link, Topology, load_preset
from commgraph.workload import Layout, ModelSpec, build_iteration, gpu, model
from commgraph.workload.collectives import path_latency, ring_allreduce, token_counts
from commgraph.workload.floor import iteration_floor


def star(n, bandwidth=10.0, latency_us=0.0):
    """n GPUs on one non-blocking switch: every port runs at ``bandwidth`` GB/s."""
    devices = [Device(f"gpu{i}", "gpu") for i in range(n)] + [Device("sw", "switch")]
    return Topology("star", devices, [Link(f"gpu{i}", "sw", "infiniband", 1, bandwidth, latency_us) for i in range(n)])


@pytest.mark.parametrize("n", [2, 3, 8])
def test_ring_allreduce_takes_the_alpha_beta_time(n):
    B, link_latency, S = 10e9, 1.5e-6, 64e6
    t = star(n, B / 1e9, link_latency * 1e6)
    flows = ring_allreduce(n, S)
    gpus = [f"gpu{i}" for i in range(n)]
    tasks = [
        Transfer(f"r{k}", gpus[a], gpus[b], size, overhead_s=flows.overhead_hops * path_latency(t, gpus[a], gpus[b]))
        for k, (a, b, size) in enumerate(zip(flows.src, flows.dst, flows.bytes))
    ]
    alpha = 2 * link_latency  # two links per route
    assert simulate(t, tasks).makespan == pytest.approx(2 * (n - 1) / n * S / B + 2 * (n - 1) * alpha, rel=1e-12)


def _free_pipeline(stages):
    """GPUs joined by links so fast and close that communication is free."""
    return star(stages, bandwidth=1e12, latency_us=0.0)


DENSE = ModelSpec("test-dense", layers=8, hidden=1024, heads=8, seq_len=512, micro_batch=2, vocab=0)


@pytest.mark.parametrize("p,m,v", [(4, 8, 1), (4, 4, 1), (2, 7, 1), (4, 8, 2)])
def test_1f1b_with_free_communication_has_the_textbook_bubble(p, m, v):
    layout = Layout(1, p, 1, microbatches=m, schedule="interleaved" if v > 1 else "1f1b", chunks=v)
    g = gpu("h100")
    it = build_iteration(DENSE, layout, g, _free_pipeline(p))
    result = simulate(_free_pipeline(p), it.tasks, timeline=False)
    per_layer = g.seconds(DENSE.attention_flops() + DENSE.mlp_flops())
    busy = m * 3 * per_layer * DENSE.layers / p  # forward + backward of every micro-batch on one stage
    bubble = 1 - busy / result.makespan
    assert bubble == pytest.approx((p - 1) / (v * m + p - 1), rel=1e-6)


@pytest.mark.parametrize("n", [3, 8, 16])
def test_bvn_reaches_the_lower_bound_and_alg3_gap_is_reported(n, capsys):
    rng = np.random.default_rng(n)
    for trial in range(5):
        demand = rng.exponential(size=(n, n)) * (rng.random((n, n)) < 0.6)
        np.fill_diagonal(demand, 0)
        for matcher in (bvn, alg3):
            plan = matcher(demand)
            sent = np.zeros_like(demand)
            for rows, cols, amount in zip(plan.rows, plan.cols, plan.sent):
                assert len(set(rows.tolist())) == rows.size and len(set(cols.tolist())) == cols.size  # matchings
                np.add.at(sent, (rows, cols), amount)
            assert np.allclose(sent, demand, rtol=0, atol=1e-9)
        assert bvn(demand).length == pytest.approx(lower_bound(demand), rel=1e-12)
        gap = alg3(demand).length / lower_bound(demand)
        assert gap >= 1 - 1e-12
        print(f"n={n} trial {trial}: alg3 / lower bound = {gap:.4f}")


def _ties(rng, n):
    """A matrix with many optimal matchings: small integers, most entries zero."""
    return rng.integers(0, 3, size=(n, n)).astype(np.float64) * (rng.random((n, n)) < 0.5)


def test_compiled_assignment_picks_scipys_matching_among_ties():
    rng = np.random.default_rng(3)
    for trial in range(400):
        n = 1 + trial % 11
        weight = _ties(rng, n) if trial % 2 else rng.random((n, n))
        assert max_assignment(weight).tolist() == linear_sum_assignment(-weight)[1].tolist(), trial


def test_alg3_phases_are_those_of_the_scipy_loop():
    """Algorithm 3 written with scipy's assignment, phase by phase: the compiled one gives the
    same phases, entries and weights to the bit."""

    def reference(demand):
        T = demand.copy()
        tol = T.max(initial=0.0) * 1e-12
        T[T <= tol] = 0.0
        phases = []
        while np.count_nonzero(T):
            r, c = linear_sum_assignment(-T)
            keep = T[r, c] > 0
            weight = T[r, c][keep].min()
            phases.append((r[keep].tolist(), c[keep].tolist(), np.minimum(T[r, c][keep], weight).tolist(), weight))
            left = T[r, c] - weight
            T[r, c] = np.where(left > tol, left, 0.0)
        return phases

    rng = np.random.default_rng(5)
    for trial in range(60):
        n = 2 + trial % 9
        demand = _ties(rng, n) * 1e6 if trial % 2 else rng.exponential(size=(n, n)) * (rng.random((n, n)) < 0.7)
        plan = alg3(demand)
        phases = zip(plan.rows, plan.cols, plan.sent, plan.weights)
        got = [(r.tolist(), c.tolist(), s.tolist(), w) for r, c, s, w in phases]
        assert got == reference(demand), trial
    assert alg3(np.zeros((3, 3))).rows == []


def test_alg3_pieces_wait_for_the_senders_and_receivers_previous_pieces():
    """Three ranks' all-to-all after two computations: every piece of Algorithm 3's phases, in
    order, waits for its sender's and its receiver's previous piece; a sender's first piece also
    waits for what its flows waited for; a pair's last piece keeps the pair's id."""
    t = star(3)
    demand = np.array([[0, 5, 2], [3, 0, 4], [1, 6, 0]], dtype=np.float64) * 1e6
    tasks = [Compute("c0", "gpu0", 1e-3), Compute("c1", "gpu1", 1e-3)]
    waits = {0: ("c0",), 1: ("c1",), 2: ()}
    for a, b in zip(*np.nonzero(demand)):
        tasks.append(Transfer(f"x{a}{b}", f"gpu{a}", f"gpu{b}", float(demand[a, b]), deps=waits[int(a)]))
    coflow = Coflow("a2a", "ep", 0, 0, tuple(range(2, len(tasks))))
    plan = schedule("fair", tasks, [coflow], t, matching="alg3")
    phases = alg3(demand)
    pieces = {t.id: t for t in plan.tasks if isinstance(t, Transfer)}
    assert len(pieces) == sum(len(r) for r in phases.rows) == len(plan.coflows[0].flows)
    assert any("#" in name for name in pieces)  # some pair is split over several phases
    pairs = [(a, b) for rows, cols in zip(phases.rows, phases.cols) for a, b in zip(rows.tolist(), cols.tolist())]
    last_out, last_in, k = {}, {}, 0
    for phase, (rows, cols, sent) in enumerate(zip(phases.rows, phases.cols, phases.sent)):
        for a, b, size in zip(rows.tolist(), cols.tolist(), sent.tolist()):
            k += 1
            name = f"x{a}{b}#{phase}" if (a, b) in pairs[k:] else f"x{a}{b}"  # the pair's last keeps its id
            piece = pieces[name]
            assert (piece.src, piece.dst, piece.bytes) == (f"gpu{a}", f"gpu{b}", size)
            previous = tuple(d for d in (last_out.get(a), last_in.get(b)) if d)
            assert piece.deps == (previous if a in last_out else tuple(dict.fromkeys((*waits[a], *previous))))
            last_out[a] = last_in[b] = name
    assert simulate(t, plan.tasks, timeline=False).makespan > 0


def test_bvn_all_to_all_runs_in_the_lower_bound_time_on_line_rate_ports():
    n, B = 6, 10e9
    t = star(n, B / 1e9)
    rng = np.random.default_rng(3)
    demand = rng.integers(0, 50, size=(n, n)) * 1e6
    np.fill_diagonal(demand, 0)
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    tasks = [Transfer(f"f{i}-{j}", f"gpu{i}", f"gpu{j}", float(demand[i, j])) for i, j in pairs]
    coflows = [Coflow("a2a", "ep", 0, 0, tuple(range(len(tasks))))]
    times = {m: run_schedule("fair", tasks, coflows, t, matching=m).result.makespan for m in ("direct", "bvn", "alg3")}
    assert times["bvn"] == pytest.approx(lower_bound(demand) / B, rel=1e-9)
    assert times["direct"] >= times["bvn"] * (1 - 1e-9) and times["alg3"] >= times["bvn"] * (1 - 1e-9)


def test_with_one_coflow_at_a_time_every_scheduler_takes_the_same_time():
    t = load_preset("2xhgx-h100-ib", speeds={"ib": 12.5, "pcie": 64})
    it = build_iteration(model("gpt3-13b"), Layout(2, 4, 1, microbatches=1), gpu("h100"), t)
    times = {name: run_schedule(name, it.tasks, it.coflows, t).result.makespan for name in SCHEDULERS}
    assert len(it.coflows) == 6  # three hand-offs forward, three backward, one after another
    assert np.allclose(list(times.values()), times["fair"], rtol=1e-12), times


def _cf(kind, mid, layer):
    return Coflow(f"{kind}{mid}.{layer}", kind, mid, layer, (0,))


def _order(coflows, **kw):
    keys = hermod_keys(coflows, **kw)
    return [coflows[i].id for i in np.lexsort(keys.T[::-1])]


def test_hermod_order_follows_tables_5_3_and_5_4():
    # Case I: the earlier micro-batch first, whatever the layer (MID over LID: Table 5.4 without DP)
    assert _order([_cf("ep", 1, 2), _cf("pp", 0, 9)]) == ["pp0.9", "ep1.2"]
    # Case II: EP and PP before DP; DP carries the last micro-batch's ID
    assert _order([_cf("dp", 3, 0), _cf("ep", 3, 5), _cf("pp", 3, 7)])[-1] == "dp3.0"
    # Case III: lower layer first among DP coflows, and among one micro-batch's coflows
    assert _order([_cf("dp", 3, 6), _cf("dp", 3, 1)]) == ["dp3.1", "dp3.6"]
    assert _order([_cf("ep", 2, 4), _cf("ep", 2, 1)]) == ["ep2.1", "ep2.4"]
    # DP present: a DP coflow never goes before an EP/PP coflow of the iteration
    mixed = [_cf("dp", 3, 0), _cf("ep", 0, 7), _cf("pp", 2, 3), _cf("ep", 3, 9)]
    assert _order(mixed)[-1] == "dp3.0"
    # interleaved 1F1B: EP > PP > DP within a micro-batch
    assert _order([_cf("dp", 3, 1), _cf("pp", 3, 1), _cf("ep", 3, 1)], interleaved=True) == ["ep3.1", "pp3.1", "dp3.1"]
    same = hermod_keys([_cf("pp", 3, 1), _cf("ep", 3, 1)])  # 1F1B: EP & PP share a class
    assert (same[0] == same[1]).all()


def test_dscp_packs_microbatch_type_and_layer_into_6_bits():
    coflows = [_cf("ep", 0, 0), _cf("pp", 2, 40), _cf("dp", 9, 95), _cf("dp", 1, 30)]
    codes = dscp(hermod_keys(coflows), 96)
    assert codes.tolist() == [0b000000, 0b010001, 0b111111, 0b001101]
    assert (codes < 64).all()
    interleaved = [_cf("pp", 2, 40), _cf("dp", 2, 40)]  # only DP sets the type bit
    assert dscp(hermod_keys(interleaved, interleaved=True), 96, interleaved=True).tolist() == [0b010001, 0b010101]


def test_sincronia_orders_a_small_coflow_on_the_bottleneck_first():
    t = star(3)
    tasks = [
        Transfer("big0", "gpu0", "gpu1", 9.0),
        Transfer("big1", "gpu2", "gpu1", 9.0),
        Transfer("small", "gpu0", "gpu1", 1.0),
    ]
    coflows = [Coflow("big", "dp", 0, 0, (0, 1)), Coflow("small", "pp", 0, 0, (2,))]
    assert bssi_order(tasks, coflows).tolist() == [1, 0]
    assert schedule("sincronia", tasks, coflows, t).tasks[2].priority == 0


def test_token_routing_is_seeded_and_conserves_tokens():
    a = token_counts(np.random.default_rng(1), 4, 8, 100, 2, 1.0)
    assert np.array_equal(a, token_counts(np.random.default_rng(1), 4, 8, 100, 2, 1.0))
    assert (a.sum(axis=1) == 200).all()
    uniform = token_counts(np.random.default_rng(1), 4, 8, 100, 2, float("inf"))
    assert uniform.sum() == 800


def test_moe_iteration_has_labelled_coflows_and_matchings_keep_the_bytes():
    t = load_preset("2xhgx-h100-ib", speeds={"ib": 12.5, "pcie": 64})
    it = build_iteration(model("qwen-moe-12l"), Layout(1, 2, 8, ep=8, microbatches=2), gpu("a100"), t)
    kinds = {c.kind for c in it.coflows}
    assert kinds == {"pp", "dp", "ep"}
    ep = [c for c in it.coflows if c.kind == "ep"]
    assert len(ep) == 12 // 2 * 2 * 2 * 2 * 2  # layers per stage x 2 all-to-alls x fwd/bwd x microbatches x stages
    assert {c.microbatch for c in ep} == {0, 1} and {c.layer for c in ep} == set(range(12))
    plan = schedule("hermod", it.tasks, it.coflows, t, matching="bvn")

    def total(tasks, cfs):
        return sum(tasks[i].bytes for c in cfs if c.kind == "ep" for i in c.flows)

    assert total(plan.tasks, plan.coflows) == pytest.approx(total(it.tasks, it.coflows), rel=1e-9)
    result = simulate(t, plan.tasks, timeline=False)
    start, finish = coflow_times(result.start, result.finish, plan.coflows)
    assert (finish >= start).all() and result.makespan > 0


def test_rail_and_full_bisection_fat_trees():
    rail = load_preset("fattree:k=4,server=hgx-h100,rail=1,bisection=full")
    nic_edges = {link.b for link in rail.links if link.a.startswith("s0.nic") and link.b.startswith("edge")}
    assert nic_edges == {"edge0.0", "edge0.1"}
    up = [link for link in rail.links if link.a.startswith("edge") and link.b.startswith("agg")]
    assert all(link.bandwidth_gbps == pytest.approx(8 * 50.0) for link in up)  # the H100 server's 8 NICs at 50 GB/s
    with pytest.raises(TopologyError, match="rail"):
        load_preset("fattree:k=4,rail=2")


def test_bad_inputs_fail_clearly():
    with pytest.raises(SimulationError, match="split"):
        Layout(1, 3, 1).check(model("gpt3-13b"))
    with pytest.raises(SimulationError, match="ep=3"):
        Layout(1, 1, 4, ep=3)
    with pytest.raises(SimulationError, match="GPUs"):
        build_iteration(model("gpt3-13b"), Layout(8, 4, 2), gpu("h100"), load_preset("hgx-h100"))
    with pytest.raises(PlanError, match="scheduler"):
        schedule("nope", [], [], star(2))
    with pytest.raises(PlanError, match="square"):
        bvn(np.ones((2, 3)))
    tasks = [Transfer("x", "gpu0", "gpu1", 1.0)]
    with pytest.raises(SimulationError, match="shares a transfer"):
        schedule("fair", tasks, [Coflow("a", "pp", 0, 0, (0,)), Coflow("b", "pp", 0, 0, (0,))], star(2))
    with pytest.raises(SimulationError, match="kind"):
        Coflow("a", "xx", 0, 0, (0,))


def test_cli_json_schema_and_outputs(tmp_path, capsys):
    png, trace = tmp_path / "t.png", tmp_path / "t.json"
    code = main(
        [
            "sim",
            "llm",
            "--model",
            "gpt3-13b",
            "--tp",
            "4",
            "--pp",
            "2",
            "--dp",
            "2",
            "--microbatches",
            "4",
            "--topology",
            "2xhgx-h100-ib",
            "--scheduler",
            "fair,hermod",
            "--json",
            "--png",
            str(png),
            "--trace",
            str(trace),
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert (
        set(report) == {"schedulers", "flows", "baseline", "ceiling", "iterations", "routing", "speeds"}
        and report["flows"] > 0
    )
    assert report["routing"] == "ecmp"
    top = report["ceiling"]
    assert report["baseline"] == "fair" and top["baseline_seconds"] == report["schedulers"]["fair"]["iteration_seconds"]
    assert top["ceiling"] == pytest.approx(top["baseline_seconds"] / top["free_communication_seconds"])
    assert top["exposed_share"] == pytest.approx(1 - top["free_communication_seconds"] / top["baseline_seconds"])
    assert top["link_seconds"] > 0 and top["bound_seconds"] >= top["free_communication_seconds"]
    for row in report["schedulers"].values():
        assert {"iteration_seconds", "tokens_per_second", "coflows", "speedup", "headroom_reached"} <= set(row)
        assert row["iteration_seconds"] >= top["bound_seconds"] * (1 - 1e-9)
        assert row["makespan_seconds"] >= top["floor_seconds"]
        span = report["schedulers"]["fair"]["makespan_seconds"]
        reached = (span - row["makespan_seconds"]) / (span - top["floor_seconds"])
        assert row["headroom_reached"] == pytest.approx(reached)
        assert set(row["coflows"]) == {"pp", "dp"}
        assert row["tokens_per_second"] == pytest.approx(4 * 4 * 2048 * 2 / row["iteration_seconds"])
    assert png.read_bytes()[:4] == b"\x89PNG"
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e["ph"] == "X" for e in events)
    assert main(["sim", "llm", "--model", "gpt3-13b", "--topology", "hgx-h100", "--scheduler", "nope"]) == 2
    assert "unknown scheduler" in capsys.readouterr().err


@pytest.mark.multiproc
@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [2, 4, 8])
def test_matching_all_to_all_equals_all_to_all_single_on_gloo(tmp_path, monkeypatch, workers):
    import os
    from pathlib import Path

    from forked import launch_forked

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"out": str(tmp_path), "seeds": [1, 2]}))
    tests = Path(__file__).parent
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")]))
    assert launch_forked([str(spec)], workers, grace=30, module="alltoall_driver", threads_per_worker=1) == 0
    for rank in range(workers):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert len(result) == 4
        for case, row in result.items():
            assert row["equal"] and row["counts_agree"], (rank, case)


# -- the thesis's regime (issue 33) ------------------------------------------------------------------


def _small(p=2, d=2, m=4, iterations=1, collective="allreduce", bandwidth=1e12):
    layout = Layout(1, p, d, microbatches=m)
    net = star(p * d, bandwidth=bandwidth)
    return net, build_iteration(DENSE, layout, gpu("h100"), net, iterations=iterations, dp_collective=collective)


@pytest.mark.parametrize("collective", ["allreduce", "zero2"])
def test_free_communication_gives_every_scheduler_the_compute_critical_path(collective):
    from commgraph.study.coflow import free_communication

    p, m = 2, 4
    net, it = _small(p=p, m=m, collective=collective)
    per_layer = gpu("h100").seconds(DENSE.attention_flops() + DENSE.mlp_flops())
    critical = (m + p - 1) * 3 * per_layer * DENSE.layers / p  # 1F1B: busy / (1 - bubble)
    slow_net, slow = _small(p=p, m=m, collective=collective, bandwidth=1.0)
    assert free_communication(slow_net, slow.tasks).makespan == pytest.approx(critical, rel=1e-9)
    for name in SCHEDULERS:
        zero = [replace_bytes(t) for t in it.tasks]
        assert simulate(_free_pipeline(p * 2), zero, timeline=False).makespan == pytest.approx(critical, rel=1e-9)
        assert iteration_seconds(run_schedule(name, it.tasks, it.coflows, net).result) >= critical * (1 - 1e-9)


def replace_bytes(task):
    from dataclasses import replace

    return replace(task, bytes=0.0, overhead_s=0.0) if isinstance(task, Transfer) else task


def test_megatron_never_runs_two_of_a_ranks_dp_buckets_at_once():
    net, it = _small(p=2, d=4, m=2, collective="zero2", bandwidth=5.0)
    outcome = run_schedule("megatron", it.tasks, it.coflows, net)
    tasks, start, finish = outcome.schedule.tasks, outcome.result.start, outcome.result.finish
    spans: dict[str, list[tuple[float, float, str]]] = {}
    for c in outcome.schedule.coflows:
        if c.kind != "dp":
            continue
        for i in c.flows:
            for rank in (tasks[i].src, tasks[i].dst):
                spans.setdefault(rank, []).append((start[i], finish[i], c.id))
    assert spans
    for rank, rows in spans.items():
        by_coflow = {}
        for s, f, cid in rows:
            lo, hi = by_coflow.get(cid, (np.inf, -np.inf))
            by_coflow[cid] = (min(lo, s), max(hi, f))
        ordered = sorted(by_coflow.values())
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(ordered, ordered[1:])), rank
    fair = run_schedule("fair", it.tasks, it.coflows, net)
    assert fair.result.makespan != outcome.result.makespan  # the stream changes what happens


def test_case_iii_next_forward_waits_for_its_layers_dp_and_overlaps_the_rest():
    net, it = _small(p=1, d=4, m=2, iterations=2, collective="zero2", bandwidth=2.0)
    keys = hermod_keys(it.coflows)
    assert keys.shape[1] == 5
    by_id = {c.id: k for c, k in zip(it.coflows, keys.tolist())}
    dp = [c for c in it.coflows if c.kind == "dp" and c.iteration == 0]
    assert all(by_id[c.id][0] == 1 for c in dp)  # after every coflow of iteration 0
    outcome = run_schedule("hermod", it.tasks, it.coflows, net)
    index = {t.id: i for i, t in enumerate(outcome.schedule.tasks)}
    start, finish = outcome.result.start, outcome.result.finish
    gather_end = {}
    for c in outcome.schedule.coflows:
        if c.id.startswith("dp.ag"):
            gather_end[c.layer] = max(gather_end.get(c.layer, 0.0), max(finish[i] for i in c.flows))
    for layer, end in gather_end.items():
        assert start[index[f"i1.c0.0.F0.L{layer}"]] >= end - 1e-12  # waits for its all-gather on replica 0
    first = start[index["i1.c0.0.F0.L0"]]
    assert first < max(gather_end.values())  # no barrier: iteration 1 starts while later layers gather


def test_hermod_orders_dp_among_the_next_iterations_first_microbatch_by_layer():
    mk = lambda cid, kind, mb, layer, it: Coflow(cid, kind, mb, layer, (0,), it)  # noqa: E731
    coflows = [
        mk("pp0", "pp", 3, 5, 0),
        mk("dp3", "dp", 3, 3, 0),
        mk("pp1", "pp", 0, 2, 1),
        mk("pp2", "pp", 0, 3, 1),
        mk("pp3", "pp", 1, 0, 1),
        mk("dp3b", "dp", 3, 3, 1),
    ]
    order = np.argsort(np.lexsort(hermod_keys(coflows).T[::-1]))
    ranked = [coflows[i].id for i in np.argsort(order)]
    assert ranked == ["pp0", "pp1", "dp3", "pp2", "pp3", "dp3b"]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--tp", "3", "--pp", "4", "--dp", "4"], "48 GPUs, the topology has 64"),
        (["--tp", "0"], "--tp must be >= 1"),
        (["--pp", "-1"], "--pp must be >= 1"),
        (["--tp", "4", "--pp", "4", "--dp", "8"], "128 GPUs, the topology has 64"),
    ],
)
def test_bad_layouts_are_one_line_and_exit_2(argv, message, capsys):
    code = main(["sim", "llm", "--model", "gpt3-13b", "--topology", "8xhgx-h100-ib", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_ep_not_dividing_experts_exits_2(capsys):
    code = main(
        [
            "sim",
            "llm",
            "--model",
            "mixtral-8x7b",
            "--topology",
            "hgx-h100",
            "--tp",
            "1",
            "--pp",
            "2",
            "--dp",
            "4",
            "--ep",
            "3",
        ]
    )
    assert code == 2 and "ep=3" in capsys.readouterr().err


def test_fat_tree_nics_wires_that_many_links_per_server():
    one = load_preset("fattree:k=2,server=hgx-h100,nics=1,latency=1,bisection=full")
    all8 = load_preset("fattree:k=2,server=hgx-h100,bisection=full")
    ib = lambda t: [l for l in t.links if l.kind == "infiniband" and ".nic" in l.a]  # noqa: E731
    assert len(ib(one)) == 2 and len(ib(all8)) == 16
    assert {l.latency_us for l in one.links if l.kind == "infiniband"} == {1.0}
    thesis = load_preset("hermod-thesis")
    assert len(thesis.gpus) == 1024 and len(ib(thesis)) == 128
    with pytest.raises(TopologyError, match="nics=3"):
        load_preset("fattree:k=2,server=hgx-h100,nics=3")
    with pytest.raises(TopologyError, match="nics must be"):
        load_preset("fattree:k=2,server=hgx-h100,nics=0")


def test_tensor_parallel_all_reduce_spreads_over_every_nvswitch_plane():
    net = load_preset("hgx-h100")
    layout = Layout(8, 1, 1, microbatches=1)
    it = build_iteration(DENSE, layout, gpu("h100"), net)
    per_gpu = sum(l.bandwidth_gbps for l in net.links if l.a == "gpu0" and l.kind == "nvswitch") * 1e9
    S, n = DENSE.activation_bytes(), 8
    ring = 2 * (n - 1) / n * S / per_gpu + 2 * (n - 1) * 2e-6  # two 1 us hops per step
    compute = gpu("h100").seconds((DENSE.attention_flops() + DENSE.mlp_flops()) / 8)
    forward = next(t for t in it.tasks if t.id == "c0.0.F0.L0")
    assert forward.seconds == pytest.approx(compute + 2 * ring, rel=1e-6)


def test_zero2_splits_each_layers_dp_into_reduce_scatter_then_all_gather():
    _, plain = _small(p=1, d=4, m=1)
    _, zero = _small(p=1, d=4, m=1, collective="zero2")
    dp = lambda it: [c for c in it.coflows if c.kind == "dp"]  # noqa: E731
    assert len(dp(zero)) == 2 * len(dp(plain))
    size = lambda it, c: sum(it.tasks[i].bytes for i in c.flows)  # noqa: E731
    assert sum(size(zero, c) for c in dp(zero)) == pytest.approx(sum(size(plain, c) for c in dp(plain)))


def test_table_5_2_naive_priorities_order_around_the_baseline():
    """Table 5.2: DP-first slows training, PP-first and EP-first speed it up, against no
    prioritisation (``fair``). A small MoE on 4 one-NIC servers, EP groups across servers."""
    spec = ModelSpec(
        "moe-small", layers=4, hidden=1024, heads=16, seq_len=1024, micro_batch=2, vocab=0, experts=8, top_k=2, ffn=2048
    )
    net = load_preset(
        "fattree:k=4,server=hgx-h100,nics=1,latency=1,bisection=full", speeds={"ib": 100 / 8, "pcie": 64.0}
    )
    it = build_iteration(spec, Layout(tp=2, pp=2, dp=8, ep=8, microbatches=4), gpu("h100"), net)
    assert {c.kind for c in it.coflows} == {"dp", "pp", "ep"}
    host = {d.id: d.host for d in net.devices}
    assert any(host[it.tasks[i].src] != host[it.tasks[i].dst] for c in it.coflows if c.kind == "ep" for i in c.flows)
    seconds = {
        name: run_schedule(name, it.tasks, it.coflows, net, matching="direct").result.makespan
        for name in ("fair", "dp-first", "pp-first", "ep-first")
    }
    speedup = {name: seconds["fair"] / s for name, s in seconds.items()}
    assert speedup["dp-first"] < 0.95
    assert speedup["pp-first"] > 1.02
    assert speedup["ep-first"] > 1.005


def _moe_small():
    return ModelSpec(
        "moe-small", layers=4, hidden=1024, heads=16, seq_len=1024, micro_batch=2, vocab=0, experts=8, top_k=2, ffn=2048
    )


def _ep_bytes(it):
    return {it.tasks[i].id: it.tasks[i] for c in it.coflows if c.kind == "ep" for i in c.flows}


@pytest.mark.slow
def test_server_ep_flows_sum_the_groups_that_span_the_same_servers():
    net = load_preset("fattree:k=4,server=hgx-h100,nics=1,latency=1,bisection=full")
    layout = Layout(tp=2, pp=2, dp=8, ep=8, microbatches=2)  # EP group t: tp rank t of the 8 replicas
    per_gpu = build_iteration(_moe_small(), layout, gpu("h100"), net)
    per_server = build_iteration(_moe_small(), layout, gpu("h100"), net, ep_flows="server")
    gpus, servers = _ep_bytes(per_gpu), _ep_bytes(per_server)
    assert len(servers) == len(gpus) // 2
    for name, flow in servers.items():  # exchange 0 carries groups 0 and 1: pair i-j sums theirs
        other = name.replace(".g0.", ".g1.")
        assert flow.bytes == gpus[name].bytes + gpus[other].bytes
        assert (flow.src, flow.dst) == (gpus[name].src, gpus[name].dst)  # tp rank 0: the leaders
    assert [t.seconds for t in per_server.tasks if not isinstance(t, Transfer)] == [
        t.seconds for t in per_gpu.tasks if not isinstance(t, Transfer)
    ]  # expert time per GPU as before
    plan = schedule("hermod", per_server.tasks, per_server.coflows, net)  # Algorithm 3 over servers
    for name, flow in servers.items():
        pieces = [t for t in plan.tasks if t.id == name or t.id.startswith(name + "#")]
        assert pieces[-1].id == name and sum(p.bytes for p in pieces) == pytest.approx(flow.bytes, rel=1e-12)


def test_server_ep_flows_leave_out_only_the_tokens_inside_a_server():
    net = load_preset("fattree:k=4,server=hgx-h100,nics=1,latency=1,bisection=full")
    layout = Layout(tp=2, pp=2, dp=4, ep=8, microbatches=1)  # one EP group: both GPUs of the 4 replicas
    per_gpu = build_iteration(_moe_small(), layout, gpu("h100"), net)
    per_server = build_iteration(_moe_small(), layout, gpu("h100"), net, ep_flows="server")
    replica = {g.id: (r // layout.tp) % layout.dp for r, g in enumerate(net.gpus)}
    flows = _ep_bytes(per_gpu).values()
    across = sum(f.bytes for f in flows if replica[f.src] != replica[f.dst])
    assert across < sum(f.bytes for f in flows)
    assert sum(f.bytes for f in _ep_bytes(per_server).values()) == across
    assert len(_ep_bytes(per_gpu)) == 16 * 8 * 7 and len(_ep_bytes(per_server)) == 16 * 4 * 3  # 16 all-to-alls


def test_server_ep_flows_with_one_gpu_per_server_build_the_same_dag():
    net = load_preset("fattree:k=4,server=hgx-h100,nics=1,latency=1,bisection=full")
    layout = Layout(tp=1, pp=2, dp=8, ep=4, microbatches=2)
    per_gpu = build_iteration(_moe_small(), layout, gpu("h100"), net, iterations=2, dp_collective="zero2")
    per_server = build_iteration(
        _moe_small(), layout, gpu("h100"), net, iterations=2, dp_collective="zero2", ep_flows="server"
    )
    assert per_server.tasks == per_gpu.tasks and per_server.coflows == per_gpu.coflows
    with pytest.raises(SimulationError, match="ep flows"):
        build_iteration(_moe_small(), layout, gpu("h100"), net, ep_flows="rack")


def test_link_bound_is_the_busiest_link_directions_bytes_per_iteration():
    """Two 1 GB transfers one after the other over one 10 GB/s link, and 0.5 GB back: the a -> b
    direction needs 0.2 s, 0.1 s per iteration of two; the bound is max(free, link) and its ceiling
    baseline / bound."""
    from commgraph.sim import simulate
    from commgraph.sim.dag import Transfer
    from commgraph.study.coflow import ceiling, link_bound
    from commgraph.topology.model import Device, Link, Topology

    net = Topology("line", [Device("a", "gpu"), Device("b", "gpu")], [Link("a", "b", "pcie", 1, 10.0, 0.0)])
    tasks = [Transfer("x", "a", "b", 1e9), Transfer("y", "a", "b", 1e9, deps=("x",)), Transfer("z", "b", "a", 5e8)]
    result = simulate(net, tasks, timeline=False)
    assert result.link_seconds().tolist() == pytest.approx([0.2, 0.05])
    assert link_bound(result, 2) == pytest.approx(0.1)
    top = ceiling(1.0, 0.05, link_bound(result, 2))
    assert top["bound_seconds"] == pytest.approx(0.1) and top["bound_ceiling"] == pytest.approx(10.0)
    assert ceiling(1.0, 0.5, 0.1)["bound_seconds"] == 0.5


def test_cli_keeps_the_presets_speeds_and_network_gbps_overrides_in_gbits(capsys):
    argv = [
        "sim",
        "llm",
        "--model",
        "gpt3-13b",
        "--tp",
        "4",
        "--pp",
        "2",
        "--dp",
        "2",
        "--microbatches",
        "2",
        "--topology",
        "2xhgx-h100-ib",
        "--scheduler",
        "megatron",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "network 400 Gbit/s, ecmp" in out  # the preset's NICs
    assert "link speeds per direction: nv1 20.6, pcie 48, ib 50 GB/s (hgx-h100's preset)" in out
    assert main([*argv, "--network-gbits", "100", "--routing", "spray", "--speeds", "pcie=64"]) == 0
    out = capsys.readouterr().out
    assert "network 100 Gbit/s, spray" in out and "floor (every dependency kept" in out
    assert "nv1 20.6 GB/s (hgx-h100's preset); pcie 64, ib 12.5 GB/s (overridden)" in out
    assert main([*argv, "--network-gbits", "100", "--json"]) == 0
    speeds = json.loads(capsys.readouterr().out)["speeds"]
    assert speeds["gbps"]["ib"] == 12.5 and speeds["sources"]["ib"] == "overridden"
    assert speeds["gbps"]["pcie"] == 48.0 and speeds["sources"]["pcie"] == "hgx-h100's preset"
    assert main([*argv, "--network-gbits", "0"]) == 2
    assert "--network-gbits must be > 0 (Gbit/s)" in capsys.readouterr().err
    assert main([*argv, "--network-gbps", "100"]) == 0  # the old spelling, hidden
    assert "network 100 Gbit/s" in capsys.readouterr().out


@pytest.mark.parametrize("iterations", [1, 2, 5])
def test_floor_never_exceeds_the_simulated_time_without_communication(iterations):
    """One GPU, no transfer: the makespan is the computations' sum, which the floor equals in exact
    arithmetic; floating sums that round differently never put the floor above it."""
    net = Topology("one", [Device("a", "gpu")], [])
    tiny = ModelSpec("tiny", layers=3, hidden=1024, heads=8, seq_len=512, micro_batch=1, vocab=1000)
    it = build_iteration(tiny, Layout(1, 1, 1, microbatches=3), gpu("h100"), net, iterations=iterations)
    floor = iteration_floor(it)
    span = run_schedule("megatron", it.tasks, it.coflows, net).result.makespan
    assert floor.seconds <= span and floor.seconds == pytest.approx(sum(t.seconds for t in it.tasks), rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("routing", ["ecmp", "spray"])
def test_floor_is_below_every_scheduler_over_several_iterations(routing):
    """Every scheduler's makespan, 1 to 6 iterations, 1F1B and interleaved, dense and MoE, replicas
    free to drift out of phase: none finishes below the floor."""
    net = load_preset(
        "fattree:k=4,server=hgx-h100,nics=1,latency=1,bisection=full", speeds={"ib": 12.5, "pcie": 64.0}
    ).with_routing(routing)
    dense = ModelSpec("tiny", layers=4, hidden=1024, heads=8, seq_len=512, micro_batch=1, vocab=1000)
    moe = ModelSpec(
        "tiny-moe", layers=4, hidden=512, heads=8, seq_len=512, micro_batch=1, vocab=1000, experts=8, top_k=2, ffn=1024
    )
    cases = [
        (dense, Layout(2, 2, 4, microbatches=4), 1),
        (dense, Layout(2, 2, 4, microbatches=4), 3),
        (dense, Layout(1, 2, 8, microbatches=4, schedule="interleaved", chunks=2), 2),
        (dense, Layout(2, 4, 2, microbatches=4), 5),
        (moe, Layout(2, 2, 4, 4, 4), 6),
        (moe, Layout(1, 2, 8, 4, 4, schedule="interleaved", chunks=2), 4),
    ]
    violations = []
    for spec, layout, iterations in cases:
        it = build_iteration(spec, layout, gpu("h100"), net, iterations=iterations, dp_collective="zero2")
        floor = iteration_floor(it)
        for name in SCHEDULERS:
            run = run_schedule(name, it.tasks, it.coflows, net, interleaved=layout.schedule == "interleaved")
            if run.result.makespan < floor.seconds:
                violations.append((spec.name, layout, iterations, name, run.result.makespan, floor.seconds))
    assert not violations


def test_barrier_and_fp32_gradients_change_the_dag_as_megatron_runs_it():
    net = load_preset("2xhgx-h100-ib")
    layout = Layout(4, 2, 2, microbatches=2)
    plain = build_iteration(model("gpt3-13b"), layout, gpu("h100"), net, iterations=2, dp_collective="zero2")
    both = build_iteration(
        model("gpt3-13b"), layout, gpu("h100"), net, iterations=2, dp_collective="zero2", barrier=True, grad_bytes=4.0
    )
    by_id = {t.id: t for t in both.tasks}
    reductions = [f for c in both.coflows if c.id.startswith("dp.rs") for f in c.flows]
    assert set(by_id["norm"].deps) == {both.tasks[i].id for i in reductions}  # the global norm waits for all
    gathers = [both.tasks[i] for c in both.coflows if c.id.startswith("dp.ag") for i in c.flows]
    assert gathers and all(g.deps == ("norm",) for g in gathers)
    size = {t.id: t.bytes for t in plain.tasks if isinstance(t, Transfer)}
    assert all(both.tasks[i].bytes == 2 * size[both.tasks[i].id] for i in reductions)  # fp32: twice bf16
    assert all(g.bytes == size[g.id] for g in gathers)  # parameters stay bf16
    with pytest.raises(SimulationError, match="gradient bytes must be > 0"):
        build_iteration(model("gpt3-13b"), layout, gpu("h100"), net, grad_bytes=0.0)


@pytest.mark.parametrize(
    "argv",
    [
        ["--tp", "4", "--pp", "1", "--dp", "1", "--idle-gpus", "--topology", "hgx-h100"],
        ["--tp", "16", "--pp", "1", "--topology", "2xhgx-h100-ib"],
    ],
)
def test_tensor_parallel_only_layouts_move_no_coflow_and_run_at_the_compute_time(argv, capsys):
    """pp = dp = 1: no coflow, so every scheduler takes the free-communication time, the floor's."""
    assert main(["sim", "llm", "--model", "gpt3-13b", *argv, "--scheduler", "megatron,varys,sincronia", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    free = result["ceiling"]["free_communication_seconds"]
    assert result["flows"] == 0 and free > 0
    assert {s["iteration_seconds"] for s in result["schedulers"].values()} == {free}
    assert result["ceiling"]["floor_seconds"] == pytest.approx(free, rel=1e-9)
