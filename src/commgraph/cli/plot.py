"""``commgraph plot RUN.jsonl [RUN.jsonl ...] --png curves.png``: loss and accuracy against epochs
for one training run or several (the files ``commgraph train --metrics-out`` writes); with
``--y epoch_s,comm_wait,bytes`` (any of them), a panel each of epoch time, communication wait and
bytes per epoch; with ``--predicted``, each epoch's predicted step time against its measured one."""

from __future__ import annotations

import argparse
from pathlib import Path

from commgraph.cli import describe
from commgraph.cli.args import add_force, add_png, check_outputs, wrote
from commgraph.errors import TrainingError
from commgraph.render.pictures import METRICS, draw_lines, metric_panels
from commgraph.render.units import count
from commgraph.train.plot import plot_predicted, plot_runs, read_metrics


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "plot", help="draw training curves from metrics.jsonl files", description=describe(__doc__)
    )
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN.jsonl", help="metrics files, one per run")
    add_png(parser, "the picture to write", required=True)
    parser.add_argument(
        "--predicted",
        action="store_true",
        help="predicted against measured step time, one point an epoch, instead of the curves",
    )
    parser.add_argument(
        "--y",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        metavar="NAME[,NAME]",
        help=f"a panel each, against epochs, instead of the curves: {', '.join(METRICS)}",
    )
    add_force(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.png.suffix != ".png":
        raise TrainingError(f"--png must end in .png, got {str(args.png)!r}")
    check_outputs(args, "--png")
    runs = {}
    for path in args.runs:
        label = path.stem if path.stem not in runs else str(path)
        runs[label] = read_metrics(path)
    if args.y and args.predicted:
        raise TrainingError("--y and --predicted draw different pictures: choose one")
    if args.y:
        draw_lines(metric_panels(runs, args.y), args.png)
    else:
        (plot_predicted if args.predicted else plot_runs)(runs, args.png)
    epochs = ", ".join(f"{label}: {count(len(records), 'epoch')}" for label, records in runs.items())
    wrote(args.png, epochs)
    return 0
