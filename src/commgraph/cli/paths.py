"""``commgraph sim multipath paths --topology TOPOLOGY --src cpu0 --dst gpu3``: the communication paths
between two devices that the topology's routes allow (the route itself, relays through NVLink peers, staging through
host memory), with their traverse times. ``--file paths.yaml`` checks a path set instead, naming
any hop the topology lacks; ``--yaml`` prints the candidates as a path set to edit."""

from __future__ import annotations

import argparse
from pathlib import Path

from commgraph.cli import describe
from commgraph.cli.args import add_format, add_topology_argument, byte_count, emit, topology_from_args
from commgraph.errors import PlanError
from commgraph.plan.paths import PathSet, RequestType, candidate_paths, paths_yaml, read_paths, resolve_paths
from commgraph.render.multipath import paths_report


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "paths", help="communication paths between two devices, or check a path set", description=describe(__doc__)
    )
    add_topology_argument(parser)
    parser.add_argument("--src", help="where requests start (e.g. cpu0, nic0)")
    parser.add_argument("--dst", help="where they go (e.g. gpu3)")
    parser.add_argument("--file", type=Path, metavar="PATHS.yaml", help="check and list this path set instead")
    parser.add_argument(
        "--bytes",
        type=byte_count,
        default="1M",
        metavar="SIZE",
        help="request size for the times shown, K/M/G suffixes",
    )
    output = parser.add_mutually_exclusive_group()
    add_format(parser, output)
    output.add_argument("--yaml", action="store_true", help="print the candidates as a path set (YAML)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    topology = topology_from_args(args)
    nbytes = args.bytes
    if args.file:
        if args.src or args.dst or args.yaml:
            raise PlanError("--file lists a path set: leave out --src, --dst and --yaml")
        path_set = read_paths(args.file)
    else:
        if not (args.src and args.dst):
            raise PlanError("give --src and --dst (e.g. --src cpu0 --dst gpu3), or a path set with --file")
        name = f"{args.src}:{args.dst}"
        path_set = PathSet((RequestType(name, nbytes, tuple(candidate_paths(topology, args.src, args.dst))),))
    if args.yaml:
        print(paths_yaml(path_set), end="")
        return 0
    rows = []
    for kind, resolved in zip(path_set.types, resolve_paths(path_set, topology)):
        size = kind.bytes if args.file else nbytes
        for p in resolved:
            rows.append(
                {
                    "type": kind.name,
                    "devices": list(p.path.devices),
                    "bottleneck_gbps": 1e-9 / max(s.seconds_per_byte for s in p.segments),
                    "traverse_s": p.traverse_seconds(size),
                    "toll_s": p.toll_seconds(size),
                }
            )
    emit(args, paths_report({"topology": topology.name, "paths": rows}))
    return 0
