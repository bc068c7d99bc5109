"""Everyday conveniences: training curves, TensorBoard (--version: test_cli; defaults in every --help:
test_cli_vocabulary)."""

import json

import pytest

from commgraph.cli.main import main


def write_run(path, losses, accs):
    lines = [
        json.dumps({"epoch": e + 1, "loss": loss, "train_acc": acc, "val_acc": acc, "test_acc": acc})
        for e, (loss, acc) in enumerate(zip(losses, accs))
    ]
    path.write_text("\n".join(lines) + "\n")


def test_plot_one_run_or_several(tmp_path, capsys):
    write_run(tmp_path / "a.jsonl", [1.0, 0.5, 0.25], [0.3, None, 0.8])
    write_run(tmp_path / "b.jsonl", [0.9, 0.4], [0.2, 0.6])
    for runs in (["a.jsonl"], ["a.jsonl", "b.jsonl"]):
        png = tmp_path / f"{len(runs)}.png"
        assert main(["plot", *(str(tmp_path / r) for r in runs), "--png", str(png)]) == 0
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {tmp_path / '2.png'} (a: 3 epochs, b: 2 epochs)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        ("", "holds no epochs"),
        ('{"epoch": 1, "loss": 0.5}\nnot json\n', "line 2"),
    ],
)
def test_plot_refuses_bad_runs(tmp_path, capsys, content, message):
    run = tmp_path / "run.jsonl"
    if content is not None:
        run.write_text(content)
    assert main(["plot", str(run), "--png", str(tmp_path / "x.png")]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "x.png").exists()


@pytest.mark.multiproc
def test_tensorboard_missing_is_a_clear_error(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    assert main(["train", "cora", "--tensorboard", "tb", "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert "--tensorboard needs the TensorBoard package: pip install 'commgraph[tensorboard]'" in err


@pytest.mark.multiproc
def test_tensorboard_events_match_the_metrics(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    metrics, logdir = tmp_path / "m.jsonl", tmp_path / "tb"
    assert (
        main(
            [
                "train",
                "cora",
                "--epochs",
                "3",
                "--hidden",
                "8",
                "--quiet",
                "--device",
                "cpu",
                "--partition-dir",
                str(tmp_path / "parts"),
                "--metrics-out",
                str(metrics),
                "--tensorboard",
                str(logdir),
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    events = EventAccumulator(str(logdir))
    events.Reload()
    losses = [(e.step, e.value) for e in events.Scalars("loss")]
    assert losses == [(r["epoch"], pytest.approx(r["loss"], rel=1e-6)) for r in records]
    assert [e.value for e in events.Scalars("accuracy/test")] == pytest.approx([r["test_acc"] for r in records])
