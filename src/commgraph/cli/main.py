"""Entry point of the ``commgraph`` command. User errors print one line and exit 2; anything else
is a bug and prints one line too, with the traceback only under ``--debug``."""

from __future__ import annotations

import os
import sys
import traceback
import warnings
from typing import NamedTuple

# torch_geometric's import touches torch.jit.script, which torch now warns about on every start
warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.* is deprecated", category=FutureWarning)

from commgraph import __version__
from commgraph.cli import (Parser, analyze, convert, datasets, info, llm, multipath, partition, paths, plan, plot,
                           predict, simulate, topo, train)
from commgraph.errors import CommgraphError


class Group(NamedTuple):
    """A command that only holds commands: ``commgraph NAME CHILD ...``."""

    name: str
    help: str
    children: tuple  # modules (their ``register``), register functions, or nested Groups


GROUPS = (
    Group("graph", "read, describe, convert and download graphs", (info, convert, datasets)),
    Group("partition", "make and describe partition sets (one part per worker)", (partition,)),
    topo,
    plan,
    Group("sim", "price work on a topology in the flow-level simulator", (
        simulate,
        llm,
        Group("multipath", "multi-path communication inside a host (LEO)",
              (multipath, paths, plan.register_h2d)),
    )),
    train,
    predict,
    analyze,
    plot,
)

# Old spellings, kept for one release: the longest matching prefix is rewritten before parsing.
ALIASES = {
    ("info",): ("graph", "info"),
    ("convert",): ("graph", "convert"),
    ("datasets",): ("graph", "datasets"),
    ("partition-info",): ("partition", "info"),
    ("simulate",): ("sim", "dag"),
    ("llm", "simulate"): ("sim", "llm"),
    ("llm",): ("sim", "llm"),
    ("multipath", "simulate"): ("sim", "multipath", "simulate"),
    ("multipath",): ("sim", "multipath"),
    ("paths",): ("sim", "multipath", "paths"),
    ("plan", "h2d"): ("sim", "multipath", "h2d"),
}
PARTITION_CHILDREN = ("make", "info", "-h", "--help")


def build_parser() -> Parser:
    parser = Parser(
        prog="commgraph",
        description="Communication-efficient distributed training of graph neural networks.",
        epilog="Old spellings still work for this release, as aliases: "
               + "; ".join(f"{' '.join(old)} = {' '.join(new)}" for old, new in ALIASES.items()
                           if not any(other[:len(old)] == old and other != old for other in ALIASES))
               + "; partition GRAPH = partition make GRAPH.",
    )
    parser.add_argument("--version", action="version", version=f"commgraph {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    _add(parser.add_subparsers(dest="command", metavar="COMMAND", required=True), GROUPS)
    return parser


def _add(subparsers, children) -> None:
    for child in children:
        if isinstance(child, Group):
            group = subparsers.add_parser(child.name, help=child.help, description=child.help)
            _add(group.add_subparsers(dest=f"{child.name}_command", metavar="COMMAND", required=True),
                 child.children)
        else:
            getattr(child, "register", child)(subparsers)


def new_spelling(argv: list[str]) -> list[str]:
    """``argv`` with an old command spelling (``ALIASES``, ``partition GRAPH``) replaced by the new one; a note
    on stderr says which, and stdout is the new spelling's."""
    start = 0
    while start < len(argv) and argv[start] == "--debug":
        start += 1
    words = argv[start:]
    for old, new in sorted(ALIASES.items(), key=lambda item: -len(item[0])):
        if tuple(words[:len(old)]) == old:
            break
    else:
        if words[:1] != ["partition"] or words[1:2] == [] or words[1] in PARTITION_CHILDREN:
            return argv
        old, new = ("partition",), ("partition", "make")
    print(f"commgraph: note: '{' '.join(old)}' is an alias of '{' '.join(new)}', kept for one release",
          file=sys.stderr)
    return [*argv[:start], *new, *words[len(old):]]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(new_spelling(sys.argv[1:] if argv is None else list(argv)))
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
