"""benchmarks/protocol.py's statistics: the pair ratios, their median with min and max, and the
flag on pairs run above the load limit (pure: no process is started)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from protocol import (  # noqa: E402
    FOREIGN_LIMIT,
    LOAD_LIMIT,
    Pair,
    Run,
    Spread,
    busy_cpu_seconds,
    foreign_cores,
    json_rate,
    pair_line,
    summarise,
    threads_env,
)
from steps import timed_steps  # noqa: E402


def run(
    side: str,
    rate: float | None,
    peak: int,
    load: tuple[float, float] = (0.5, 0.5),
    status: str = "ok",
    foreign: float = 0.0,
) -> Run:
    return Run(side, status, rate, peak, peak, 1.0, *load, foreign)


def test_pair_ratios_are_b_over_a():
    pair = Pair(1, run("dgl", 1000.0, 4_000), run("commgraph", 800.0, 3_000))
    assert pair.ratio == 0.8
    assert pair.memory_ratio == 0.75
    assert not pair.loaded


def test_median_min_max_over_pairs():
    pairs = [
        Pair(1, run("a", 100.0, 10), run("b", 120.0, 9)),
        Pair(2, run("a", 100.0, 10), run("b", 90.0, 10)),
        Pair(3, run("a", 200.0, 10), run("b", 220.0, 8)),
        Pair(4, run("a", 100.0, 10), run("b", 100.0, 12)),
    ]
    summary = summarise(pairs)
    # ratios 1.2, 0.9, 1.1, 1.0: median of an even count is the mean of the middle two
    assert summary.speed.median == pytest.approx(1.05)
    assert (summary.speed.minimum, summary.speed.maximum, summary.speed.count) == (0.9, 1.2, 4)
    assert summary.memory.median == pytest.approx(0.95)
    assert (summary.memory.minimum, summary.memory.maximum) == (0.8, 1.2)
    assert summary.loaded_pairs == [] and summary.failed_pairs == []


@pytest.mark.parametrize(
    ("a_load", "b_load", "b_foreign", "loaded"),
    [
        ((0.2, 0.9), (1.0, 1.0), 0.25, False),  # at the limits is not above them
        ((1.01, 0.5), (0.5, 0.5), 0.0, True),  # A started above the load limit
        ((0.5, 0.5), (0.5, 1.7), 0.0, False),  # B's own threads held the load up after it
        ((0.5, 0.5), (0.5, 0.5), 0.3, True),  # other work ran beside B
    ],
)
def test_a_pair_is_loaded_when_a_run_starts_loaded_or_runs_beside_other_work(a_load, b_load, b_foreign, loaded):
    pair = Pair(1, run("a", 100.0, 10, a_load), run("b", 100.0, 10, b_load, foreign=b_foreign))
    assert (LOAD_LIMIT, FOREIGN_LIMIT) == (1.0, 0.25)
    assert pair.loaded is loaded
    assert ("LOADED" in pair_line(pair)) is loaded


def test_other_work_is_the_machines_busy_cpu_less_the_runs_own():
    assert foreign_cores(busy=30.0, own=20.0, seconds=20.0) == 0.5
    assert foreign_cores(busy=19.0, own=20.0, seconds=20.0) == 0.0  # clock ticks against rusage
    assert foreign_cores(busy=5.0, own=0.0, seconds=0.0) == 0.0
    first = busy_cpu_seconds()
    sum(i * i for i in range(200_000))  # some work of this process's own
    assert busy_cpu_seconds() >= first


def test_loaded_pairs_are_named_and_left_out_of_the_quiet_figures():
    pairs = [
        Pair(1, run("a", 100.0, 10), run("b", 150.0, 10)),
        Pair(2, run("a", 100.0, 10, (2.5, 3.0)), run("b", 50.0, 10)),
        Pair(3, run("a", 100.0, 10), run("b", 130.0, 10)),
    ]
    summary = summarise(pairs)
    assert summary.loaded_pairs == [2]
    assert (summary.speed.median, summary.speed.minimum, summary.speed.count) == (1.3, 0.5, 3)
    assert (summary.quiet_speed.median, summary.quiet_speed.minimum, summary.quiet_speed.count) == (1.4, 1.3, 2)


def test_a_failed_run_gives_its_pair_no_ratio():
    pairs = [
        Pair(1, run("a", 100.0, 10), run("b", None, 0, status="failed")),
        Pair(2, run("a", 100.0, 10), run("b", 110.0, 10)),
    ]
    assert pairs[0].ratio is None and pairs[0].memory_ratio is None
    summary = summarise(pairs)
    assert summary.failed_pairs == [1]
    assert (summary.speed.median, summary.speed.count) == (1.1, 1)


def test_no_values_give_no_median():
    empty = Spread.of([])
    assert empty.median is None and empty.text() == "none"
    assert summarise([]).speed.count == 0


def test_json_rate_reads_the_last_json_line(tmp_path):
    out = tmp_path / "run.out"
    out.write_text('loading\n{"rate": 1.0}\nstep 3\n{"rate": 2.5, "steps": 40}\n')
    assert json_rate()(out) == 2.5
    assert json_rate("steps")(out) == 40
    assert json_rate()(tmp_path / "missing.out") is None


def test_threads_env_sets_both_pools():
    env = threads_env(2, {"PATH": "/bin"})
    assert env == {"PATH": "/bin", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "NUMBA_NUM_THREADS": "2"}


def test_timed_steps_clocks_after_the_warmup_and_starts_new_epochs():
    epochs = []

    def epoch():
        epochs.append(len(epochs))
        return iter([1, 2, 3])  # three batches of 1, 2 and 3 units

    seen = []
    result = timed_steps(epoch, lambda batch: seen.append(batch) or batch, warmup=2, steps=4)
    assert seen == [1, 2, 3, 1, 2, 3]  # 2 warm-up steps, then 4 clocked, over two epochs
    assert len(epochs) == 2
    assert (result["warmup"], result["steps"], result["units"]) == (2, 4, 3 + 1 + 2 + 3)
    assert result["rate"] == pytest.approx(result["units"] / result["seconds"])
    assert result["step_ms"] == pytest.approx(result["seconds"] / 4 * 1e3)


def test_the_profile_puts_both_sides_steps_phase_by_phase():
    from dgl_baseline import BaselineRow, profile
    from pss import Measurement

    ok = Measurement(0, 1.0, 1, 1, [], 0, "ok", 2)
    dgl = BaselineRow("dgl-train", ["x"], runs=[ok], step_ms=[500.0])
    dgl.reports.append(
        {
            "phase_ms": {
                "sample": 100.0,
                "fetch": 0.0,
                "gather": 0.0,
                "forward": 150.0,
                "backward": 200.0,
                "optimizer": 50.0,
            }
        }
    )
    ours = BaselineRow("commgraph-1", ["y"], runs=[ok], step_ms=[400.0])
    phases = {"sample": 0.4, "fetch": 0.2, "gather": 0.6, "forward": 1.0, "backward": 1.6, "optimizer": 0.2}
    ours.reports.append({"steps": 4, **{f"{name}_seconds": value for name, value in phases.items()}})
    lines = profile([dgl, ours])
    assert lines[2:] == [
        "| sampling (DGL's loader gathers the features as it samples) | 100.0 | 100.0 |",
        "| input rows asked for and received | 0.0 | 50.0 |",
        "| input rows read from the feature table | 0.0 | 150.0 |",
        "| forward and loss | 150.0 | 250.0 |",
        "| backward | 200.0 | 400.0 |",
        "| optimiser step | 50.0 | 50.0 |",
        "| the whole step | 500.0 | 400.0 |",
    ]
    assert profile([dgl]) == []


def test_the_full_graph_pairs_run_pyg_and_one_worker_alike(tmp_path):
    from argparse import Namespace

    from train_speed import WARMUP_EPOCHS, paired_sides

    opts = Namespace(
        work_dir=tmp_path,
        graph="sbm:nodes=3000,classes=4,features=16,seed=0",
        threads=2,
        hidden=128,
        epochs=4,
        device="cpu",
        python="python",
        pyg_keep_freed_memory=False,
    )
    sides = paired_sides(tmp_path / "g.npz", tmp_path / "g-1", opts)
    pyg, ours = sides.pyg, sides.commgraph
    script = Path(pyg.command[1]).read_text()
    assert pyg.command[0] == "python" and "torch.set_num_threads(2)" in script
    assert "to_torch_csr_tensor" in script and "range(4)" in script and "if False:" in script  # glibc's allocator
    args = ours.command[ours.command.index("train") :]
    assert args[:4] == ["train", str(tmp_path / "g-1"), "--workers", "1"]
    for option, value in {
        "--hidden": "128",
        "--threads": "2",
        "--device": "cpu",
        "--epochs": "5",
        "--eval-every": "5",
    }.items():
        assert args[args.index(option) + 1] == value  # one epoch more than measured, evaluated after it only
    assert pyg.env["OMP_NUM_THREADS"] == ours.env["OMP_NUM_THREADS"] == "2"
    assert (sides.setup.warmup, sides.setup.steps, sides.setup.unit) == (WARMUP_EPOCHS, 2, "steps")

    out = tmp_path / "pyg.out"
    out.write_text('{"epoch_seconds": [9.0, 9.0, 0.5, 0.5]}\n')
    assert pyg.rate(out) == 2.0  # two measured steps in one second, the warm-up left out
    metrics = tmp_path / "runs-full-graph" / "commgraph-1.jsonl"
    lines = [f'{{"epoch": {k}, "epoch_seconds": {s}}}\n' for k, s in enumerate([9.0, 9.0, 0.25, 0.25, 7.0], 1)]
    metrics.write_text("".join(lines[:3]))
    assert not ours.until()
    metrics.write_text("".join(lines))
    assert ours.until()
    assert ours.rate(out) == 4.0  # the epochs after the warm-up up to --epochs; the evaluated one left out
    ours.before()
    assert not metrics.exists()


def baseline_options(tmp_path, workers: int):
    from argparse import Namespace

    return Namespace(
        workers=workers,
        threads=2,
        steps=20,
        fanout="15,10,5",
        hidden=256,
        batch_size=1024,
        work_dir=tmp_path,
        python="python",
    )


def test_two_workers_are_two_ddp_trainers_against_two_commgraph_workers(tmp_path):
    from dgl_baseline import commgraph_side, dgl_side

    opts = baseline_options(tmp_path, workers=2)
    dgl = dgl_side(tmp_path / "g.npz", opts)
    ours = commgraph_side(tmp_path / "g-g3-2", opts)
    assert dgl.name == "dgl-train-2" and ours.name == "commgraph-2"
    assert dgl.command[2:7] == [str(tmp_path / "g.npz"), "train", "--trainers", "2", "--warmup"]
    assert dgl.command[dgl.command.index("--batch-size") + 1] == "1024"  # per trainer, as DGL's example
    assert ours.command[3:10] == ["train", str(tmp_path / "g-g3-2"), "--workers", "2", "--threads", "1", "--sampler"]
    assert ours.command[ours.command.index("--fanout") + 1] == "5,10,15"
    assert dgl.env["OMP_NUM_THREADS"] == ours.env["OMP_NUM_THREADS"] == "2"  # each side's threads in all
    one = baseline_options(tmp_path, workers=1)
    assert (dgl_side(tmp_path / "g.npz", one).name, commgraph_side(tmp_path / "g-1", one).name) == (
        "dgl-train",
        "commgraph-1",
    )
    assert commgraph_side(tmp_path / "g-1", one).command[5:8] == ["--workers", "1", "--threads"]


def test_epoch_seeds_count_every_workers_batches_as_commgraph_splits_them(tmp_path):
    from dgl_baseline import epoch_rate, epoch_seeds, graph_files

    for part, count in (("part-0", 1054), ("part-1", 946)):
        (tmp_path / part).mkdir()
        np.save(tmp_path / part / "train_mask.npy", np.arange(3000) < count)
    # the busier part's 1054 seeds in 5 batches of at most 256 (211 or 210), the other's 946 in 5 (190 or 189)
    assert epoch_seeds(tmp_path, 256, 1) == 211 + 190
    assert epoch_seeds(tmp_path, 256, 3) == 3 * 211 + 190 + 2 * 189
    assert epoch_seeds(tmp_path, 256, 9) == 1054 + 946  # an epoch has 5 steps
    assert epoch_rate({"steps": 1, "epoch_seconds": 0.5}, tmp_path, 256) == pytest.approx(802.0)
    assert graph_files("sbm:nodes=10", tmp_path)[1].name == "sbm-nodes-10-1"
    assert graph_files("sbm:nodes=10", tmp_path, 2, "g3")[1].name == "sbm-nodes-10-g3-2"


def test_the_node_task_runs_dgls_training_recipe_against_a_neighbor_loader_script(tmp_path, monkeypatch):
    from argparse import Namespace

    import dgl_compare

    npz, partdir = tmp_path / "g.npz", tmp_path / "g-1"
    monkeypatch.setattr(dgl_compare, "prepare", lambda graph, work, python: (npz, partdir))
    opts = Namespace(
        task="node",
        graph="sbm:nodes=10",
        work_dir=tmp_path,
        threads=2,
        warmup=2,
        steps=5,
        fanout="15,10,5",
        hidden=256,
        batch_size=1024,
        whole_batch=False,
    )
    dgl, ours, setup = dgl_compare.sides(opts)
    assert (dgl.name, ours.name) == ("dgl-node", "commgraph-node")
    assert "trimmed (cg.sampled)" in setup.model
    opts.whole_batch = True
    assert dgl_compare.sides(opts)[1].command[-1] == "--whole-batch"
    opts.whole_batch = False
    assert [Path(dgl.command[1]).name, *dgl.command[2:4]] == ["dgl_train.py", str(npz), "train"]
    assert [Path(ours.command[1]).name, ours.command[2]] == ["cg_node.py", str(partdir)]
    for side in (dgl, ours):
        args = side.command[side.command.index("--warmup") :]
        assert args == ["--warmup", "2", "--steps", "5", "--fanout", "15,10,5"] + [
            "--hidden",
            "256",
            "--batch-size",
            "1024",
        ]
        assert side.env["OMP_NUM_THREADS"] == "2"
    assert setup.fanouts == {"dgl-node": "15,10,5", "commgraph-node": "5,10,15"}  # cg_node.py reverses it
    assert setup.unit == "seeds" and "weight decay 5e-4" in setup.optimiser
    assert dgl_compare.TARGETS["node"] == (1.2, 0.8)
    out = tmp_path / "node.out"
    out.write_text('note\n{"rate": 2.0, "seeds_per_second": 2.0}\n')
    assert dgl.rate(out) == ours.rate(out) == 2.0
