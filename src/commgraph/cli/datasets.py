"""``commgraph graph datasets list|download``: the datasets commgraph knows by name, and fetching them.

Every command that takes GRAPH also takes one of these names and downloads it on first use. The
cache is ``$COMMGRAPH_HOME/datasets/<name>/`` (default ``~/.cache/commgraph``);
``COMMGRAPH_MIRROR=URL`` fetches every file from a mirror with the same paths. A server that goes
silent is waited for at most --read-timeout seconds per read, over --tries tries per file, each
resuming from the bytes kept (``COMMGRAPH_DOWNLOAD_TIMEOUT`` and ``COMMGRAPH_DOWNLOAD_TRIES`` set
them for every command).
"""

from __future__ import annotations

import argparse

from commgraph.cli import describe
from commgraph.cli.args import add_format, emit
from commgraph.graph.datasets import dataset_dir, dataset_record, fetch, load_dataset
from commgraph.graph.download import ATTEMPTS, TIMEOUT, TIMEOUT_ENV, TRIES_ENV, Patience
from commgraph.graph.registry import REGISTRY, lookup
from commgraph.render.graphs import datasets_report


def register(subparsers) -> None:
    parser = subparsers.add_parser("datasets", help="list and download named datasets", description=describe(__doc__))
    actions = parser.add_subparsers(dest="action", metavar="COMMAND", required=True)
    listing = actions.add_parser(
        "list",
        help="every name with its size, licence, statistics and cache state",
        description="Every dataset commgraph knows by name: its size, licence, "
        "statistics and whether it is in the cache.",
    )
    add_format(listing)
    listing.set_defaults(run=run_list)
    download = actions.add_parser(
        "download",
        help="fetch datasets into the cache and convert them once",
        description="Fetch datasets into $COMMGRAPH_HOME/datasets, verify them and convert them once.",
    )
    download.add_argument("names", nargs="+", metavar="NAME", choices=list(REGISTRY), help="dataset names")
    download.add_argument(
        "--no-convert", action="store_true", help="only download and verify the files; convert on first use"
    )
    download.add_argument("--quiet", action="store_true", help="no progress bar")
    download.add_argument(
        "--read-timeout",
        type=float,
        metavar="SECONDS",
        help=f"how long one read may wait for the server before the try is given up (default: "
        f"${TIMEOUT_ENV}, else {TIMEOUT:g})",
    )
    download.add_argument(
        "--tries",
        type=int,
        metavar="N",
        help=f"tries per file, each resuming from the bytes kept (default: ${TRIES_ENV}, else {ATTEMPTS})",
    )
    download.set_defaults(run=run_download)


def run_list(args: argparse.Namespace) -> int:
    emit(args, datasets_report([dataset_record(entry) for entry in REGISTRY.values()]))
    return 0


def run_download(args: argparse.Namespace) -> int:
    default = Patience.from_env()
    patience = Patience(
        default.read_seconds if args.read_timeout is None else args.read_timeout,
        default.tries if args.tries is None else args.tries,
    )
    for name in args.names:
        entry = lookup(name)
        if args.no_convert:
            fetch(entry, progress=not args.quiet, patience=patience)
        else:
            graph = load_dataset(entry, progress=not args.quiet, patience=patience)
            print(f"{name}: {graph.num_nodes:,} nodes, {graph.num_edges:,} stored edges -> {dataset_dir(name)}")
    return 0
