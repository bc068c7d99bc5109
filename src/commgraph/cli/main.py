"""Entry point of the ``commgraph`` command. User errors print one line and exit 2; anything else
is a bug and prints one line too, with the traceback only under ``--debug``."""

from __future__ import annotations

import os
import sys
import traceback
import warnings

# torch_geometric's import touches torch.jit.script, which torch now warns about on every start
warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.* is deprecated", category=FutureWarning)

from commgraph import __version__
from commgraph.cli import (Parser, analyze, convert, datasets, info, llm, multipath, partition, paths, plan, plot,
                           predict, simulate, topo, train)
from commgraph.errors import CommgraphError

COMMANDS = (info, convert, datasets, partition, plan, topo, simulate, paths, multipath, llm, train, predict, analyze,
            plot)


def build_parser() -> Parser:
    parser = Parser(
        prog="commgraph",
        description="Communication-efficient distributed training of graph neural networks.",
    )
    parser.add_argument("--version", action="version", version=f"commgraph {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except CommgraphError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"commgraph: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("commgraph: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, not a user error: say so in one line
        if args.debug:
            traceback.print_exc()
        print(f"commgraph: internal error: {type(exc).__name__}: {exc} "
              "(rerun with --debug for the traceback, and please report it)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
