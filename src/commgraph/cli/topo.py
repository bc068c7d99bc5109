"""``commgraph topo list|show|detect|calibrate|validate``: hardware topologies (presets, YAML files,
this machine, measured)."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

from commgraph.cli import describe
from commgraph.cli.args import (
    add_force,
    add_format,
    add_png,
    add_topology_argument,
    byte_counts,
    check_outputs,
    emit,
    topology_from_args,
    wrote,
)
from commgraph.errors import TopologyError
from commgraph.render.topology import presets_report, topology_report
from commgraph.render.units import seconds
from commgraph.topology import parse_speeds, preset_names, read_yaml, speeds_of, write_yaml
from commgraph.topology.compute import REFUSED_ERROR
from commgraph.topology.detect import detect, parse_topo_matrix
from commgraph.topology.draw import draw_topology
from commgraph.topology.files import to_yaml
from commgraph.topology.model import Topology

TABLE_LIMIT = 120


def register(subparsers) -> None:
    parser = subparsers.add_parser("topo", help="hardware topologies", description=describe(__doc__))
    commands = parser.add_subparsers(dest="topo_command", metavar="COMMAND", required=True)
    _add_list(commands)
    _add_show(commands)
    _add_detect(commands)
    _add_calibrate(commands)
    _add_validate(commands)


def _add_list(commands) -> None:
    listing = commands.add_parser(
        "list",
        help="list the presets",
        description="The preset topologies, one name a "
        "line; each is a --topology value (NxPRESET-ib and fattree:... build clusters).",
    )
    add_format(listing)
    listing.set_defaults(run=run_list)


def _add_show(commands) -> None:
    show = commands.add_parser(
        "show",
        help="describe a preset or YAML file",
        description="A topology's hosts, devices and links, as text, JSON or YAML, or drawn.",
    )
    add_topology_argument(show)
    add_format(show)
    show.add_argument("--yaml", action="store_true", help="print the topology as YAML")
    add_png(show, "draw devices and links to this PNG")
    add_force(show)
    show.set_defaults(run=run_show)


def _add_detect(commands) -> None:
    found = commands.add_parser(
        "detect",
        help="this machine's topology (nvidia-smi topo -m, or CPU only)",
        description="This machine's topology from nvidia-smi topo -m (a CPU-only machine: "
        "its CPUs), as YAML on stdout or into --out.",
    )
    found.add_argument("--out", type=Path, metavar="FILE.yaml", help="write YAML here instead of printing it")
    found.add_argument(
        "--from-file",
        type=Path,
        metavar="TXT",
        help="parse saved 'nvidia-smi topo -m' output (e.g. from another machine)",
    )
    add_force(found)
    found.set_defaults(run=run_detect)


def _add_calibrate(commands) -> None:
    measured = commands.add_parser(
        "calibrate",
        help="measure the links between worker processes on this machine and write a calibrated topology",
        description="Measure point-to-point and all-reduce times between worker "
        "processes on this machine, fit latency and bandwidth per link, and "
        "write the calibrated topology (YAML on stdout or into --out).",
    )
    measured.add_argument(
        "--workers",
        type=int,
        help="worker processes to measure (default: one per core, at least 2); under torchrun its world is measured",
    )
    measured.add_argument(
        "--out", type=Path, metavar="FILE.yaml", help="write the topology YAML here instead of printing it"
    )
    measured.add_argument(
        "--sizes",
        type=byte_counts,
        default="4K,64K,1M,16M,64M",
        metavar="SIZE,...",
        help="message sizes in bytes, K/M/G suffixes",
    )
    measured.add_argument("--messages", default="1,4", metavar="M,...", help="messages each worker sends at once")
    measured.add_argument("--repeats", type=int, default=5, help="timed repeats per point; the median counts")
    measured.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="cpu: Gloo workers; cuda: NCCL, a GPU per worker; auto: GPUs if there are enough",
    )
    measured.add_argument("--timeout", type=float, default=60.0, help="seconds any one exchange may take")
    add_force(measured)
    measured.set_defaults(run=run_calibrate)


def _add_validate(commands) -> None:
    check = commands.add_parser(
        "validate",
        help="check a topology YAML file",
        description="Check that a topology YAML file reads and that its workers reach each other.",
    )
    check.add_argument("file", type=Path, metavar="FILE.yaml", help="the topology file to check")
    check.set_defaults(run=run_validate)


def run_list(args: argparse.Namespace) -> int:
    emit(args, presets_report(preset_names()))
    return 0


def run_show(args: argparse.Namespace) -> int:
    check_outputs(args, "--png")
    topology = topology_from_args(args)
    if args.png:
        draw_topology(topology, args.png)
        wrote(args.png)
    if args.yaml:
        print(to_yaml(topology), end="")
        return 0
    lines = _describe(topology, speeds_of(args.topology, topology, parse_speeds(args.speeds)))
    data = topology.to_dict()
    emit(args, topology_report(data, lines, data["links"] if len(topology.links) <= TABLE_LIMIT else None))
    return 0


def _describe(topology: Topology, speeds: str) -> tuple[str, ...]:
    """The lines above the links: hosts and devices, speeds, link kinds, calibration and row copies."""
    devices = Counter(d.kind for d in topology.devices)
    hosts = {d.host for d in topology.devices if d.kind != "switch"}  # the machines with a non-switch device
    kinds = Counter()
    for link in topology.links:
        kinds[link.kind] += link.count
    lines = [
        f"{topology.name}: {len(hosts)} host(s), " + ", ".join(f"{n} {kind}" for kind, n in devices.items()),
        f"speeds: {speeds}",
        "links: " + ", ".join(f"{n} {kind}" for kind, n in kinds.items()) + f" ({len(topology.links)} entries)",
    ]
    if len(topology.links) > TABLE_LIMIT:
        return (*lines, f"(more than {TABLE_LIMIT} links: use --json or --yaml for the full list)")
    calibrated = topology.calibrated
    if calibrated is not None:
        lines.append(f"calibrated {calibrated.when} on {calibrated.host}: {calibrated.how}")
        if calibrated.allreduce is not None:
            fit = calibrated.allreduce
            lines.append(
                f"torch's all-reduce across every worker: {seconds(fit['latency_us'] * 1e-6)} + bytes at "
                f"{fit['bandwidth_gbps']:.3f} GB/s"
            )
    copies = [d for d in topology.devices if d.copy_gbps is not None]
    if copies:
        lines.append("row copies: " + ", ".join(f"{d.id} {d.copy_gbps:.2f} GB/s" for d in copies))
    return tuple(lines)


def run_detect(args: argparse.Namespace) -> int:
    check_outputs(args, "--out")
    if args.from_file:
        try:
            text = args.from_file.read_text()
        except OSError as exc:
            raise TopologyError(f"{args.from_file}: {exc.strerror}") from None
        topology = parse_topo_matrix(text, name=args.from_file.stem)
    else:
        topology = detect()
    if args.out:
        write_yaml(topology, args.out)
        wrote(args.out, f"{len(topology.gpus)} GPUs, {len(topology.devices)} devices")
    else:
        print(to_yaml(topology), end="")
    return 0


ROUTE_CHECK_ALL = 64  # up to this many workers, validate checks a route between every two


def run_validate(args: argparse.Namespace) -> int:
    """A topology is valid when it reads and its workers reach each other: between every two of
    them up to :data:`ROUTE_CHECK_ALL` workers, beyond that from each of the first eight to every
    other (one shortest-path search per source)."""
    topology = read_yaml(args.file)
    workers = [d.id for d in topology.workers]
    if len(workers) <= ROUTE_CHECK_ALL:
        topology.check_routes(workers)
    else:
        for src in workers[:8]:
            for dst in workers:
                if dst != src:
                    topology.route(src, dst)
    print(f"{args.file}: valid ({len(topology.devices)} devices, {len(topology.links)} links)")
    return 0


def run_calibrate(args: argparse.Namespace) -> int:
    from commgraph.runtime import in_torchrun, join
    from commgraph.runtime.calibrate import ProbeSpec, calibrate, check_workers, collect

    spec = ProbeSpec(
        sizes=tuple(int(s) if float(s).is_integer() else s for s in args.sizes),
        messages=tuple(_counts(args.messages)),
        repeats=args.repeats,
    )
    check_outputs(args, "--out")
    workers = args.workers if args.workers is not None else max(2, os.cpu_count() or 1)
    say = sys.stdout if args.out else sys.stderr  # without --out the YAML alone goes to stdout
    if in_torchrun():
        world = join(args.timeout, args.device)
        try:
            result = collect(world, spec, progress=True)
        finally:
            world.close()
        if result is None:
            return 0
    else:
        check_workers(workers, "cuda" if args.device == "cuda" else "cpu")
        result = calibrate(workers, spec, device=args.device, timeout=args.timeout, progress=True)
    _print_fit(result, say)
    topology = _with_compute(result.topology(), args.force, say)
    if args.out:
        write_yaml(topology, args.out)
        wrote(args.out, f"{topology.name}; use it as --topology {args.out}")
    else:
        print(to_yaml(topology), end="")
    return 0


def _with_compute(topology: Topology, force: bool, out) -> Topology:
    """``topology`` with this machine's compute cost model (:mod:`commgraph.runtime.compute_probe`)
    in its calibration; a probe whose fit is worse than :data:`~commgraph.topology.compute.REFUSED_ERROR`
    is refused unless ``force``."""
    from commgraph.runtime.compute_probe import probe_compute

    print("calibrating: the compute probe (layers, sampling, feature gather)", file=out)
    model = probe_compute()
    for probe, error in model.errors.items():
        print(f"compute {probe}: worst error {error:.0%}", file=out)
    print(f"compute corun: each of {model.cores} busy cores {model.corun:.2f}x slower than one alone", file=out)
    probe, error = model.worst_probe()
    if error > REFUSED_ERROR and not force:
        raise TopologyError(
            f"the compute probe {probe!r} fits this machine's timings within {error:.0%}, worse than "
            f"{REFUSED_ERROR:.0%}: calibrate on a quieter machine, or pass --force to write it anyway"
        )
    return replace(topology, calibrated=replace(topology.calibrated, compute=model.to_dict()))


def _counts(text: str) -> list[int]:
    try:
        return [int(item) for item in filter(None, text.replace(" ", "").split(","))]
    except ValueError:
        raise TopologyError(f"bad --messages {text!r}: expected integers such as 1,4") from None


def _print_fit(result, out) -> None:
    print(
        f"{'probe':<6} {'msgs':>4} {'size':>8} {'measured ms':>12} {'spread ms':>17} {'model ms':>9} {'error':>7}",
        file=out,
    )
    for row, point in zip(result.rows(), result.points):
        print(
            f"{row['probe']:<6} {row['messages']:>4} {row['bytes']:>8} {row['measured_s'] * 1e3:>12.3f} "
            f"{point.low * 1e3:>8.3f}-{point.high * 1e3:<8.3f} {row['model_s'] * 1e3:>9.3f} {row['error']:>+7.1%}",
            file=out,
        )
    for probe, fit in result.fits.items():
        print(
            f"{probe}: latency {fit.latency_s * 1e6:.1f} us, overhead {fit.overhead_s * 1e6:.1f} us per message, "
            f"{fit.bandwidth_gbps:.3f} GB/s (worst error {fit.worst_error:.0%})",
            file=out,
        )
    if result.collective_s is not None:
        print(f"collective: {result.collective_s * 1e6:.1f} us (an 8-byte all-reduce across the workers)", file=out)
