"""Prediction with a trained model: the whole graph in one process, the same function training
computes across workers; the partition set's graph rebuilt; bad requests."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch_geometric.nn import GCNConv, SAGEConv

from commgraph.cli.main import main
from commgraph.graph import Graph, load_graph, save_npz
from commgraph.nn import GNN
from commgraph.partition import load_partition_set, partition_graph, partition_metrics, write_partition_set
from commgraph.train import checkpoint
from commgraph.train.predict import load_model, predict
from forked import run_commgraph


@pytest.fixture(scope="module")
def cora():
    return load_graph("cora")


@pytest.fixture(scope="module")
def cora_parts(cora, tmp_path_factory):
    out = tmp_path_factory.mktemp("predict") / "cora-2"
    assignment, _ = partition_graph(cora, 2, "g3", 0)
    write_partition_set(
        cora, assignment, 2, out, method="g3", seed=0, seconds=0.0, metrics=partition_metrics(cora, assignment, 2)
    )
    return out


def _save(directory, model: GNN, kind: str, out_dim: int, *, graph: str = "x", widths: bool = True) -> None:
    state = {
        "epoch": 3,
        "model": model.state_dict(),
        "identity": {"graph": graph, "workers": 1, "model": kind, "layers": model.num_layers, "hidden": 16, "heads": 4},
    }
    if widths:
        state["widths"] = {"in": model.in_dim, "out": out_dim}
    checkpoint.save(directory, state)


@pytest.mark.parametrize("kind", ["gcn", "sage"])
def test_predict_is_pyg_on_the_whole_graph(cora, tmp_path, kind):
    """A saved model, reloaded, gives PyG's own layers' output on the whole edge list (GCN with
    PyG's normalisation and self loops), to float precision."""
    torch.manual_seed(0)
    _save(tmp_path, GNN(kind, cora.features.shape[1], 16, 7, layers=2), kind, 7)
    model, trained = load_model(tmp_path)
    assert trained["epoch"] == 3 and not model.training
    dst = np.repeat(np.arange(cora.num_nodes), np.diff(cora.indptr))
    edge_index = torch.from_numpy(np.stack([cora.indices, dst]))
    h = torch.from_numpy(cora.features)
    with torch.no_grad():
        for index, layer in enumerate(model.convs):
            if kind == "gcn":
                ref = GCNConv(layer.conv.in_channels, layer.conv.out_channels)
                ref.lin.weight.copy_(layer.conv.lin.weight)
                ref.bias.copy_(layer.conv.bias)
            else:
                ref = SAGEConv(layer.conv.in_channels, layer.conv.out_channels)
                ref.load_state_dict(layer.conv.state_dict())
            h = ref(h, edge_index)
            if index == 0:
                h = torch.relu(h)
    torch.testing.assert_close(predict(model, cora), h, atol=1e-5, rtol=1e-5)


@pytest.mark.multiproc
@pytest.mark.timeout(300)
def test_predict_after_distributed_training_matches_its_accuracy(cora, cora_parts, tmp_path, capsys):
    """Train with 2 workers; the checkpoint, run in one process, has exactly the accuracies the
    trainer measured across workers after its last epoch, from the graph or the partition set, and
    predicts what the workers predicted (``--predictions-out``)."""
    metrics, ck = tmp_path / "run.jsonl", tmp_path / "ck"
    job = run_commgraph(
        [
            "train",
            str(cora_parts),
            "--model",
            "gat",
            "--heads",
            "2",
            "--hidden",
            "8",
            "--epochs",
            "12",
            "--quiet",
            "--metrics-out",
            str(metrics),
            "--checkpoint-dir",
            str(ck),
            "--predictions-out",
            str(tmp_path / "workers.csv"),
        ]
    )
    assert job.returncode == 0, job.stderr
    last = json.loads(metrics.read_text().splitlines()[-1])
    model, trained = load_model(ck)
    assert (trained["model"], trained["epoch"], trained["workers"]) == ("gat", 12, 2)
    predicted = predict(model, cora).argmax(dim=1).numpy()
    # what the two workers predicted for their own nodes, assembled by rank 0, is the same
    workers = np.loadtxt(tmp_path / "workers.csv", delimiter=",", skiprows=1, dtype=np.int64)
    np.testing.assert_array_equal(workers, np.stack([np.arange(cora.num_nodes), predicted], axis=1))
    for split in ("train", "val", "test"):
        mask = getattr(cora, f"{split}_mask")
        assert (predicted[mask] == cora.labels[mask]).mean() == pytest.approx(last[f"{split}_acc"], abs=1e-12)
    for source in (str(cora_parts), "cora"):
        out = tmp_path / f"{len(source)}.npy"
        assert main(["predict", source, "--checkpoint-dir", str(ck), "--out", str(out), "--json"]) == 0
        np.testing.assert_array_equal(np.load(out), predicted)
    assert main(["predict", "cora", "--checkpoint-dir", str(ck), "--out", str(tmp_path / "p.csv")]) == 0
    rows = np.loadtxt(tmp_path / "p.csv", delimiter=",", skiprows=1, dtype=np.int64)
    np.testing.assert_array_equal(rows, np.stack([np.arange(cora.num_nodes), predicted], axis=1))
    assert (tmp_path / "p.csv").read_text().startswith("node,class\n")
    # --best: the epoch with the best validation accuracy (the first, on ties), with its accuracies
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    best = max(records, key=lambda r: (r["val_acc"], -r["epoch"]))
    assert main(["predict", "cora", "--checkpoint-dir", str(ck), "--best", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["epoch"] == best["epoch"]
    for split in ("train", "val", "test"):
        assert report["accuracy"][split]["accuracy"] == pytest.approx(best[f"{split}_acc"], abs=1e-12)
    assert job.stdout.splitlines()[-1].endswith(
        f"best validation accuracy {best['val_acc']:.4f} at epoch {best['epoch']} (test {best['test_acc']:.4f})"
    )


@pytest.mark.multiproc
@pytest.mark.timeout(200)
@pytest.mark.parametrize("kind", ["gcn", "gat"])
def test_predict_across_workers_equals_one_process(cora, cora_parts, tmp_path, capsys, kind):
    """Two processes, each predicting its own part with the halo exchanged layer by layer, give the
    single-process predictions and accuracies: on a partition set, and on a GRAPH the launcher
    partitions first, as for training."""
    torch.manual_seed(0)
    model = GNN(kind, cora.features.shape[1], 16, 7)
    _save(tmp_path / "ck", model, kind, 7, graph=cora.checksum())
    given = [str(cora_parts)] if kind == "gcn" else ["cora", "--partition-dir", str(tmp_path / "parts")]
    job = run_commgraph(
        [
            "predict",
            *given,
            "--checkpoint-dir",
            str(tmp_path / "ck"),
            "--workers",
            "2",
            "--json",
            "--out",
            str(tmp_path / "p.npy"),
        ]
    )
    assert job.returncode == 0, job.stderr
    report = json.loads(job.stdout.splitlines()[-1])
    expected = predict(model, cora).argmax(dim=1).numpy()
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), expected)
    assert report["same_graph"] is True and report["num_nodes"] == cora.num_nodes
    for split in ("train", "val", "test"):
        mask = getattr(cora, f"{split}_mask")
        assert report["accuracy"][split] == {
            "accuracy": pytest.approx((expected[mask] == cora.labels[mask]).mean(), abs=1e-12),
            "nodes": int(mask.sum()),
        }
    assert main(["predict", str(cora_parts), "--checkpoint-dir", str(tmp_path / "ck"), "--workers", "3"]) == 2
    assert "has 2 parts; pass --workers 2" in capsys.readouterr().err


@pytest.mark.multiproc
def test_predict_cli_reports_accuracy_and_origin(cora, tmp_path, capsys):
    torch.manual_seed(0)
    _save(tmp_path, GNN("sage", cora.features.shape[1], 16, 7), "sage", 7, graph=cora.checksum())
    assert main(["predict", "cora", "--checkpoint-dir", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["same_graph"] is True and report["epoch"] == 3 and report["out"] is None
    assert {split: r["nodes"] for split, r in report["accuracy"].items()} == {"train": 140, "val": 500, "test": 1000}
    _save(tmp_path, GNN("sage", cora.features.shape[1], 16, 7), "sage", 7, graph="another")
    assert main(["predict", "cora", "--checkpoint-dir", str(tmp_path)]) == 0
    assert "a graph it was not trained on" in capsys.readouterr().out


@pytest.mark.multiproc
def test_predictions_csv_uses_original_node_ids(cora, tmp_path, capsys):
    """A graph whose loader kept original ids (a SNAP file's, here set by hand in an .npz) gets its
    predictions under those ids."""
    ids = np.arange(cora.num_nodes, dtype=np.int64) * 10 + 7
    save_npz(Graph(cora.indptr, cora.indices, cora.features, node_ids=ids, name="ids"), tmp_path / "g.npz")
    torch.manual_seed(0)
    model = GNN("gcn", cora.features.shape[1], 16, 7)
    _save(tmp_path / "ck", model, "gcn", 7)
    assert (
        main(
            [
                "predict",
                str(tmp_path / "g.npz"),
                "--checkpoint-dir",
                str(tmp_path / "ck"),
                "--out",
                str(tmp_path / "p.csv"),
            ]
        )
        == 0
    )
    rows = np.loadtxt(tmp_path / "p.csv", delimiter=",", skiprows=1, dtype=np.int64)
    np.testing.assert_array_equal(rows[:, 0], ids)
    np.testing.assert_array_equal(rows[:, 1], predict(model, cora).argmax(dim=1).numpy())
    assert "accuracy" not in capsys.readouterr().out  # no labels: nothing to score


def test_prediction_files_round_trip_across_chunks(tmp_path, monkeypatch):
    import commgraph.graph.nodefile as nodefile
    import commgraph.train.predict as module

    monkeypatch.setattr(nodefile, "CSV_CHUNK", 7)  # 20 rows: three chunks, the last one short
    predicted, ids = np.arange(20) % 3, np.arange(20) * 5 + 1
    module.write_predictions(tmp_path / "p.csv", predicted, ids)
    module.write_predictions(tmp_path / "p.npy", predicted)
    rows = np.loadtxt(tmp_path / "p.csv", delimiter=",", skiprows=1, dtype=np.int64)
    np.testing.assert_array_equal(rows, np.stack([ids, predicted], axis=1))
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), predicted)


@pytest.mark.multiproc
def test_partition_set_rebuilds_its_graph(cora, cora_parts):
    rebuilt = load_partition_set(cora_parts).graph()
    assert rebuilt.equals(cora) and rebuilt.checksum() == cora.checksum()


class _Payload:
    def __reduce__(self):
        return (open, ("ran-code", "w"))


@pytest.mark.parametrize(
    "setup, args, message",
    [
        ("none", [], "no checkpoint at"),
        ("old", [], "predates prediction support"),
        ("ok", ["--out", "p.txt"], "must end in .npy or .csv"),
        ("ok", ["--out", "exists.npy"], "exists; pass --force"),
        ("ok", ["--best"], "has no best.pt: the run evaluated no epoch on validation nodes"),
        ("ok", ["--workers", "0"], "--workers must be >= 1"),
        ("narrow", [], "has 1433 features per node, but the model was trained on 5"),
        ("garbage", [], "is not a readable checkpoint"),
        ("code", [], "holds Python objects beyond tensors"),
        *([("ok", ["--device", "cuda"], "torch sees no GPU")] if not torch.cuda.is_available() else []),
    ],
)
@pytest.mark.multiproc
def test_bad_prediction_requests(cora, tmp_path, monkeypatch, capsys, setup, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exists.npy").write_bytes(b"keep")
    ck = tmp_path / "ck"
    if setup in ("old", "ok"):
        _save(ck, GNN("sage", cora.features.shape[1], 16, 7), "sage", 7, widths=setup == "ok")
    elif setup == "narrow":
        _save(ck, GNN("sage", 5, 16, 7), "sage", 7)
    elif setup == "garbage":
        ck.mkdir()
        (ck / checkpoint.FILE).write_bytes(b"not a checkpoint")
    elif setup == "code":  # unpickling this would run a command; weights_only refuses it
        checkpoint.save(ck, {"identity": {}, "payload": _Payload()})
    assert main(["predict", "cora", "--checkpoint-dir", str(ck), *args]) == 2
    assert message in capsys.readouterr().err
    assert (tmp_path / "exists.npy").read_bytes() == b"keep"
    assert not (tmp_path / "p.txt").exists()
    assert not (tmp_path / "ran-code").exists()
