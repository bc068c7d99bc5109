"""``commgraph topo list|show|detect|calibrate|validate``: hardware topologies (presets, YAML files,
this machine, measured)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

from commgraph.atomic import check_output
from commgraph.cli import describe
from commgraph.errors import TopologyError
from commgraph.topology import SPEED_KEYS, parse_speeds, preset_names, read_yaml, resolve_topology, write_yaml
from commgraph.topology.detect import detect, parse_topo_matrix
from commgraph.topology.draw import draw_topology
from commgraph.topology.files import to_yaml
from commgraph.topology.model import Topology

TABLE_LIMIT = 120


def register(subparsers) -> None:
    parser = subparsers.add_parser("topo", help="hardware topologies", description=describe(__doc__))
    commands = parser.add_subparsers(dest="topo_command", metavar="ACTION", required=True)

    commands.add_parser("list", help="list the presets").set_defaults(run=run_list)

    show = commands.add_parser("show", help="describe a preset or YAML file")
    add_topology_argument(show, positional=True)
    show.add_argument("--json", action="store_true", help="print devices and links as JSON")
    show.add_argument("--yaml", action="store_true", help="print the topology as YAML")
    show.add_argument("--png", type=Path, help="draw devices and links to this PNG")
    show.set_defaults(run=run_show)

    found = commands.add_parser("detect", help="this machine's topology (nvidia-smi topo -m, or CPU only)")
    found.add_argument("--out", type=Path, help="write YAML here instead of printing it")
    found.add_argument("--from-file", type=Path, metavar="TXT",
                       help="parse saved 'nvidia-smi topo -m' output (e.g. from another machine)")
    found.set_defaults(run=run_detect)

    measured = commands.add_parser("calibrate", help="measure the links between worker processes on this machine "
                                   "and write a calibrated topology")
    measured.add_argument("--workers", type=int, default=max(2, os.cpu_count() or 1),
                          help="worker processes to measure (default: one per core, at least 2); under torchrun "
                               "its world is measured")
    measured.add_argument("--out", type=Path, help="write the topology YAML here instead of printing it")
    measured.add_argument("--sizes", default="4K,64K,1M,16M,64M", metavar="S,...",
                          help="message sizes in bytes, K/M/G suffixes (default: 4K,64K,1M,16M,64M)")
    measured.add_argument("--messages", default="1,4", metavar="M,...",
                          help="messages each worker sends at once (default: 1,4)")
    measured.add_argument("--repeats", type=int, default=5, help="timed repeats per point; the median counts")
    measured.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                          help="cpu: Gloo workers; cuda: NCCL, a GPU per worker (default: GPUs if there are enough)")
    measured.add_argument("--timeout", type=float, default=60.0, help="seconds any one exchange may take")
    measured.set_defaults(run=run_calibrate)

    check = commands.add_parser("validate", help="check a topology YAML file")
    check.add_argument("file", type=Path)
    check.set_defaults(run=run_validate)


def add_topology_argument(parser: argparse.ArgumentParser, *, positional: bool) -> None:
    help_text = "detect (this machine), a preset (commgraph topo list) or a YAML file"
    if positional:
        parser.add_argument("topology", metavar="TOPOLOGY", help=help_text)
    else:
        parser.add_argument("--topology", required=True, metavar="TOPOLOGY", help=help_text)
    parser.add_argument("--speeds", metavar="K=GBPS,...",
                        help=f"override a preset's link speeds in GB/s, e.g. nv2=40,pcie=24 (keys: {SPEED_KEYS})")


def topology_from_args(args: argparse.Namespace) -> Topology:
    return resolve_topology(args.topology, device="auto", speeds=parse_speeds(args.speeds))


def run_list(args: argparse.Namespace) -> int:
    for name in preset_names():
        print(name)
    return 0


def run_show(args: argparse.Namespace) -> int:
    check_output(args.png, "--png")
    topology = topology_from_args(args)
    if args.png:
        draw_topology(topology, args.png)
    if args.json:
        print(json.dumps(topology.to_dict()))
    elif args.yaml:
        print(to_yaml(topology), end="")
    else:
        _describe(topology)
        if args.png:
            print(f"drawing written to {args.png}")
    return 0


def _describe(topology: Topology) -> None:
    devices = Counter(d.kind for d in topology.devices)
    print(f"{topology.name}: {len(topology.hosts)} host(s), "
          + ", ".join(f"{n} {kind}" for kind, n in devices.items()))
    kinds = Counter()
    for link in topology.links:
        kinds[link.kind] += link.count
    print("links: " + ", ".join(f"{n} {kind}" for kind, n in kinds.items())
          + f" ({len(topology.links)} entries)")
    if len(topology.links) > TABLE_LIMIT:
        print(f"(more than {TABLE_LIMIT} links: use --json or --yaml for the full list)")
        return
    if topology.calibrated is not None:
        print(f"calibrated {topology.calibrated.when} on {topology.calibrated.host}: {topology.calibrated.how}")
        if topology.calibrated.allreduce is not None:
            fit = topology.calibrated.allreduce
            print(f"torch's all-reduce across every worker: {fit['latency_us']:.1f} us + bytes at "
                  f"{fit['bandwidth_gbps']:.3f} GB/s")
    copies = [d for d in topology.devices if d.copy_gbps is not None]
    if copies:
        print("row copies: " + ", ".join(f"{d.id} {d.copy_gbps:.2f} GB/s" for d in copies))
    width = max(len(link.a) + len(link.b) for link in topology.links) + 3
    for link in topology.links:
        overhead = f"  +{link.overhead_us:.1f} us/message" if link.overhead_us else ""
        print(f"  {link.a + ' - ' + link.b:<{width}}  {link.kind:<13} x{link.count}  "
              f"{link.bandwidth_gbps:7.2f} GB/s  {link.latency_us:5.1f} us{overhead}")


def run_detect(args: argparse.Namespace) -> int:
    check_output(args.out, "--out")
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
        print(f"wrote {args.out} ({len(topology.gpus)} GPUs, {len(topology.devices)} devices)")
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

    spec = ProbeSpec(sizes=tuple(_sizes(args.sizes)), messages=tuple(_counts(args.messages)), repeats=args.repeats)
    check_output(args.out, "--out")
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
        check_workers(args.workers, "cuda" if args.device == "cuda" else "cpu")
        result = calibrate(args.workers, spec, device=args.device, timeout=args.timeout, progress=True)
    _print_fit(result, say)
    topology = result.topology()
    if args.out:
        write_yaml(topology, args.out)
        print(f"wrote {args.out} ({topology.name}; use it as --topology {args.out})", file=say)
    else:
        print(to_yaml(topology), end="")
    return 0


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _sizes(text: str) -> list[int]:
    sizes = []
    for item in filter(None, text.replace(" ", "").split(",")):
        number, unit = (item[:-1], item[-1].upper()) if item[-1].upper() in "KMG" else (item, "")
        try:
            value = float(number) * _UNITS[unit]
        except ValueError:
            raise TopologyError(f"bad --sizes entry {item!r}: expected bytes such as 4096, 64K or 16M") from None
        if not value >= 1 or value != int(value):
            raise TopologyError(f"bad --sizes entry {item!r}: sizes must be positive whole bytes")
        sizes.append(int(value))
    if not sizes:
        raise TopologyError("--sizes is empty: give message sizes such as 4K,64K,1M,16M,64M")
    return sizes


def _counts(text: str) -> list[int]:
    try:
        return [int(item) for item in filter(None, text.replace(" ", "").split(","))]
    except ValueError:
        raise TopologyError(f"bad --messages {text!r}: expected integers such as 1,4") from None


def _print_fit(result, out) -> None:
    print(f"{'probe':<6} {'msgs':>4} {'size':>8} {'measured ms':>12} {'spread ms':>17} {'model ms':>9} {'error':>7}",
          file=out)
    for row, point in zip(result.rows(), result.points):
        print(f"{row['probe']:<6} {row['messages']:>4} {row['bytes']:>8} {row['measured_s'] * 1e3:>12.3f} "
              f"{point.low * 1e3:>8.3f}-{point.high * 1e3:<8.3f} {row['model_s'] * 1e3:>9.3f} {row['error']:>+7.1%}",
              file=out)
    for probe, fit in result.fits.items():
        print(f"{probe}: latency {fit.latency_s * 1e6:.1f} us, overhead {fit.overhead_s * 1e6:.1f} us per message, "
              f"{fit.bandwidth_gbps:.3f} GB/s (worst error {fit.worst_error:.0%})", file=out)
