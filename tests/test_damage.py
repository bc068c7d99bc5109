"""Fault injection over stored files: every file of a partition set (cora, 2 parts), a checkpoint and
a DGS mask file, each damaged in turn (truncated, emptied, rewritten with the wrong dtype, the wrong
shape or ids out of range) with its checksum updated, so that only a check of the contents can find
it. Each case runs the CLI in this process and expects exit 2, nothing on stdout and one line on
stderr that starts ``commgraph: error:`` and names the damaged file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from commgraph.cli.main import main
from commgraph.nn import GNN
from commgraph.partition import load_partition_set
from commgraph.partition.validate import PART_RULES, STRUCTURE_RULES
from commgraph.sample.dgs import DGSMasks
from commgraph.sample.maskfile import save_masks
from commgraph.train import checkpoint
from commgraph.train.config import TrainConfig

PARTS = 2
SET_FILES = [f"part-{k}/{name}.npy" for k in range(PARTS) for name in PART_RULES if name != "weights"] + [
    f"structure/{name}.npy" for name in STRUCTURE_RULES
]
# files whose values are ids or pointers: their range is checked
RANGED = [
    f"part-{k}/{name}.npy"
    for k in range(PARTS)
    for name, rule in PART_RULES.items()
    if rule.below is not None or rule.pointer is not None
] + [f"structure/{name}.npy" for name, rule in STRUCTURE_RULES.items() if rule.below is not None or rule.pointer]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """A 2-part cora set (random parts: quick), a checkpoint of a model for it, and its mask file."""
    root = tmp_path_factory.mktemp("damage")
    pset = root / "set"
    assert main(["partition", "make", "cora", "--parts", "2", "--method", "random", "--out", str(pset), "--json"]) == 0
    opened = load_partition_set(pset)
    width = int(opened.part(0).features.shape[1])
    gnn = TrainConfig().gnn
    model = GNN(gnn.model, width, gnn.hidden, 7, layers=gnn.layers, heads=gnn.heads)
    identity = checkpoint.identity(opened.manifest["graph"]["checksum"], PARTS, TrainConfig())
    state = {"epoch": 1, "model": model.state_dict(), "identity": identity, "widths": {"in": width, "out": 7}}
    rng = [torch.get_rng_state()] * PARTS
    checkpoint.save(root, {**state, "optimizer": {"state": {}, "param_groups": []}, "rng": rng, "best": None})
    nodes = opened.manifest["graph"]["num_nodes"]
    masks = [DGSMasks(np.full(nodes, 0.5, np.float32), np.ones(width, np.float32), 3) for _ in range(PARTS)]
    save_masks(root / "masks.npz", opened, masks)
    return {"set": pset, "checkpoint": root / checkpoint.FILE, "masks": root / "masks.npz"}


# -- damage to one .npy array ---------------------------------------------------------------------------


def _rewrite(file: Path, array: np.ndarray) -> None:
    with open(file, "wb") as handle:
        np.save(handle, array, allow_pickle=False)


def _wrong_dtype(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype.kind in "iub" else a.astype(np.int32)


def _wrong_shape(a: np.ndarray) -> np.ndarray:
    return a[:0] if a.ndim == 2 else a[: a.shape[0] // 2]  # features: the (0, F) table of the report


def _out_of_range(a: np.ndarray) -> np.ndarray:
    a = np.array(a)
    a[-1] = np.iinfo(a.dtype).max
    return a


def _one_node_moved(owner: np.ndarray) -> np.ndarray:
    owner = np.array(owner)
    owner[0] = 1 - owner[0]
    return owner


ARRAY_DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": lambda f: f.write_bytes(f.read_bytes()[: max(f.stat().st_size // 2, 140)]),
    "zero-bytes": lambda f: f.write_bytes(b""),
    "wrong-dtype": lambda f: _rewrite(f, _wrong_dtype(np.load(f))),
    "wrong-shape": lambda f: _rewrite(f, _wrong_shape(np.load(f))),
    "out-of-range": lambda f: _rewrite(f, _out_of_range(np.load(f))),
    "one-node-moved": lambda f: _rewrite(f, _one_node_moved(np.load(f))),  # the owner map alone
}


def _damaged_set(source: Path, target: Path, name: str, damage: str, keep_record: bool) -> None:
    """A copy of the set at ``target`` (hard links, the damaged file a real copy) with file ``name``
    damaged, its checksum updated, and without the manifest's ``arrays`` record unless ``keep_record``
    (a set written before it was kept: the rules alone must find the damage)."""
    for file in source.rglob("*"):
        copy = target / file.relative_to(source)
        if file.is_dir():
            copy.mkdir(parents=True, exist_ok=True)
        elif file.name != "manifest.json":
            copy.parent.mkdir(parents=True, exist_ok=True)
            if file.relative_to(source).as_posix() == name:
                copy.write_bytes(file.read_bytes())
            else:
                os.link(file, copy)
    ARRAY_DAMAGE[damage](target / name)
    manifest = json.loads((source / "manifest.json").read_text())
    manifest["files"][name] = hashlib.sha256((target / name).read_bytes()).hexdigest()
    if not keep_record:
        del manifest["arrays"]
    (target / "manifest.json").write_text(json.dumps(manifest))


@dataclass(frozen=True)
class Case:
    """Run ``argv`` (``{set}``, ``{ck}``: the checkpoint's folder, ``{masks}`` filled in) after
    ``prepare(made, tmp)`` returns the fill-ins; expect the error line to name file ``names`` and
    say ``expect``."""

    name: str
    argv: str
    names: str
    prepare: Callable[[dict, Path], dict]
    expect: str = ""


def _set_case(name: str, damage: str, keep_record: bool = True, argv: str = "train {set} --dry-run") -> Case:
    def prepare(made: dict, tmp: Path) -> dict:
        _damaged_set(made["set"], tmp / "set", name, damage, keep_record)
        return {"set": tmp / "set", "ck": made["checkpoint"].parent}

    record = "" if keep_record else "-unrecorded"
    return Case(f"{name}-{damage}{record}-{argv.split()[0]}", argv, name, prepare)


# shape damage the rules alone pin to the file (owned and halo bind the sizes the files after them check)
UNPINNED_SHAPE = {f"part-{k}/{name}.npy" for k in range(PARTS) for name in ("owned", "halo")}

SET_CASES = [
    *[
        _set_case(name, damage)
        for name in SET_FILES
        for damage in ("truncated", "zero-bytes", "wrong-dtype", "wrong-shape")
    ],
    *[_set_case(name, "out-of-range") for name in RANGED],
    *[_set_case(name, "wrong-dtype", keep_record=False) for name in SET_FILES],
    *[_set_case(name, "wrong-shape", keep_record=False) for name in SET_FILES if name not in UNPINNED_SHAPE],
    *[_set_case(name, "out-of-range", keep_record=False) for name in RANGED],
    *[_set_case("structure/owner.npy", "one-node-moved", keep_record) for keep_record in (True, False)],
    # the report's cases, on the other commands that open a set
    _set_case("part-0/features.npy", "zero-bytes", argv="predict {set} --checkpoint-dir {ck}"),
    _set_case("part-1/features.npy", "wrong-shape", argv="predict {set} --checkpoint-dir {ck}"),
    _set_case("structure/owner.npy", "zero-bytes", argv="partition info {set}"),
    _set_case("structure/indices.npy", "wrong-shape", argv="analyze {set} --algo bfs --source 0"),
    _set_case(
        "part-0/indices.npy", "out-of-range", argv="plan allgather {set} --topology localhost-cpu:2 --feature-dim 8"
    ),
]


# -- damage to a checkpoint -----------------------------------------------------------------------------


def _checkpoint_case(name: str, change: Callable[[dict], object], argv: str, expect: str) -> Case:
    def prepare(made: dict, tmp: Path) -> dict:
        state = torch.load(made["checkpoint"], weights_only=True)
        changed = change(state)
        if isinstance(changed, bytes):
            (tmp / checkpoint.FILE).write_bytes(changed)
        else:
            torch.save(changed, tmp / checkpoint.FILE)
        return {"set": made["set"], "ck": tmp, "masks": made["masks"]}

    return Case(f"checkpoint-{name}-{argv.split()[0]}", argv, checkpoint.FILE, prepare, expect)


def _with(state: dict, **changes) -> dict:
    return {**state, **changes}


def _identity(state: dict, **changes) -> dict:
    return {**state, "identity": {**state["identity"], **changes}}


PREDICT = "predict {set} --checkpoint-dir {ck}"
RESUME = "train {set} --workers 2 --checkpoint-dir {ck} --resume --dry-run"
CHECKPOINT_CASES = [
    _checkpoint_case(name, change, argv, expect)
    for argv in (PREDICT, RESUME)
    for name, change, expect in (
        ("truncated", lambda s: _bytes(s)[:500], "is not a readable checkpoint"),
        ("zero-bytes", lambda s: b"", "is not a readable checkpoint"),
        ("foreign-dict", lambda s: {"weight": torch.zeros(3)}, "is not a commgraph checkpoint (no identity"),
        ("foreign-tensor", lambda s: torch.zeros(3), "is not a commgraph checkpoint (it holds a Tensor"),
        ("hidden-dtype", lambda s: _identity(s, hidden="16"), "is not a commgraph checkpoint (identity.hidden"),
        ("layers-range", lambda s: _identity(s, layers=0), "is not a commgraph checkpoint (identity.layers"),
        ("epoch-range", lambda s: _with(s, epoch=-1), "is not a commgraph checkpoint (epoch is -1"),
        ("widths-range", lambda s: _with(s, widths={"in": 0, "out": 7}), "is not a commgraph checkpoint (widths"),
        ("weights-dtype", lambda s: _with(s, model={"w": "x"}), "is not a commgraph checkpoint (no model weights"),
    )
] + [
    _checkpoint_case(
        "weights-shape",
        lambda s: _with(s, model={k: v[:1] for k, v in s["model"].items()}),
        PREDICT,
        "its weights do not fit",
    ),
    _checkpoint_case("no-optimizer", lambda s: _with(s, optimizer=None), RESUME, "holds no optimizer state"),
    _checkpoint_case("rng-length", lambda s: _with(s, rng=s["rng"][:1]), RESUME, "no random state for each"),
]


def _bytes(state: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


# -- damage to a mask file ------------------------------------------------------------------------------


def _mask_case(name: str, change: Callable[[dict[str, np.ndarray], bytes], object], expect: str) -> Case:
    def prepare(made: dict, tmp: Path) -> dict:
        with np.load(made["masks"]) as loaded:
            arrays = {key: loaded[key] for key in loaded.files}
        changed = change(arrays, made["masks"].read_bytes())
        if isinstance(changed, bytes):
            (tmp / "m.npz").write_bytes(changed)
        else:
            np.savez(tmp / "m.npz", **changed)
        return {"set": made["set"], "masks": tmp / "m.npz"}

    return Case(f"masks-{name}", MASKS, "m.npz", prepare, expect)


MASKS = "train {set} --workers 2 --sampler dgs --dgs-masks {masks} --dry-run"
MASK_CASES = [
    _mask_case("truncated", lambda a, raw: raw[: len(raw) // 2], "is empty, damaged"),
    _mask_case("zero-bytes", lambda a, raw: b"", "is empty, damaged"),
    _mask_case("prob-dtype", lambda a, raw: {**a, "node_prob": a["node_prob"].astype(np.int64)}, "is damaged"),
    _mask_case("iteration-dtype", lambda a, raw: {**a, "iteration": a["iteration"] * 1.0}, "is damaged"),
    _mask_case("prob-shape", lambda a, raw: {**a, "node_prob": a["node_prob"][:, :10]}, "masks of shape"),
    _mask_case("feature-shape", lambda a, raw: {**a, "feature_mask": a["feature_mask"][:1]}, "masks of shape"),
    _mask_case("prob-range", lambda a, raw: {**a, "node_prob": a["node_prob"] + 2}, "outside [0, 1]"),
    _mask_case("parts-range", lambda a, raw: {**a, "parts": np.array(9)}, "another partition set"),
    _mask_case("no-format", lambda a, raw: {k: v for k, v in a.items() if k != "format"}, "not a commgraph"),
]

CASES = SET_CASES + CHECKPOINT_CASES + MASK_CASES


def test_the_table_covers_sixty_file_and_damage_pairs():
    assert len({case.name for case in CASES}) == len(CASES) >= 60


def test_a_set_as_written_passes_its_checks(made, tmp_path, capsys):
    load_partition_set(made["set"]).validate()
    older = tmp_path / "older"  # a set written before the manifest recorded its arrays: the rules alone
    older.mkdir()
    for file in made["set"].iterdir():
        (older / file.name).symlink_to(file)
    (older / "manifest.json").unlink()
    manifest = json.loads((made["set"] / "manifest.json").read_text())
    del manifest["arrays"]
    (older / "manifest.json").write_text(json.dumps(manifest))
    load_partition_set(older).validate()
    assert main(["train", str(made["set"]), "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["machine_peak_bytes"] > 0


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_damage_is_one_line_exit_2_naming_the_file(case, made, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    fill = case.prepare(made, tmp_path)
    code = main(case.argv.format(**fill).split())
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert (code, out) == (2, ""), (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("commgraph: error: "), err
    assert case.names in lines[0] and case.expect in lines[0], lines[0]
