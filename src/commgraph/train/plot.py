"""Training curves: loss and accuracies against epochs, from the ``metrics.jsonl`` files that
``commgraph train --metrics-out`` writes (one JSON object per epoch: ``epoch``, ``loss``,
``train_acc``, ``val_acc``, ``test_acc``; accuracies are null on epochs not evaluated)."""

from __future__ import annotations

import json
from pathlib import Path

from commgraph.errors import TrainingError
from commgraph.plotting import pyplot, save_png

ACCURACIES = (("train_acc", ":"), ("val_acc", "--"), ("test_acc", "-"))


def read_metrics(path: Path) -> list[dict]:
    """The epoch records of one run, checked: each line a JSON object with an epoch and a loss."""
    if not path.is_file():
        raise TrainingError(f"{path}: no such file (write one with commgraph train --metrics-out FILE)")
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            float(record["loss"]), int(record["epoch"])
        except (ValueError, TypeError, KeyError) as exc:
            raise TrainingError(f"{path}, line {number}: not a metrics record with epoch and loss ({exc})") from None
        records.append(record)
    if not records:
        raise TrainingError(f"{path}: holds no epochs")
    return records


def plot_runs(runs: dict[str, list[dict]], path: str | Path) -> None:
    """Two panels, loss and accuracy against epoch, one colour per run (train dotted, val dashed,
    test solid); written atomically as PNG."""
    plt = pyplot()

    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(12, 4.2))
    for index, (label, records) in enumerate(runs.items()):
        colour = f"C{index % 10}"
        loss_ax.plot([r["epoch"] for r in records], [r["loss"] for r in records], color=colour, label=label)
        for key, style in ACCURACIES:
            points = [(r["epoch"], r[key]) for r in records if r.get(key) is not None]
            if points:
                acc_ax.plot(*zip(*points), color=colour, linestyle=style, label=f"{label} {key[:-4]}")
    loss_ax.set(xlabel="epoch", ylabel="loss", title="training loss")
    acc_ax.set(xlabel="epoch", ylabel="accuracy", title="accuracy (train dotted, val dashed, test solid)")
    for ax in (loss_ax, acc_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save_png(fig, path)


def plot_predicted(runs: dict[str, list[dict]], path: str | Path) -> None:
    """Predicted against measured step time, one point per epoch that records both
    (``predicted_step_seconds``, ``measured_step_seconds``), one colour per run, beside the line
    where they are equal; written atomically as PNG."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 5))
    reach = 0.0
    for index, (label, records) in enumerate(runs.items()):
        points = [
            (r["measured_step_seconds"] * 1e3, r["predicted_step_seconds"] * 1e3)
            for r in records
            if r.get("measured_step_seconds") is not None and r.get("predicted_step_seconds") is not None
        ]
        if not points:
            raise TrainingError(f"run {label!r} records no predicted step time (a run of an older commgraph)")
        ax.scatter(*zip(*points), color=f"C{index % 10}", label=label, s=14)
        reach = max(reach, *(max(p) for p in points))
    ax.plot([0, reach], [0, reach], color="grey", linestyle="--", label="predicted = measured")
    ax.set(xlabel="measured step (ms)", ylabel="predicted step (ms)", title="step time: predicted against measured")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_png(fig, path)
