"""Calibration: the fit, the calibrated topology's YAML, the simulator's per-message overhead and
row-copy prices, a real calibration of two workers, and the errors bad requests get."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from commgraph.cli.main import main as cli
from commgraph.errors import SimulationError, TopologyError
from commgraph.plan import CommPlan, Send, choose_allreduce, plan_allreduce, price
from commgraph.plan.allreduce import native_seconds
from commgraph.runtime.calibrate import (
    CalibratedLinks,
    LinkFit,
    Point,
    ProbeSpec,
    calibrate,
    check_workers,
    fit,
    fit_all,
)
from commgraph.sim import Transfer, simulate
from commgraph.sim.steptime import compute_model
from commgraph.topology import Device, Link, Topology, load_topology, read_yaml, write_yaml
from commgraph.topology.compute import machine_kind
from commgraph.topology.files import to_yaml

GB = 1e9


def synthetic(probe: str, latency: float, overhead: float, gbps: float) -> list[Point]:
    sizes, counts = [4096, 65536, 1 << 20, 16 << 20], [1, 2, 4]
    return [Point(probe, s, m, latency + m * (overhead + s / (gbps * GB)), 0.0, 0.0) for s in sizes for m in counts]


def test_fit_recovers_known_parameters_exactly():
    result = fit(synthetic("all", 25e-6, 140e-6, 1.2))
    assert result.latency_s == pytest.approx(25e-6, rel=1e-9)
    assert result.overhead_s == pytest.approx(140e-6, rel=1e-9)
    assert result.bandwidth_gbps == pytest.approx(1.2, rel=1e-9)
    assert result.worst_error < 1e-9


def test_fit_with_one_message_count_puts_the_fixed_cost_in_latency():
    points = [p for p in synthetic("pair", 25e-6, 140e-6, 2.5) if p.messages == 1]
    result = fit(points)
    assert (result.latency_s, result.overhead_s) == (pytest.approx(165e-6, rel=1e-9), 0.0)
    assert result.bandwidth_gbps == pytest.approx(2.5, rel=1e-9)


def test_fit_refuses_times_that_do_not_grow():
    with pytest.raises(TopologyError, match="include larger sizes"):
        fit([Point("all", s, 1, 1e-3, 0.0, 0.0) for s in (4096, 8192, 16384)])


def test_the_copy_fit_takes_its_rate_from_the_large_copies():
    """Copies that stay in a core's caches run faster per byte; an exchange's copy time is its
    large copies', so the copy probe is fitted on the absolute error and the large points set the rate."""
    exact = fit(synthetic("copy", 0.0, 5e-6, 4.0), relative=False)
    assert (exact.overhead_s, exact.bandwidth_gbps) == (pytest.approx(5e-6, rel=1e-6), pytest.approx(4.0, rel=1e-6))
    cached = [
        Point("copy", s, m, m * s / (12.0 * GB if s <= 65536 else 4.0 * GB), 0.0, 0.0)
        for s in (4096, 65536, 1 << 20, 16 << 20)
        for m in (1, 4)
    ]
    assert fit_all(cached)["copy"].bandwidth_gbps == pytest.approx(4.0, rel=0.02)
    assert fit(cached).bandwidth_gbps > 5.0  # the relative fit would split the difference


def calibrated_links(workers: int = 3) -> CalibratedLinks:
    points = (
        synthetic("all", 20e-6, 100e-6, 1.5) + synthetic("pair", 30e-6, 0.0, 2.5) + synthetic("copy", 0.0, 5e-6, 4.0)
    )
    points += [p for p in synthetic("allreduce", 300e-6, 0.0, 1.25) if p.messages == 1]
    return CalibratedLinks(
        workers, "cpu", "gloo", "testhost", "2024-05-01T12:00:00+00:00", ProbeSpec(), points, fit_all(points), 4.5e-4
    )


