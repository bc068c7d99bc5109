"""Entry point of the ``commgraph`` command. User errors print one line and exit 2; anything else
is a bug and prints one line too, with the traceback only under ``--debug``."""

from __future__ import annotations

import importlib
import os
import sys
import traceback
import warnings
from typing import NamedTuple

# torch_geometric's import touches torch.jit.script, which torch now warns about on every start
warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.* is deprecated", category=FutureWarning)

from commgraph import __version__
from commgraph.cli import Parser, in_flags
from commgraph.errors import CommgraphError


class Command(NamedTuple):
    """A top-level command whose parser ``target`` adds (a ``commgraph.cli`` module's ``register``)."""

    name: str
    help: str  # the module's own, shown in the top-level list without importing it
    target: str


class Group(NamedTuple):
    """A command that only holds commands: ``commgraph NAME CHILD ...``. A child is a Group or a target:
    ``module`` (its ``register``) or ``module:function``."""

    name: str
    help: str
    children: tuple


TREE = (
    Group("graph", "read, describe, convert and download graphs", ("info", "convert", "datasets")),
    Group("partition", "make and describe partition sets (one part per worker)", ("partition",)),
    Command("topo", "hardware topologies", "topo"),
    Command("plan", "plan and price communication", "plan"),
    Group(
        "sim",
        "price work on a topology in the flow-level simulator",
        (
            "simulate",
            "llm",
            Group(
                "multipath", "multi-path communication inside a host (LEO)", ("multipath", "paths", "plan:register_h2d")
            ),
        ),
    ),
    Command("train", "train a GNN across workers, full-graph or on sampled mini-batches", "train"),
    Command("predict", "label every node with a trained model", "predict"),
    Command("analyze", "BFS, SSSP, PageRank or connected components across workers", "analyze"),
    Command("run", "run your own PyG script as N ranks on this machine (commgraph.pyg)", "run"),
    Command("plot", "summarise training runs and draw their curves from metrics.jsonl files", "plot"),
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


def build_parser(load: set[str] | None = None) -> Parser:
    """The whole command tree, or with ``load``, only those top-level commands' parsers: the others are
    listed with their help and their modules (torch, PyG, ...) are not imported, so a command starts fast."""
    parser = Parser(
        prog="commgraph",
        description="Communication-efficient distributed training of graph neural networks.",
        epilog="Old spellings still work for this release, as aliases: "
        + "; ".join(
            f"{' '.join(old)} = {' '.join(new)}"
            for old, new in ALIASES.items()
            if not any(other[: len(old)] == old and other != old for other in ALIASES)
        )
        + "; partition GRAPH = partition make GRAPH.",
    )
    parser.add_argument("--version", action="version", version=f"commgraph {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for entry in TREE:
        if load is not None and entry.name not in load:
            subparsers.add_parser(entry.name, help=entry.help, add_help=False)
        elif isinstance(entry, Group):
            _add_group(subparsers, entry)
        else:
            _target(entry.target)(subparsers)
    return parser


def _add_group(subparsers, group: Group) -> None:
    parser = subparsers.add_parser(group.name, help=group.help, description=group.help)
    children = parser.add_subparsers(dest=f"{group.name}_command", metavar="COMMAND", required=True)
    for child in group.children:
        if isinstance(child, Group):
            _add_group(children, child)
        else:
            _target(child)(children)


def _target(target: str):
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(f"commgraph.cli.{module}"), function or "register")


def _command_start(argv: list[str]) -> int:
    """Where the command's words start, after the global ``--debug``."""
    start = 0
    while start < len(argv) and argv[start] == "--debug":
        start += 1
    return start


def new_spelling(argv: list[str]) -> list[str]:
    """``argv`` with an old command spelling (``ALIASES``, ``partition GRAPH``) replaced by the new one; a note
    on stderr says which, and stdout is the new spelling's."""
    start = _command_start(argv)
    words = argv[start:]
    for old, new in sorted(ALIASES.items(), key=lambda item: -len(item[0])):  # noqa: B007 - read after the break
        if tuple(words[: len(old)]) == old:
            break
    else:
        if words[:1] != ["partition"] or words[1:2] == [] or words[1] in PARTITION_CHILDREN:
            return argv
        old, new = ("partition",), ("partition", "make")
    print(f"commgraph: note: '{' '.join(old)}' is an alias of '{' '.join(new)}', kept for one release", file=sys.stderr)
    return [*argv[:start], *new, *words[len(old) :]]


def main(argv: list[str] | None = None, *, ends_process: bool = False) -> int:
    """Run the command ``argv`` (default: this process's arguments); its exit code. ``ends_process``:
    this process ends with the command (:func:`entry`), so a job of one worker may run its rank in
    it (``args.ends_process``; a process that goes on, a test's or a program's, would keep the
    rank's OpenMP threads, and a rank it forked later would wait on them for ever)."""
    argv = new_spelling(sys.argv[1:] if argv is None else list(argv))
    parser = build_parser(load=set(argv[_command_start(argv) :][:1]))
    args = parser.parse_args(argv)
    args.ends_process = ends_process
    try:
        return args.run(args)
    except CommgraphError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"commgraph: error: {in_flags(exc, parser)}", file=sys.stderr)
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
        print(
            f"commgraph: internal error: {type(exc).__name__}: {exc} "
            "(rerun with --debug for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 1


def entry() -> None:
    """The ``commgraph`` command: :func:`main`, then exit at once. Every file is written and closed
    by then; skipping the interpreter's teardown (seconds of unloading torch and PyG) is what lets
    a job stop within two seconds of a worker's death."""
    code = main(ends_process=True)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a closed pipe: nothing more can reach it
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
