"""The options many commands share, each spelled one way: ``--topology`` (always an option),
``--speeds`` (GB/s), byte counts (one parser: ``1G``, ``512M``, ``1e9``), ``--json``, ``--png``,
``--format text|json|csv|md`` (``--json`` its alias) for every command that prints a report, and
:func:`emit`, the one place a report is printed. The output rule: every file a command writes is
named by an option, is refused when it exists unless ``--force`` is given (one line, exit 2), and
is announced by one ``wrote PATH`` line on stderr (stdout carries the results alone, so ``--json``
output stays one object)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from commgraph.atomic import FORCE_HELP, check_output
from commgraph.errors import CommgraphError
from commgraph.options import option
from commgraph.render import FORMAT_HELP, FORMATS, Report, render
from commgraph.topology.resolve import SPEED_KEYS
from commgraph.units import parse_bytes

TOPOLOGY_HELP = "detect (this machine), a preset (commgraph topo list) or a YAML file"


def byte_count(text: str) -> float:
    """An argparse ``type``: bytes from ``4096``, ``64K``, ``1M``, ``1G`` or ``1e9`` (see :mod:`commgraph.units`)."""
    try:
        return parse_bytes(text)
    except CommgraphError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def byte_counts(text: str) -> tuple[float, ...]:
    """An argparse ``type``: a comma-separated list of byte counts, at least one."""
    items = [item for item in text.replace(" ", "").split(",") if item]
    if not items:
        raise argparse.ArgumentTypeError(f"expected sizes such as 4K,1M,16M, got {text!r}")
    return tuple(byte_count(item) for item in items)


def add_topology_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, help: str = TOPOLOGY_HELP) -> None:
    """``--topology`` (required) and ``--speeds``."""
    parser.add_argument("--topology", required=True, metavar="TOPOLOGY", help=help)
    add_speeds_argument(parser)


def add_speeds_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, help: str | None = None) -> None:
    parser.add_argument(
        "--speeds",
        metavar="K=GBPS,...",
        help=help or f"override a preset's link speeds in GB/s, e.g. nv2=40,pcie=24 (keys: {SPEED_KEYS})",
    )


def topology_from_args(args: argparse.Namespace):
    """The :class:`~commgraph.topology.Topology` that ``--topology`` and ``--speeds`` name."""
    from commgraph.topology import parse_speeds, resolve_topology

    return resolve_topology(args.topology, device="auto", speeds=parse_speeds(args.speeds))


def add_format(parser: argparse.ArgumentParser, into: argparse._ActionsContainer | None = None) -> None:
    """``--format text|json|csv|md`` and ``--json`` (the same as ``--format json``), both into
    ``args.output`` (the flags added to ``into``, a group of ``parser``, where given)."""
    (into or parser).add_argument("--format", dest="output", choices=FORMATS, help=f"{FORMAT_HELP} (default text)")
    add_json_alias(into or parser)
    parser.set_defaults(output="text")


def format_option():
    """``--format`` as a field of an :class:`~commgraph.options.Options` class (``output``), for
    options a worker receives; :func:`add_json_alias` adds ``--json`` beside it."""
    return option(FORMAT_HELP, choices=FORMATS, name="format", default="text")


def add_json_alias(parser: argparse._ActionsContainer) -> None:
    """``--json``: the same as ``--format json``."""
    parser.add_argument("--json", dest="output", action="store_const", const="json", help="the same as --format json")


def emit(args: argparse.Namespace, report: Report) -> None:
    """Print ``report`` (:class:`~commgraph.render.Report`) on stdout in ``--format``."""
    print(render(report, args.output))


def add_force(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def add_png(parser: argparse.ArgumentParser, help: str, *, required: bool = False) -> None:
    """``--png FILE.png``: a picture the command draws (a command that has it also has ``--force``)."""
    parser.add_argument("--png", type=Path, metavar="FILE.png", required=required, help=help)


def check_outputs(args: argparse.Namespace, *flags: str) -> None:
    """Refuse, before any work, each output ``--flag`` given that cannot be written or exists
    without ``--force`` (:func:`~commgraph.atomic.check_output`)."""
    for name in flags:
        check_output(getattr(args, name.lstrip("-").replace("-", "_")), name, force=args.force)


def wrote(path: str | Path, detail: str | None = None) -> None:
    """The one line that says a command wrote ``path`` (on stderr)."""
    print(f"wrote {path}" + (f" ({detail})" if detail else ""), file=sys.stderr)
