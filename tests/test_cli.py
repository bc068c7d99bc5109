import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from commgraph import __version__
from commgraph.cli.main import main
from commgraph.partition import g3


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_info_cora_json(capsys):
    code, out, err = run(capsys, "graph", "info", "cora", "--json")
    stats = json.loads(out)
    assert code == 0 and err == ""
    assert (stats["num_nodes"], stats["num_features"], stats["num_classes"]) == (2708, 1433, 7)
    assert stats["num_edges"] == 10556


def test_info_table_and_synthetic_spec(capsys):
    code, out, _ = run(capsys, "graph", "info", "sbm:nodes=200,classes=2,features=4,seed=0")
    assert code == 0
    assert "nodes" in out and "200" in out and "train / val / test nodes" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["graph", "info", "nope"], "is not a bundled graph"),
        (["graph", "info", "rmat:nodes=5"], "missing edges"),
    ],
)
def test_errors_are_one_line_and_nonzero(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_bad_file_error_names_file_and_line(capsys, tmp_path):
    path = tmp_path / "g.txt.gz"
    path.write_bytes(gzip.compress(b"0 1\n1 two\n"))
    code, _, err = run(capsys, "graph", "info", str(path))
    assert code == 2 and f"{path}, line 2: expected an integer, found 'two'" in err


def test_debug_shows_traceback(capsys):
    code, _, err = run(capsys, "--debug", "graph", "info", "nope")
    assert code == 2 and "Traceback" in err


def test_convert_writes_npz_and_refuses_to_overwrite(capsys, tmp_path):
    out = tmp_path / "c.npz"
    assert run(capsys, "graph", "convert", "cora", "--out", str(out))[0] == 0
    code, _, err = run(capsys, "graph", "convert", "cora", "--out", str(out))
    assert code == 2 and "pass --force" in err
    code, out_text, _ = run(capsys, "graph", "info", str(out), "--json")
    assert json.loads(out_text)["num_nodes"] == 2708


@pytest.mark.multiproc
def test_console_script_version_and_help():
    script = Path(sys.executable).parent / "commgraph"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "commgraph"]
    result = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == f"commgraph {__version__}"
    result = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and all(group in result.stdout for group in ("graph", "partition", "sim"))


FIXTURES = Path(__file__).parent / "fixtures"


def test_topo_list_and_show_json(capsys, tmp_path):
    code, out, _ = run(capsys, "topo", "list")
    assert code == 0 and "dgx1-v100" in out.split() and "p2.16xlarge" in out.split()
    code, out, _ = run(capsys, "topo", "show", "--topology", "dgx1-v100", "--json", "--png", str(tmp_path / "t.png"))
    data = json.loads(out)
    assert set(data) == {"name", "devices", "links"}
    assert set(data["devices"][0]) == {"id", "kind", "host"}
    assert set(data["links"][0]) == {"a", "b", "kind", "count", "bandwidth_gbps", "latency_us"}
    assert sum(l["count"] for l in data["links"] if l["kind"] == "nvlink") == 24
    assert (tmp_path / "t.png").stat().st_size > 1000


def test_topo_detect_from_file_and_validate(capsys, tmp_path):
    out_file = tmp_path / "dgx1.yaml"
    code, _, _ = run(
        capsys, "topo", "detect", "--from-file", str(FIXTURES / "nvidia-smi-topo-dgx1.txt"), "--out", str(out_file)
    )
    assert code == 0
    code, out, _ = run(capsys, "topo", "validate", str(out_file))
    assert code == 0 and "valid" in out
    code, out, _ = run(capsys, "topo", "show", "--topology", str(out_file), "--json")
    assert sum(l["count"] for l in json.loads(out)["links"] if l["kind"] == "nvlink") == 24
    out_file.write_text("devices: []\nlinks: []\n")
    code, _, err = run(capsys, "topo", "validate", str(out_file))
    assert code == 2 and "has no devices" in err


@pytest.mark.multiproc
def test_simulate_cli(capsys, tmp_path):
    dag = tmp_path / "dag.json"
    dag.write_text(
        json.dumps(
            {
                "tasks": [
                    {"id": f"x{i}", "type": "transfer", "src": f"gpu{i}", "dst": f"gpu{4 + i}", "bytes": 1e9}
                    for i in range(2)
                ]
            }
        )
    )
    code, out, _ = run(
        capsys, "sim", "dag", str(dag), "--topology", "pcie-8gpu-qpi", "--json", "--png", str(tmp_path / "tl.png")
    )
    result = json.loads(out)
    assert code == 0 and result["makespan_seconds"] == pytest.approx(2e9 / 9.56e9, rel=1e-4)
    assert {row["link"] for row in result["links"] if row["kind"] == "qpi"} == {"cpu0->cpu1"}
    assert (tmp_path / "tl.png").read_bytes()[:4] == b"\x89PNG"
    code, out, _ = run(capsys, "sim", "dag", str(dag), "--topology", "pcie-8gpu-qpi", "--speeds", "qpi=19.12")
    assert code == 0 and "makespan" in out and "cpu0->cpu1" in out
    code, _, err = run(capsys, "sim", "dag", str(dag), "--topology", "dgx1-v100", "--speeds", "qpi")
    assert code == 2 and "bad --speeds entry" in err


