"""``commgraph topo list|show|detect|validate``: hardware topologies (presets, YAML files, this machine)."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from commgraph.cli import describe
from commgraph.errors import TopologyError
from commgraph.topology import load_topology, preset_names, read_yaml, write_yaml
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

    check = commands.add_parser("validate", help="check a topology YAML file")
    check.add_argument("file", type=Path)
    check.set_defaults(run=run_validate)


def add_topology_argument(parser: argparse.ArgumentParser, *, positional: bool) -> None:
    help_text = "a preset (commgraph topo list) or a YAML file"
    if positional:
        parser.add_argument("topology", metavar="TOPOLOGY", help=help_text)
    else:
        parser.add_argument("--topology", required=True, metavar="TOPOLOGY", help=help_text)
    parser.add_argument("--speeds", metavar="K=GBPS,...",
                        help="override preset link speeds, e.g. nv2=40,pcie=24 (keys: nv1 nv2 pcie qpi ib ethernet shm)")


def topology_from_args(args: argparse.Namespace) -> Topology:
    return load_topology(args.topology, _speeds(args.speeds))


def _speeds(text: str | None) -> dict[str, float]:
    speeds = {}
    for item in filter(None, (text or "").split(",")):
        key, sep, value = item.partition("=")
        try:
            speeds[key.strip()] = float(value)
        except ValueError:
            raise TopologyError(f"bad --speeds entry {item!r}: expected key=GB/s") from None
        if not sep:
            raise TopologyError(f"bad --speeds entry {item!r}: expected key=GB/s")
    return speeds


def run_list(args: argparse.Namespace) -> int:
    for name in preset_names():
        print(name)
    return 0


def run_show(args: argparse.Namespace) -> int:
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
    width = max(len(link.a) + len(link.b) for link in topology.links) + 3
    for link in topology.links:
        print(f"  {link.a + ' - ' + link.b:<{width}}  {link.kind:<13} x{link.count}  "
              f"{link.bandwidth_gbps:7.2f} GB/s  {link.latency_us:5.1f} us")


def run_detect(args: argparse.Namespace) -> int:
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


def run_validate(args: argparse.Namespace) -> int:
    topology = read_yaml(args.file)
    print(f"{args.file}: valid ({len(topology.devices)} devices, {len(topology.links)} links)")
    return 0
