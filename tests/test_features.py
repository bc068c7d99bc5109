"""Host-resident features (PyTorch-Direct): placement, the store's CPU paths, loading without a
second copy, the Triton gather's indexing and circular-shift alignment under Triton's interpreter,
training with every --features value; the zero-copy paths themselves on a GPU when there is one."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch

from commgraph.cli.main import main
from commgraph.errors import FeatureError
from commgraph.graph import load_graph, nodefile
from commgraph.partition import partition_graph, partition_metrics, write_partition_set
from commgraph.plan.features import HEADROOM, place_features
from commgraph.runtime import features as store_module
from commgraph.runtime import gather_kernel, table_memory
from commgraph.runtime.features import FeatureStore, gathered, host_table
from forked import launch_forked

if TYPE_CHECKING:  # the probe's annotations; Triton itself is optional and imported where it runs
    import triton.language as tl

TESTS = Path(__file__).parent
GB = 10**9
needs_triton = pytest.mark.skipif(not gather_kernel.available(), reason="Triton is not installed")


# -- placement (plan) ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "gpu", "host"])
def test_a_cpu_device_keeps_the_table_in_host_memory_whatever_is_asked(mode):
    chosen = place_features(mode, "cpu", 5 * GB)
    assert chosen.placement == "cpu" and "5.000 GB" in chosen.reason
    assert (f"(--features {mode})" in chosen.reason) == (mode != "auto")


def test_auto_keeps_the_table_on_the_gpu_only_when_it_fits_with_headroom():
    free = 80 * GB
    fits = place_features("auto", "cuda", int(HEADROOM * free), free)
    assert fits.placement == "gpu" and "fits in 50% of the 80.000 GB free" in fits.reason
    too_big = place_features("auto", "cuda", int(HEADROOM * free) + 1, free)
    assert too_big.placement == "host" and "more than 50% of the 80.000 GB free" in too_big.reason
    assert place_features("host", "cuda", 1000, free).placement == "host"
    assert place_features("gpu", "cuda", 60 * GB, free).placement == "gpu"  # forced: no headroom asked


def test_bad_placement_requests():
    with pytest.raises(FeatureError, match="does not fit in the 8.000 GB free on the GPU; use --features host"):
        place_features("gpu", "cuda", 9 * GB, 8 * GB)
    with pytest.raises(FeatureError, match="unknown --features 'unified'"):
        place_features("unified", "cuda", 1, GB)


# -- the store on a CPU device ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "gpu", "host"])
def test_on_a_cpu_device_every_mode_is_index_select_on_the_table_itself(mode):
    features = np.random.default_rng(0).standard_normal((50, 7)).astype(np.float32)
    store = FeatureStore.create(features, torch.device("cpu"), mode)
    assert (store.placement, store.method, store.num_rows, store.width) == ("cpu", "index_select", 50, 7)
    assert store.table.data_ptr() == features.ctypes.data  # no copy of the table
    index = torch.tensor([49, 0, 3, 3, 17])
    assert torch.equal(store.gather(index), torch.from_numpy(features[[49, 0, 3, 3, 17]]))
    assert torch.equal(store.gather(index.int()), store.gather(index))
    line = store.describe()
    assert "\n" not in line and line.startswith("features: ") and "the device is the CPU" in line
    assert "gathers: index_select" in line


def test_a_table_of_another_dtype_is_converted_once_to_float32():
    features = np.arange(12, dtype=np.float64).reshape(4, 3) / 3
    store = FeatureStore.create(features, torch.device("cpu"))
    out = store.gather(torch.tensor([3, 1]))
    assert out.dtype == torch.float32
    np.testing.assert_array_equal(out.numpy(), features[[3, 1]].astype(np.float32))


@pytest.mark.parametrize(
    "index, message",
    [
        (torch.tensor([], dtype=torch.int64), "empty index"),
        (torch.tensor([0, 10]), "row id 10 is out of range for a feature table of 10 rows"),
        (torch.tensor([-1, 2]), "row id -1 is out of range"),
        (torch.tensor([[1, 2]]), "1-D int64 tensor of row ids, got torch.int64 of shape (1, 2)"),
        (torch.tensor([1.0]), "got torch.float32"),
        ([1, 2], "got list"),
    ],
)
def test_bad_gathers_are_refused_clearly(index, message):
    store = FeatureStore.create(np.zeros((10, 4), dtype=np.float32), torch.device("cpu"))
    with pytest.raises(FeatureError, match=message.replace("(", r"\(").replace(")", r"\)")):
        store.gather(index)


def test_gathered_allows_an_empty_index_and_checks_the_rest():
    store = FeatureStore.create(np.arange(12, dtype=np.float32).reshape(4, 3), torch.device("cpu"))
    assert gathered(store, torch.zeros(0, dtype=torch.int64)).shape == (0, 3)
    assert gathered(store, torch.tensor([3, 0]), torch.device("cpu")).tolist() == [[9, 10, 11], [0, 1, 2]]
    with pytest.raises(FeatureError, match="row id 4 is out of range"):
        gathered(store, torch.tensor([4]))


def test_a_table_must_be_two_dimensional():
    with pytest.raises(FeatureError, match=r"2-D \[rows, width\], got shape \(10,\)"):
        FeatureStore.create(np.zeros(10, dtype=np.float32), torch.device("cpu"))


# -- the host table: held once ------------------------------------------------------------------------


def test_a_writable_float32_table_is_used_in_place():
    features = np.ones((6, 5), dtype=np.float32)
    assert host_table(features).data_ptr() == features.ctypes.data


@pytest.mark.parametrize("dtype", ["<f4", "<f8", ">f4", "<i2"])
def test_a_npy_memory_map_is_read_from_its_file_into_fresh_page_aligned_memory(tmp_path, monkeypatch, dtype):
    monkeypatch.setattr(store_module, "CHUNK_BYTES", 1000)  # several chunks and a short last one
    values = (np.random.default_rng(1).standard_normal((301, 13)) * 100).astype(dtype)
    np.save(tmp_path / "x.npy", values)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    table = host_table(mapped)
    assert table.dtype == torch.float32 and table.data_ptr() % 4096 == 0 and table.is_contiguous()
    np.testing.assert_array_equal(table.numpy(), values.astype(np.float32))
    sliced = host_table(mapped[100:200:2])  # a view of a map is not the whole file: copied as an array
    np.testing.assert_array_equal(sliced.numpy(), values[100:200:2].astype(np.float32))


def test_a_truncated_file_is_refused(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((1000, 8), dtype=np.float32))
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    os.truncate(tmp_path / "x.npy", 20000)
    with pytest.raises(FeatureError, match="ended before its array did: the file is truncated"):
        host_table(mapped)


@pytest.mark.multiproc
@pytest.mark.timeout(120)
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="reads peak RSS from /proc")
def test_loading_a_table_file_holds_it_once(tmp_path):
    """The store's path adds at most 1.1x the table to the peak resident set (float32 file read
    in place; float64 file converted through a bounce buffer); copying the memory map, as a plain
    ``np.array`` does, holds it twice."""
    rows = np.random.default_rng(2).standard_normal((1 << 13, 1 << 10))  # 32 MB as float32
    np.save(tmp_path / "f32.npy", np.repeat(rows.astype(np.float32), 4, axis=0))  # 128 MB
    np.save(tmp_path / "f64.npy", np.repeat(rows, 4, axis=0))
    for name in ("f32", "f64"):
        measured = table_memory.measure(tmp_path / f"{name}.npy", "host_table", timeout=120)
        assert measured.ratio <= 1.1, (name, measured)
    naive = table_memory.measure(tmp_path / "f32.npy", "naive", timeout=120)
    assert naive.ratio >= 1.8, naive


@pytest.mark.multiproc
def test_measuring_a_table_refuses_an_unknown_way_and_reports_a_failed_load(tmp_path):
    with pytest.raises(FeatureError, match="no way 'mmap' to load a table; choose one of host_table, pin, naive"):
        table_memory.measure(tmp_path / "f.npy", "mmap")
    with pytest.raises(FeatureError, match=r"measuring host_table of .*missing\.npy failed: .*No such file"):
        table_memory.measure(tmp_path / "missing.npy", "host_table", timeout=60)


# -- the Triton kernel under the interpreter ---------------------------------------------------------

_interpreted = None  # the kernel module as Triton's interpreter runs it (set by the fixture)


def _probe(
    index,
    out,
    count,
    width,
    lead,
    SHIFT: tl.constexpr,
    LINE: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLUMNS: tl.constexpr,
):
    """out[r, p]: the column that position p of row r's tile reads (the kernel's own mapping)."""
    import triton.language as tl

    rows = tl.arange(0, BLOCK_ROWS)
    positions = tl.arange(0, BLOCK_COLUMNS)
    wanted = rows < count
    src = tl.load(index + rows, mask=wanted, other=0)
    columns = _interpreted.source_columns(src, positions, width, lead, SHIFT, LINE)
    mask = wanted[:, None] & (positions < width)[None, :]
    tl.store(out + rows[:, None] * width + positions[None, :], columns, mask=mask)


@pytest.fixture(scope="module")
def interpreted():
    """The kernel module loaded afresh with TRITON_INTERPRET=1: its kernels run on the CPU."""
    global _interpreted
    import triton

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_INTERPRET", "1")
        spec = importlib.util.spec_from_file_location("gather_kernel_interpreted", gather_kernel.__file__)
        _interpreted = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_interpreted)
        probe = triton.jit(_probe)
    yield _interpreted, probe
    _interpreted = None


def _offset_table(rows: int, width: int, lead: int) -> torch.Tensor:
    """A table whose first element sits ``lead`` elements into a 128-byte line."""
    flat = torch.empty(rows * width + gather_kernel.LINE)
    start = (lead - gather_kernel.lead_elements(flat)) % gather_kernel.LINE
    table = flat[start : start + rows * width].view(rows, width)
    table.copy_(torch.arange(rows * width, dtype=torch.float32).view(rows, width))
    assert gather_kernel.lead_elements(table) == lead
    return table


WIDTHS = [1, 7, 31, 32, 33, 64, 100, 512, 513, 514, 517, 519, 1030]  # 4 B to 4,120 B; 2,048-2,076 B


@needs_triton
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("lead", [0, 5])
def test_the_interpreted_gather_equals_index_select(interpreted, width, lead):
    kernels, _ = interpreted
    rows = 41
    table = _offset_table(rows, width, lead)
    rng = np.random.default_rng(width)
    index = torch.from_numpy(np.concatenate([[rows - 1, 0, rows - 1], rng.integers(0, rows, 300)]))
    for align in (True, False):
        out = torch.full((index.shape[0], width), -1.0)
        kernels.gather_rows(table, index, out, align=align)
        assert torch.equal(out, table.index_select(0, index)), (width, lead, align)
    one = torch.empty((1, width))
    assert torch.equal(kernels.gather_rows(table, torch.tensor([rows - 1]), one), table[-1:])


def _lines_per_group(src: np.ndarray, columns: np.ndarray, width: int, lead: int) -> np.ndarray:
    """[rows, groups]: 128-byte lines each group of 32 consecutive positions (a warp) reads."""
    addresses = lead + src[:, None] * width + columns
    groups = -(-width // gather_kernel.LINE)
    lines = np.zeros((src.shape[0], groups), dtype=np.int64)
    for g in range(groups):
        part = addresses[:, g * gather_kernel.LINE : (g + 1) * gather_kernel.LINE] // gather_kernel.LINE
        lines[:, g] = [np.unique(row).size for row in part]
    return lines


@needs_triton
@pytest.mark.parametrize("width", [33, 100, 513, 514, 517, 519])
@pytest.mark.parametrize("lead", [0, 5])
def test_the_circular_shift_keeps_each_warp_on_one_line(interpreted, width, lead):
    """Section 4.5: with the shift every warp after the first reads exactly one aligned line, the
    first reads its line plus the row's wrapped tail, and each row is read whole, once; without it
    a warp of a row that starts mid-line straddles two lines."""
    kernels, probe = interpreted
    assert gather_kernel.needs_shift(width)
    src = np.arange(64, dtype=np.int64)
    block_columns = 1 << (width - 1).bit_length()
    shifted = {}
    for shift in (True, False):
        out = torch.full((src.size, width), -1, dtype=torch.int64)
        probe[(1,)](
            torch.from_numpy(src),
            out,
            src.size,
            width,
            lead,
            SHIFT=shift,
            LINE=gather_kernel.LINE,
            BLOCK_ROWS=src.size,
            BLOCK_COLUMNS=block_columns,
        )
        columns = out.numpy()
        assert (np.sort(columns, axis=1) == np.arange(width)).all()  # a permutation of the row
        shifted[shift] = _lines_per_group(src, columns, width, lead)
    misaligned = (lead + src * width) % gather_kernel.LINE != 0
    assert (shifted[True][:, 1:] == 1).all()
    assert (shifted[True][:, 0] <= 3).all()
    full_groups = width // gather_kernel.LINE  # groups of 32 positions inside the row
    assert (shifted[False][misaligned, :full_groups] == 2).all()
    assert (shifted[True].sum(axis=1) <= shifted[False].sum(axis=1)).all()
    if width > 2 * gather_kernel.LINE:  # rows of three lines or more: fewer requests for every misaligned row
        assert (shifted[True][misaligned].sum(axis=1) < shifted[False][misaligned].sum(axis=1)).all()


def test_the_shift_is_used_only_for_rows_that_are_not_whole_lines():
    assert [gather_kernel.needs_shift(w) for w in (16, 32, 33, 64, 512, 513, 519, 1024)] == [
        False,
        False,
        True,
        False,
        False,
        True,
        True,
        False,
    ]


# -- training ---------------------------------------------------------------------------------------


def _partition_set(root: Path, parts: int) -> Path:
    graph = load_graph("sbm:nodes=600,classes=3,features=40,seed=5")
    assignment, _ = partition_graph(graph, parts, "g3" if parts > 1 else "chunk", 0)
    out = root / f"sbm-{parts}"
    write_partition_set(
        graph,
        assignment,
        parts,
        out,
        method="g3",
        seed=0,
        seconds=0.0,
        metrics=partition_metrics(graph, assignment, parts),
    )
    return out


@pytest.fixture(scope="module")
def partition_dir(tmp_path_factory):
    return _partition_set(tmp_path_factory.mktemp("features"), 2)


def _train(
    partition_dir: Path,
    out: Path,
    monkeypatch,
    device: str,
    modes: tuple[str, ...],
    workers: int = 2,
    exchanges: tuple[str, ...] = ("pipelined", "barrier", "replicate"),
    spec_options: dict | None = None,
    **options,
) -> dict:
    """Runs ``{exchange}-{mode}`` for every exchange and --features mode (``options`` override the run's
    defaults) in one local job of ``workers``; ``spec_options`` go to the driver's spec."""
    out.mkdir(parents=True, exist_ok=True)
    runs = {
        f"{exchange}-{mode}": {
            "model": "sage",
            "epochs": 5,
            "hidden": 8,
            "dropout": 0.0,
            "seed": 3,
            "exchange": exchange,
            "features": mode,
            **options,
        }
        for exchange in exchanges
        for mode in modes
    }
    spec = out / "spec.json"
    spec.write_text(
        json.dumps(
            {"partdir": str(partition_dir), "out": str(out), "runs": runs, "device": device, **(spec_options or {})}
        )
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    assert launch_forked([str(spec)], workers, grace=30, module="dist_driver") == 0
    return {name: dict(np.load(out / f"{name}.npz")) for name in runs}


@pytest.mark.multiproc
@pytest.mark.timeout(180)
def test_training_gives_the_same_losses_whichever_features_value(partition_dir, tmp_path, monkeypatch):
    results = _train(partition_dir, tmp_path, monkeypatch, "cpu", ("gpu", "host", "auto"))
    for exchange in ("pipelined", "barrier", "replicate"):
        reference = results[f"{exchange}-auto"]
        for mode in ("gpu", "host"):
            for key, value in results[f"{exchange}-{mode}"].items():
                np.testing.assert_array_equal(value, reference[key], err_msg=f"{exchange} {mode} {key}")
    np.testing.assert_allclose(results["barrier-auto"]["loss"], results["pipelined-auto"]["loss"], atol=1e-5)


@pytest.mark.multiproc
@pytest.mark.timeout(180)
def test_layer_zero_streamed_from_host_features_trains_like_the_whole_table(partition_dir, tmp_path, monkeypatch):
    """``--features host`` as on a GPU (layer 0 streamed in chunks of about 40 rows, recomputed in
    backward) against the table gathered whole, 2 workers, every exchange, GCN with dropout."""
    results = _train(
        partition_dir,
        tmp_path,
        monkeypatch,
        "cpu",
        ("gpu", "host"),
        model="gcn",
        dropout=0.5,
        spec_options={"stream_chunk_bytes": 4 * 40 * 40},
    )
    for exchange in ("pipelined", "barrier", "replicate"):
        for key, value in results[f"{exchange}-gpu"].items():
            np.testing.assert_allclose(
                results[f"{exchange}-host"][key], value, rtol=1e-4, atol=1e-6, err_msg=f"{exchange} {key}"
            )


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_the_cli_says_where_the_features_went(partition_dir, capfd):
    assert main(["train", str(partition_dir), "--epochs", "1", "--features", "host", "--device", "cpu"]) == 0
    err = capfd.readouterr().err
    assert "features: " in err and "the device is the CPU (--features host)" in err
    with pytest.raises(SystemExit) as stopped:
        main(["train", str(partition_dir), "--features", "unified"])
    assert stopped.value.code == 2
    assert "invalid choice: 'unified'" in capfd.readouterr().err


# -- on a GPU ------------------------------------------------------------------------------------------


@pytest.mark.gpu(reason="zero-copy reads need a CUDA GPU")
@needs_triton
@pytest.mark.parametrize("width", WIDTHS)
def test_zero_copy_gathers_equal_the_gpu_table(width):
    features = np.random.default_rng(width).standard_normal((5000, width)).astype(np.float32)
    device = torch.device("cuda")
    host = FeatureStore.create(features, device, "host")
    staged = FeatureStore.create(features, device, "host", zero_copy=False)
    resident = FeatureStore.create(features, device, "gpu")
    assert (host.placement, host.method, staged.method, resident.placement) == ("host", "zero-copy", "staged", "gpu")
    index = torch.randint(0, 5000, (3000,), device=device)
    index[0] = 4999
    expected = resident.gather(index)
    assert torch.equal(host.gather(index), expected) and torch.equal(host.gather(index.cpu()), expected)
    assert torch.equal(staged.gather(index), expected) and torch.equal(staged.gather(index[:7]), expected[:7])
    with pytest.raises(FeatureError, match="row id 5000 is out of range"):
        host.gather(torch.tensor([5000], device=device))


@pytest.mark.multiproc
@pytest.mark.gpu(reason="zero-copy reads need a CUDA GPU")
@needs_triton
@pytest.mark.timeout(300)
def test_pinning_a_table_file_holds_it_once(tmp_path):
    rows = np.random.default_rng(3).standard_normal((1 << 14, 1 << 10)).astype(np.float32)  # 64 MB
    np.save(tmp_path / "f.npy", np.repeat(rows, 16, axis=0))  # 1 GB
    measured = table_memory.measure(tmp_path / "f.npy", "pin", timeout=300)
    assert measured.ratio <= 1.1, measured


@pytest.mark.multiproc
@pytest.mark.gpu(reason="zero-copy reads need a CUDA GPU")
@needs_triton
@pytest.mark.timeout(300)
def test_training_on_the_gpu_gives_the_same_losses_with_host_features(tmp_path, monkeypatch):
    """With ``host`` layer 0 runs on renumbered chunks (GEMMs of other shapes): equal to rounding."""
    results = _train(_partition_set(tmp_path, 1), tmp_path / "runs", monkeypatch, "cuda", ("gpu", "host"), workers=1)
    for exchange in ("pipelined", "barrier", "replicate"):
        np.testing.assert_allclose(
            results[f"{exchange}-host"]["loss"],
            results[f"{exchange}-gpu"]["loss"],
            rtol=1e-5,
            atol=1e-7,
            err_msg=exchange,
        )


@pytest.mark.multiproc
@pytest.mark.gpu(reason="zero-copy reads need a CUDA GPU")
@needs_triton
@pytest.mark.timeout(600)
def test_full_graph_training_with_host_features_never_holds_the_table_on_the_gpu(tmp_path, monkeypatch):
    """An 800 MB table (50,000 x 4,096), layer 0 streamed in 16 MB chunks: the GPU's peak allocation
    during training stays under a quarter of the table with ``host``, and exceeds the table with
    ``gpu``; the losses agree."""
    graph = load_graph("sbm:nodes=50000,classes=4,features=4096,seed=2")
    assignment = np.zeros(graph.num_nodes, dtype=np.int64)
    partdir = tmp_path / "big"
    write_partition_set(
        graph,
        assignment,
        1,
        partdir,
        method="chunk",
        seed=0,
        seconds=0.0,
        metrics=partition_metrics(graph, assignment, 1),
    )
    table = graph.features.shape[0] * graph.features.shape[1] * 4
    del graph
    results = _train(
        partdir,
        tmp_path / "runs",
        monkeypatch,
        "cuda",
        ("gpu", "host"),
        workers=1,
        exchanges=("pipelined", "barrier"),
        epochs=2,
        spec_options={"stream_chunk_bytes": 1 << 24},
    )
    for exchange in ("pipelined", "barrier"):
        host, gpu = results[f"{exchange}-host"], results[f"{exchange}-gpu"]
        assert host["peak_device_bytes"] < table / 4 < table < gpu["peak_device_bytes"], exchange
        np.testing.assert_allclose(host["loss"], gpu["loss"], rtol=1e-5, err_msg=exchange)


@pytest.mark.multiproc
@pytest.mark.gpu(reason="zero-copy reads need a CUDA GPU")
@needs_triton
@pytest.mark.timeout(300)
def test_mini_batches_on_the_gpu_give_the_same_losses_with_host_features(tmp_path, monkeypatch):
    results = _train(
        _partition_set(tmp_path, 1),
        tmp_path / "runs",
        monkeypatch,
        "cuda",
        ("gpu", "host"),
        workers=1,
        exchanges=("pipelined",),
        sampler="neighbor",
        fanouts=(5, 5),
        batch_size=64,
    )
    np.testing.assert_allclose(
        results["pipelined-host"]["loss"], results["pipelined-gpu"]["loss"], rtol=1e-6, atol=1e-7
    )


@pytest.mark.multiproc
@needs_triton
@pytest.mark.timeout(120)
def test_the_kernel_compiles_for_a_gpu_without_one():
    """Both variants go through Triton's whole CUDA pipeline (to a cubin for sm_80), which the
    interpreter does not: a kernel that only interprets fails here."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    signature = {
        "table": "*fp32",
        "index": "*i64",
        "out": "*fp32",
        "count": "i32",
        "width": "i32",
        "lead": "i32",
        "SHIFT": "constexpr",
        "LINE": "constexpr",
        "BLOCK_ROWS": "constexpr",
        "BLOCK_COLUMNS": "constexpr",
    }
    for shift in (True, False):
        values = {"SHIFT": shift, "LINE": gather_kernel.LINE, "BLOCK_ROWS": 4, "BLOCK_COLUMNS": 1024}
        constants = {(i,): values[name] for i, name in enumerate(signature) if name in values}
        kernel = compile(ASTSource(gather_kernel._gather_rows, signature, constants), target=GPUTarget("cuda", 80, 32))
        assert "ld.global" in kernel.asm["ptx"] and kernel.asm["cubin"]


# -- the benchmark's parts that need no GPU ----------------------------------------------------------

BENCHMARK = TESTS.parent / "benchmarks" / "feature_gather.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("feature_gather", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # where its dataclasses look themselves up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_the_benchmark_sizes_its_graphs_by_the_gpu(bench):
    gpu = 85_520_809_984  # an 80 GB H100 as torch reports it
    nodes = bench.table_nodes(gpu, 0.55, 1024)
    assert (nodes - 1) * 4096 < 0.55 * gpu <= nodes * 4096 and nodes == 11_483_508
    graph = load_graph(bench.rmat_spec(1000, 16, 10))
    assert (graph.num_nodes, graph.num_features, graph.num_edges) == (1000, 16, 10_000)  # mean degree 10
    assert graph.labels.max() == 7


def test_the_benchmark_estimates_the_big_stage_from_two_smaller_graphs(bench):
    costs = bench.Costs(prepare={10**9: 13.0, 3 * 10**9: 35.0}, host_train={10**9: 20.0})
    assert costs.estimate(47 * 10**9) is None  # one training size: no line to draw
    costs.host_train[3 * 10**9] = 30.0
    assert costs.estimate(47 * 10**9) == "prepare ~519 s + train ~250 s = ~769 s (does not fit in a 10-minute command)"
    assert costs.estimate(3 * 10**9) is None  # measured, not estimated


def test_the_benchmark_writes_its_table_a_chunk_at_a_time(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(nodefile, "CHUNK_BYTES", 4 * 16 * 5)  # 37 rows, 5 a chunk
    bench.write_table(tmp_path / "t.npy", 4 * 16 * 37, 16)
    table = np.load(tmp_path / "t.npy")
    assert table.dtype == np.float32 and table.shape == (37, 16)
    np.testing.assert_array_equal(table, np.repeat(np.arange(37, dtype=np.float32)[:, None], 16, axis=1))


def test_the_benchmark_writes_only_where_a_disk_has_room(bench, tmp_path):
    with pytest.raises(bench.StageFailed, match="GB free, this stage writes .* GB; free some or pass --scratch"):
        bench.check_scratch(tmp_path / "scratch", 1 << 60)
    if bench.filesystem(Path("/dev/shm")) == "tmpfs":
        with pytest.raises(bench.StageFailed, match="is on tmpfs .*pass --scratch on a disk"):
            bench.check_scratch(Path("/dev/shm"), 1)


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_the_benchmark_without_a_gpu_says_so_in_one_line():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": os.pathsep.join(sys.path), "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), "--quick"], capture_output=True, text=True, env=env, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        "feature_gather: needs a CUDA GPU and torch sees none; nothing measured\n",
    )


def test_the_benchmark_names_its_stages_and_defaults(bench, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as refused:
        bench.parse(["--run", "pin,bogus"])
    stages = "prepare, big, train, sweep, crossover, pin"
    assert refused.value.code == 2 and f"--run takes stages of {stages}; got 'pin,bogus'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as helped:
        bench.parse(["--help"])
    out = capsys.readouterr().out
    assert helped.value.code == 0 and "--run prepare" in out and "(default: 0.55)" in out