def test_calibrated_topology_round_trips_exactly(tmp_path):
    topology = calibrated_links().topology()
    assert [d.id for d in topology.workers] == ["cpu0", "cpu1", "cpu2"]
    assert topology.calibrated.when == "2024-05-01T12:00:00+00:00" and topology.calibrated.host == "testhost"
    assert all(link.overhead_us == pytest.approx(100.0) and link.kind == "loopback" for link in topology.links)
    path = tmp_path / "calibrated.yaml"
    write_yaml(topology, path)
    again = load_topology(path)
    assert again.same_as(topology) and again.calibrated == topology.calibrated
    assert to_yaml(again) == path.read_text()
    assert "calibrated:" in path.read_text() and "copy_gbps" in path.read_text()
    assert topology.calibrated.allreduce == {"latency_us": pytest.approx(300.0), "bandwidth_gbps": pytest.approx(1.25)}
    assert topology.calibrated.collective_us == 450.0 and "collective_us: 450.0" in path.read_text()


def test_native_allreduce_is_priced_by_its_calibrated_fit_else_as_our_ring():
    calibrated = calibrated_links(4).topology()
    assert native_seconds(calibrated, 1e8) == pytest.approx(300e-6 + 1e8 / 1.25e9, rel=1e-6)
    uncalibrated = replace(calibrated, calibrated=None)
    assert (
        native_seconds(uncalibrated, 1e8)
        == price(plan_allreduce("ring", uncalibrated, 1e8), uncalibrated)["modeled_seconds"]
    )
    # auto takes torch's own all-reduce where it was measured fastest, a schedule where it was not
    fast = replace(calibrated.calibrated, allreduce={"latency_us": 1.0, "bandwidth_gbps": 1000.0})
    slow = replace(calibrated.calibrated, allreduce={"latency_us": 1e6, "bandwidth_gbps": 0.001})
    assert choose_allreduce(replace(calibrated, calibrated=fast), 1e8) == "native"
    assert choose_allreduce(replace(calibrated, calibrated=slow), 1e8) != "native"


def test_presets_write_no_calibration_fields():
    text = to_yaml(load_topology("localhost-cpu:2"))
    assert "overhead_us" not in text and "calibrated" not in text and "copy_gbps" not in text


@pytest.mark.parametrize(
    "change, message",
    [
        ({"when": "yesterday"}, "ISO 8601"),
        ({"host": ""}, "calibrated.host must be a non-empty string"),
        ({"allreduce": {"latency_us": 10.0}}, "calibrated.allreduce must be a mapping"),
        ({"allreduce": {"latency_us": 10.0, "bandwidth_gbps": 0.0}}, "calibrated.allreduce must be a mapping"),
        ({"collective_us": -1.0}, "calibrated.collective_us must be microseconds >= 0"),
        ({"collective_us": "fast"}, "calibrated.collective_us must be microseconds >= 0"),
    ],
)
def test_bad_calibration_blocks(change, message):
    good = calibrated_links().topology().to_dict()
    with pytest.raises(TopologyError, match=message):
        Topology.from_dict({**good, "calibrated": {**good["calibrated"], **change}})


def test_bad_link_and_device_figures():
    base = calibrated_links().topology().to_dict()
    bad_link = {**base, "links": [{**base["links"][0], "overhead_us": -1.0}, *base["links"][1:]]}
    with pytest.raises(TopologyError, match="overhead_us must be >= 0"):
        Topology.from_dict(bad_link)
    bad_device = {**base, "devices": [{**base["devices"][0], "copy_gbps": 0}, *base["devices"][1:]]}
    with pytest.raises(TopologyError, match="copy_gbps must be > 0"):
        Topology.from_dict(bad_device)
    with pytest.raises(TopologyError, match="unknown field"):
        Topology.from_dict({**base, "calibration": {}})


def star(overhead_us: float, latency_us: float = 0.0, gbps: float = 1.0) -> Topology:
    devices = [Device("a", "cpu"), Device("b", "cpu"), Device("c", "cpu"), Device("hub", "switch")]
    return Topology("star", devices, [Link(d, "hub", "loopback", 1, gbps, latency_us, overhead_us) for d in "abc"])


