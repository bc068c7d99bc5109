"""``commgraph run --workers N [options] SCRIPT [ARGS...]``: your own PyG script as N ranks on this
machine, as ``torchrun --nproc-per-node N SCRIPT ARGS...`` would run it. The options come before
SCRIPT; everything after it is the script's (``sys.argv = [SCRIPT, *ARGS]``).

Each rank gets torchrun's environment, so the script's ``cg.init()`` (``import commgraph.pyg as
cg``) joins them into one job, with torch's default process group for DDP and torch.distributed.
A partition set among ARGS is checked against the workers, and a job that would not fit in this
machine's memory is refused before any rank starts. A rank that raises or exits non-zero stops
the others within about two seconds, and the job exits with that rank named.
"""

from __future__ import annotations

import argparse

from commgraph.cli import describe
from commgraph.cli.args import add_format
from commgraph.launch.options import RunOptions


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "run", help="run your own PyG script as N ranks on this machine (commgraph.pyg)", description=describe(__doc__)
    )
    RunOptions.add_arguments(parser)
    add_format(parser)
    parser.add_argument("script", metavar="SCRIPT", help="the Python script each rank runs, as python SCRIPT")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the script's own arguments, as given")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from commgraph.launch.script import run_script

    return run_script(RunOptions.from_args(args), args.script, args.args, args.output)