def test_partition_cli_json_plot_and_info(capsys, tmp_path):
    out = tmp_path / "cora4"
    code, text, _ = run(
        capsys,
        "partition",
        "make",
        "cora",
        "--parts",
        "4",
        "--method",
        "g3",
        "--out",
        str(out),
        "--json",
        "--png",
        str(tmp_path / "p.png"),
    )
    result = json.loads(text)
    assert code == 0 and result["method"] == "g3" and len(result["parts"]) == 4
    assert {"num_nodes", "num_edges", "num_remote"} <= set(result["parts"][0])
    assert {"total_remote", "edge_cut", "seconds"} <= set(result)
    assert sum(p["num_nodes"] for p in result["parts"]) == 2708
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    code, text, _ = run(capsys, "partition", "info", str(out), "--json")
    assert code == 0 and json.loads(text)["total_remote"] == result["total_remote"]
    assert result["isolated_nodes"] == 0 and result["components"] == 78  # Cora, as PyG counts it
    code, _, err = run(capsys, "partition", "make", "cora", "--parts", "4", "--out", str(out))
    assert code == 2 and "already exists; pass --force" in err
    code, text, err = run(capsys, "partition", "make", "cora", "--parts", "2", "--out", str(tmp_path / "c2"))
    assert code == 0 and "note: 78 connected components (no communication between them)" in err
    assert "isolated" not in err  # none: nothing to say
    last = f"g3 stage 2 (start {g3.STARTS} of {g3.STARTS}): "
    assert last in err and "swaps kept" in err  # progress as the stages run
    summary = [line for line in text.splitlines() if line.startswith("g3 stage 1 (")]
    assert summary and summary == [
        line
        for line in run(capsys, "partition", "info", str(tmp_path / "c2"))[1].splitlines()
        if line.startswith("g3 stage 1 (")
    ]
    code, _, err = run(capsys, "partition", "make", "cora", "--parts", "0", "--out", str(tmp_path / "x"))
    assert code == 2 and ">= 1" in err and not (tmp_path / "x").exists()
    assert "partitioning" not in err  # refused before any work
    code, _, err = run(capsys, "partition", "make", "cora", "--parts", "3000", "--out", str(tmp_path / "x"))
    assert code == 2 and "cannot split 2708 nodes into 3000" in err and "partitioning" not in err


def test_partition_cli_reports_the_large_graph_refinement(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(g3, "SMALL_GRAPH_EDGES", 0)  # the large-graph path on a graph that is quick
    out = tmp_path / "r4"
    code, text, err = run(capsys, "partition", "make", "rmat:nodes=5000,edges=40000", "--parts", "4", "--out", str(out))
    assert code == 0 and "edge cut minimised, then volume-lowering moves" in err
    summary = [line for line in text.splitlines() if line.startswith("g3 stage 1 (")]
    assert len(summary) == 1 and "volume-lowering moves" in summary[0]
    assert summary == [
        line for line in run(capsys, "partition", "info", str(out))[1].splitlines() if line.startswith("g3 stage 1 (")
    ]
    assert json.loads(run(capsys, "partition", "info", str(out), "--json")[1])["refine_moves"] > 0


@pytest.mark.multiproc
def test_plan_cli(capsys, tmp_path):
    parts = tmp_path / "cora8"
    assert run(capsys, "partition", "make", "cora", "--parts", "8", "--out", str(parts), "--json")[0] == 0
    code, out, _ = run(
        capsys,
        "plan",
        "allgather",
        str(parts),
        "--topology",
        "dgx1-v100",
        "--feature-dim",
        "128",
        "--json",
        "--png",
        str(tmp_path / "ag.png"),
    )
    result = json.loads(out)["planners"]
    assert code == 0 and set(result) == {"p2p", "replicate", "swap", "spst", "hybrid"}
    for row in result.values():
        assert {"modeled_seconds", "bytes", "stages", "busiest_link"} <= set(row)
    assert result["spst"]["modeled_seconds"] <= 0.5 * result["p2p"]["modeled_seconds"]
    assert (tmp_path / "ag.png").read_bytes()[:4] == b"\x89PNG"
    code, out, _ = run(capsys, "plan", "allreduce", "--topology", "dgx1-v100", "--json")
    result = json.loads(out)
    assert result["planners"]["lp"]["normalized_time"] == pytest.approx(7 / 24)
    assert result["lower_bound"] == pytest.approx(7 / 24)
    assert {"normalized_time", "modeled_seconds"} <= set(result["planners"]["ring"])
    code, out, _ = run(capsys, "plan", "allreduce", "--topology", "dgx-a100", "--planner", "lp", "--bytes", "1e9")
    row = next(line for line in out.splitlines() if line.startswith("lp "))
    assert code == 0 and "100.0%" in row and "no tree schedule beats 150.86 GB/s" in row
    # 8 GPUs x (12 x 20 GB/s of NVLink + 24 of PCIe) / (2 x 7)
    assert "throughput bound (per-GPU partition, all links): 150.86 GB/s" in out
    code, _, err = run(capsys, "plan", "allgather", str(parts), "--topology", "p3.8xlarge", "--feature-dim", "8")
    assert code == 2 and "re-partition into at most 4 parts" in err
    code, _, err = run(capsys, "plan", "allreduce", "--topology", "dgx1-v100", "--out", str(tmp_path / "p.json"))
    assert code == 2 and "choose it with --planner" in err
    code, out, _ = run(
        capsys, "plan", "allreduce", "--topology", "p3.8xlarge", "--planner", "lp", "--out", str(tmp_path / "p.json")
    )
    assert code == 0 and "1/3" in out and (tmp_path / "p.json").is_file()