def test_two_messages_on_one_link_pay_two_overheads_and_share_the_bandwidth():
    overhead, latency = 100e-6, 5e-6
    topology = star(overhead * 1e6, latency * 1e6)
    sizes = (1e6, 3e6)
    result = simulate(topology, [Transfer("x", "a", "b", sizes[0]), Transfer("y", "a", "c", sizes[1])])
    # a->hub carries both: 2 overheads then all the bytes; each route has two links of `latency`
    assert result.makespan == pytest.approx(2 * overhead + sum(sizes) / GB + 2 * latency, rel=1e-9)
    assert result.bytes_moved[0] == pytest.approx(sum(sizes))  # overheads are time, not bytes
    alone = simulate(topology, [Transfer("x", "a", "b", sizes[0])])
    assert alone.makespan == pytest.approx(overhead + sizes[0] / GB + 2 * latency, rel=1e-9)
    assert topology.links[0].seconds(sizes[0]) == pytest.approx(overhead + latency + sizes[0] / GB)


def test_messages_from_different_senders_to_one_receiver_share_its_side():
    topology = star(50.0)
    result = simulate(topology, [Transfer("x", "a", "c", 1e6), Transfer("y", "b", "c", 1e6)])
    assert result.makespan == pytest.approx(2 * 50e-6 + 2e6 / GB, rel=1e-9)


def test_price_charges_row_copies_at_the_devices_copy_rate():
    topology = star(0.0)
    copying = Topology(
        "star-copy", [replace(d, copy_gbps=2.0) if d.kind == "cpu" else d for d in topology.devices], topology.links
    )
    ids = np.arange(1000)
    plan = CommPlan("allgather", "p2p", "star", [[Send("a", "b", 1e6, ids), Send("b", "a", 1e6, ids)]], 1000)
    plain = price(plan, topology)["modeled_seconds"]
    assert plain == pytest.approx(1e6 / GB, rel=1e-9)
    # each side gathers its message before sending and scatters the one it received after
    assert price(plan, copying)["modeled_seconds"] == pytest.approx(1e6 / GB + 2 * 1e6 / 2e9, rel=1e-9)
    opaque = CommPlan("allreduce", "ring", "star", [[Send("a", "b", 1e6), Send("b", "a", 1e6)]])
    assert price(opaque, copying)["modeled_seconds"] == pytest.approx(plain, rel=1e-9)


def test_overhead_zero_keeps_the_old_prices():
    result = simulate(star(0.0), [Transfer("x", "a", "b", GB)])
    assert result.makespan == pytest.approx(1.0)
    with pytest.raises(SimulationError):
        simulate(star(10.0), [Transfer("x", "a", "zz", GB)])


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_a_real_two_worker_calibration_writes_a_valid_topology(tmp_path, capsys):
    out = tmp_path / "here.yaml"
    assert (
        cli(
            [
                "topo",
                "calibrate",
                "--workers",
                "2",
                "--device",
                "cpu",
                "--sizes",
                "64K,4M,16M",
                "--messages",
                "1,2",
                "--repeats",
                "3",
                "--out",
                str(out),
                "--force",  # a loaded machine's compute fit may be worse than 50%
            ]
        )
        == 0
    )
    printed, said = capsys.readouterr()
    assert "all: latency" in printed and "collective: " in printed and "compute corun: " in printed
    assert said.splitlines()[-1].startswith(f"wrote {out} (")
    topology = read_yaml(out)
    assert topology.name == "calibrated-cpu:2" and [d.id for d in topology.workers] == ["cpu0", "cpu1"]
    assert topology.calibrated is not None and "gloo, 2 cpu worker(s)" in topology.calibrated.how
    assert all(link.bandwidth_gbps > 0 for link in topology.links)
    assert all(d.copy_gbps > 0 for d in topology.workers)
    assert topology.calibrated.allreduce["bandwidth_gbps"] > 0 and topology.calibrated.collective_us > 0
    assert "compute gcn: worst error" in printed and compute_model(topology).machine == machine_kind()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--workers", "0"], "--workers must be >= 2"),
        (["--workers", "1", "--device", "cpu"], "--workers must be >= 2"),
        (["--sizes", "0,4K"], "argument --sizes: bad size '0': must be a finite number > 0"),
        (["--sizes=-4K"], "argument --sizes: bad size '-4K': must be a finite number > 0"),
        (["--sizes", "lots"], "argument --sizes: bad size 'lots': expected bytes such as"),
        (["--sizes", "1.5"], "message sizes must be positive whole bytes, got [1.5]"),
        (["--messages", "0"], "message counts must be integers >= 1"),
        (["--repeats", "0"], "repeats must be an integer >= 1"),
    ],
)
def test_bad_requests_fail_before_measuring(argv, message, capsys):
    try:
        code = cli(["topo", "calibrate", *argv])
    except SystemExit as stopped:  # argparse: a --sizes entry that is not bytes
        code = stopped.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_unwritable_out_fails_before_measuring(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli(["topo", "calibrate", "--out", str(blocker / "here.yaml")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert cli(["topo", "calibrate", "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


@pytest.mark.multiproc
def test_python_api_rejects_bad_inputs():
    with pytest.raises(TopologyError, match="positive whole bytes"):
        ProbeSpec(sizes=(0,))
    with pytest.raises(TopologyError, match="--workers must be >= 2"):
        check_workers(1, "cpu")
    with pytest.raises(TopologyError, match="--workers must be >= 2"):
        calibrate(0, device="cpu")


@pytest.mark.multiproc
@pytest.mark.gpu(reason="measures a GPU's host links")
@pytest.mark.timeout(120)
def test_gpu_calibration_measures_host_links(tmp_path):
    result = calibrate(1, ProbeSpec(sizes=(4 << 10, 1 << 20, 64 << 20), messages=(1,), repeats=3), device="cuda")
    assert {"h2d", "d2h", "copy"} <= set(result.fits)
    topology = result.topology()
    assert [d.id for d in topology.workers] == ["gpu0"] and any(l.kind == "pcie" for l in topology.links)
    write_yaml(topology, tmp_path / "gpu.yaml")
    assert read_yaml(tmp_path / "gpu.yaml").same_as(topology)


def test_linkfit_seconds_is_the_formula():
    f = LinkFit(1e-5, 2e-5, 2.0, 0.0)
    assert f.seconds(2e9, 3) == pytest.approx(1e-5 + 3 * (2e-5 + 1.0))


def test_a_switch_forwarding_limit_is_shared_by_everything_that_crosses_it(tmp_path):
    """Workers on one machine share its cores: the hub forwards at most ``forward_gbps`` in all.
    Alone a message gets its link's rate; two disjoint messages at once share the hub's limit."""
    limited = replace(
        star(0.0, gbps=1.0),
        devices=[Device("a", "cpu"), Device("b", "cpu"), Device("c", "cpu"), Device("hub", "switch", forward_gbps=1.2)],
    )
    alone = simulate(limited, [Transfer("x", "a", "b", GB)])
    assert alone.makespan == pytest.approx(1.0)  # the link, not the hub, limits one message
    both = simulate(limited, [Transfer("x", "a", "b", GB), Transfer("y", "b", "c", GB)])
    assert both.makespan == pytest.approx(2 / 1.2)  # links a->hub and b->hub differ: only the hub is shared
    assert both.bytes_moved.shape[0] == 2 * len(limited.links)  # the limit is not a link row
    write_yaml(limited, tmp_path / "t.yaml")
    assert read_yaml(tmp_path / "t.yaml").same_as(limited)
    assert "forward_gbps" not in to_yaml(star(0.0))  # unmeasured topologies read as before
    with pytest.raises(TopologyError, match="forward_gbps must be > 0"):
        replace(limited, devices=[Device("a", "cpu"), Device("hub", "switch", forward_gbps=0.0)])
