"""Named datasets: downloads from a local HTTP server on 127.0.0.1 (no test reaches the internet)
serving archives built here in the real layouts; the cache's checks, repairs and kill safety."""

import gzip
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from commgraph.cli.main import main
from commgraph.errors import DatasetError
from commgraph.graph import REGISTRY, from_edges, load_graph, load_npz, load_snap
from commgraph.graph.datasets import cache_state, dataset_dir, fetch, load_dataset
from commgraph.graph.download import mirrored
from commgraph.graph.registry import Dataset, RemoteFile, Stats, lookup
from deadlines import scaled
from fileserver import Fault, FileServer
from test_planetoid import write_planetoid

UPSTREAM = "https://upstream.example.org"


@pytest.fixture
def server(tmp_path, monkeypatch):
    files = FileServer()
    url = files.start()
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COMMGRAPH_MIRROR", url)
    yield files
    files.stop()


def gz_lines(pairs, header="") -> bytes:
    text = header + "".join(f"{a}\t{b}\n" for a, b in pairs)
    return gzip.compress(text.encode(), compresslevel=1)


def csv_gz(rows) -> bytes:
    return gzip.compress("".join(f"{r}\n" for r in rows).encode())


def ogb_zip(folder="arxiv") -> tuple[bytes, Stats]:
    """An OGB node-property zip as snap.stanford.edu serves it: <folder>/raw/*.csv.gz, split/time/."""
    rng = np.random.default_rng(1)
    n, m = 50, 200
    edges = rng.integers(0, n, size=(m, 2))
    feats = rng.random((n, 4)).astype(np.float32)
    members = {
        "raw/edge.csv.gz": csv_gz(f"{a},{b}" for a, b in edges),
        "raw/num-node-list.csv.gz": csv_gz([n]),
        "raw/num-edge-list.csv.gz": csv_gz([m]),
        "raw/node-feat.csv.gz": csv_gz(",".join(f"{v:.6f}" for v in row) for row in feats),
        "raw/node-label.csv.gz": csv_gz(i % 5 for i in range(n)),
        "raw/node_year.csv.gz": csv_gz(2020 for _ in range(n)),
        "split/time/train.csv.gz": csv_gz(range(30)),
        "split/time/valid.csv.gz": csv_gz(range(30, 40)),
        "split/time/test.csv.gz": csv_gz(range(40, 50)),
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(f"{folder}/{name}", data)
    return buffer.getvalue(), Stats(n, m, 4, 5)


def ogb_entry(name="toy-arxiv", stats=None, sha=None) -> Dataset:
    return Dataset(
        name,
        "ogb",
        (RemoteFile(f"{UPSTREAM}/ogb/data/nodeproppred/arxiv.zip", sha256=sha),),
        "test",
        stats,
        folder="arxiv",
        split="time",
    )


def serve_ogb(server) -> tuple[bytes, Stats]:
    data, stats = ogb_zip()
    server.files["/ogb/data/nodeproppred/arxiv.zip"] = data
    return data, stats


def test_mirror_keeps_the_path(monkeypatch):
    monkeypatch.setenv("COMMGRAPH_MIRROR", "http://mirror.lan:8080/pub")
    assert (
        mirrored("https://snap.stanford.edu/data/web-Google.txt.gz")
        == "http://mirror.lan:8080/pub/data/web-Google.txt.gz"
    )
    monkeypatch.setenv("COMMGRAPH_MIRROR", "mirror.lan")
    with pytest.raises(DatasetError, match="not a URL"):
        mirrored("https://snap.stanford.edu/data/web-Google.txt.gz")


def test_registry_names_and_published_statistics():
    assert REGISTRY["ogbn-arxiv"].stats == Stats(169_343, 1_166_243, 128, 40)
    assert REGISTRY["citeseer"].stats.nodes == 3_327 and REGISTRY["email-Enron"].stats.nodes == 36_692
    assert REGISTRY["ogbn-products"].files[0].url == "http://snap.stanford.edu/ogb/data/nodeproppred/products.zip"
    assert REGISTRY["web-Google"].files[0].url == "https://snap.stanford.edu/data/web-Google.txt.gz"
    assert [f.filename for f in REGISTRY["pubmed"].files][-1] == "ind.pubmed.test.index"
    assert all(entry.licence for entry in REGISTRY.values())


def test_clean_download_converts_once_and_maps_the_cache(server):
    data, stats = serve_ogb(server)
    entry = ogb_entry(stats=stats)
    assert cache_state(entry) == "-"
    graph = load_dataset(entry, progress=False)
    root = dataset_dir("toy-arxiv")
    assert (root / "raw" / "arxiv.zip").read_bytes() == data
    assert (root / "unpacked" / "arxiv" / "split" / "time" / "train.csv.gz").is_file()
    recorded = json.loads((root / "checksums.json").read_text())
    assert set(recorded) == {"raw/arxiv.zip", "graph.npz"}
    reference = load_graph(root / "unpacked" / "arxiv", name="toy-arxiv", split="time")
    assert graph.equals(reference) and graph.train_mask.sum() == 30
    requests = len(server.log)
    again = load_dataset(entry, progress=False)
    assert len(server.log) == requests  # served from the cache
    assert again.equals(reference) and isinstance(again.indices.base, np.memmap)
    assert cache_state(entry) == "converted"


def test_truncated_archive_is_refused_and_removed(server):
    data, stats = serve_ogb(server)
    server.files["/ogb/data/nodeproppred/arxiv.zip"] = data[: len(data) - 300]  # consistent length, cut zip
    with pytest.raises(DatasetError, match="arxiv.zip is damaged"):
        load_dataset(ogb_entry(stats=stats), progress=False)
    assert list((dataset_dir("toy-arxiv") / "raw").iterdir()) == []


def test_only_a_pinned_checksum_refuses_a_file_a_wrong_size_is_a_warning(server, capsys):
    data, stats = serve_ogb(server)
    with pytest.raises(DatasetError, match=r"has SHA-256 [0-9a-f]{64}, expected 0{64}"):
        load_dataset(ogb_entry(stats=stats, sha="0" * 64), progress=False)
    assert not (dataset_dir("toy-arxiv") / "raw" / "arxiv.zip").exists()
    capsys.readouterr()
    sized = Dataset(
        "sized",
        "ogb",
        (
            RemoteFile(
                f"{UPSTREAM}/ogb/data/nodeproppred/arxiv.zip",
                size=len(data) + 1,
                sha256=hashlib.sha256(data).hexdigest(),
            ),
        ),
        "t",
        stats,
        folder="arxiv",
        split="time",
    )
    assert load_dataset(sized, progress=False).num_nodes == stats.nodes
    assert capsys.readouterr().err == (
        f"commgraph: warning: arxiv.zip: counted {len(data):,} bytes where the registry states {len(data) + 1:,}; "
        "kept as counted (a stated count is not a checksum)\n"
    )


def test_server_errors(server, monkeypatch):
    monkeypatch.setattr("commgraph.graph.download.time.sleep", lambda s: None)
    _, stats = serve_ogb(server)
    server.faults["/ogb/data/nodeproppred/arxiv.zip"] = Fault(status=503, times=2)  # retried
    assert load_dataset(ogb_entry(stats=stats), progress=False).num_nodes == 50
    server.faults["/ogb/data/nodeproppred/arxiv.zip"] = Fault(status=500)
    with pytest.raises(DatasetError, match=r"arxiv.zip answered HTTP 500"):
        fetch(ogb_entry("other", stats=stats), progress=False)
    with pytest.raises(DatasetError, match="HTTP 404"):
        fetch(Dataset("gone", "snap", (RemoteFile(f"{UPSTREAM}/data/gone.txt.gz"),), "t", Stats(1, 1)), progress=False)


def test_interrupted_download_resumes_with_a_range_request(server):
    data, stats = serve_ogb(server)
    path = "/ogb/data/nodeproppred/arxiv.zip"
    server.faults[path] = Fault(cut_after=len(data) // 3, times=1)
    graph = load_dataset(ogb_entry(stats=stats), progress=False)
    assert graph.num_nodes == 50
    assert server.log == [(path, None), (path, f"bytes={len(data) // 3}-")]
    assert (dataset_dir("toy-arxiv") / "raw" / "arxiv.zip").read_bytes() == data


def test_partial_file_from_an_earlier_run_is_resumed(server):
    data, stats = serve_ogb(server)
    raw = dataset_dir("toy-arxiv") / "raw"
    raw.mkdir(parents=True)
    (raw / "arxiv.zip.part").write_bytes(data[:1000])
    assert cache_state(ogb_entry(stats=stats)) == "partial"
    fetch(ogb_entry(stats=stats), progress=False)
    assert server.log[0][1] == "bytes=1000-" and (raw / "arxiv.zip").read_bytes() == data


def test_corrupt_cache_entries_are_made_again(server):
    data, stats = serve_ogb(server)
    entry = ogb_entry(stats=stats)
    load_dataset(entry, progress=False)
    root = dataset_dir("toy-arxiv")
    reference = load_graph(root / "unpacked" / "arxiv", name="toy-arxiv")  # not a map of the file damaged below
    blob = bytearray((root / "graph.npz").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (root / "graph.npz").write_bytes(bytes(blob))
    requests = len(server.log)
    assert load_dataset(entry, progress=False).equals(reference)
    assert len(server.log) == requests  # converted again from the verified download
    (root / "raw" / "arxiv.zip").write_bytes(b"not the zip")
    (root / "graph.npz").write_bytes(b"")
    assert load_dataset(entry, progress=False).equals(reference)
    assert len(server.log) == requests + 1  # the raw file no longer matched its digest: fetched again


def test_published_statistics_that_disagree_are_warnings_not_refusals(server, capsys):
    """A publisher's page is not a checksum: each count it states that the download disagrees with
    is one warning line on stderr, and the graph is converted and cached as counted."""
    _, stats = serve_ogb(server)
    wrong = Stats(stats.nodes + 1, 999, stats.features, stats.classes)
    capsys.readouterr()
    g = load_dataset(ogb_entry(stats=wrong), progress=False)
    assert g.num_nodes == stats.nodes and cache_state(ogb_entry(stats=wrong)) == "converted"
    assert capsys.readouterr().err.splitlines() == [
        "commgraph: warning: toy-arxiv: counted 50 nodes where the publisher states 51; kept as counted "
        "(a stated count is not a checksum)",
        "commgraph: warning: toy-arxiv: counted 200 edge lines where the publisher states 999; kept as counted "
        "(a stated count is not a checksum)",
    ]
    assert load_dataset(ogb_entry(stats=wrong), progress=False).equals(g)
    assert capsys.readouterr().err == ""  # said once, when converted
    load_dataset(ogb_entry("agreed", stats=stats), progress=False)
    assert capsys.readouterr().err == ""


def test_offline_is_one_line_naming_file_url_and_destination(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COMMGRAPH_MIRROR", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.setattr("commgraph.graph.download.time.sleep", lambda s: None)
    with pytest.raises(DatasetError) as info:
        load_graph("web-Google")
    message = str(info.value)
    dest = tmp_path / "home" / "datasets" / "web-Google" / "raw" / "web-Google.txt.gz"
    assert "\n" not in message
    assert "fetch http://127.0.0.1:9/data/web-Google.txt.gz yourself" in message and f"put it at {dest}" in message


def test_a_host_that_does_not_resolve_is_said_once_with_every_file_to_fetch(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COMMGRAPH_MIRROR", "http://nonexistent.invalid/")  # .invalid never resolves (RFC 2606)
    monkeypatch.setattr("commgraph.graph.download.time.sleep", lambda s: pytest.fail("a second try was waited for"))
    assert main(["graph", "datasets", "download", "citeseer"]) == 2
    err = capsys.readouterr().err
    folder = tmp_path / "home" / "datasets" / "citeseer" / "raw"
    urls = [
        f"http://nonexistent.invalid/kimiyoung/planetoid/raw/master/data/{f.filename}" for f in lookup("citeseer").files
    ]
    assert err.count("\n") == 1 and len(urls) == 8
    assert err.startswith(
        "commgraph: error: cannot download citeseer's 8 files (nonexistent.invalid does not resolve: no network, "
        f"or no DNS): fetch them yourself into {folder}: {', '.join(urls)}, then run again (or set COMMGRAPH_MIRROR)"
    )


@pytest.mark.multiproc
def test_real_names_planetoid_and_snap_through_the_cli(server, tmp_path, capsys):
    """citeseer-layout pickles and an email-Enron-sized edge list, served at the registry's own paths."""
    folder = tmp_path / "planetoid"
    folder.mkdir()
    write_planetoid(folder, "toycite")
    for file in folder.iterdir():
        server.files[f"/kimiyoung/planetoid/raw/master/data/{file.name}"] = file.read_bytes()
    expected = load_graph(folder, name="toycite")
    entry = Dataset(
        "toycite",
        "planetoid",
        tuple(
            RemoteFile(f"https://github.com/kimiyoung/planetoid/raw/master/data/ind.toycite.{p}")
            for p in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
        ),
        "MIT",
        Stats(expected.num_nodes, expected.num_edges, expected.num_features, expected.num_classes, "stored"),
    )
    REGISTRY["toycite"] = entry
    try:
        assert main(["graph", "datasets", "download", "toycite", "--quiet"]) == 0
        assert load_graph("toycite").equals(expected)
    finally:
        del REGISTRY["toycite"]

    rng = np.random.default_rng(2)
    n, m = 36_692, 367_660  # email-Enron's nodes as published; its file holds 2 edge lines fewer than its page says
    pairs = rng.integers(0, n, size=(m, 2))
    pairs[0] = (n - 1, 0)
    pairs[pairs == 1234] = 1235  # as in the real file, one id of the header's range has no edge
    server.files["/data/email-Enron.txt.gz"] = gz_lines(pairs, f"# Nodes: {n} Edges: 367662\n")
    capsys.readouterr()
    assert main(["graph", "datasets", "download", "email-Enron", "--quiet"]) == 0
    said = capsys.readouterr()
    assert said.out.startswith(f"email-Enron: {n:,} nodes, ")
    assert said.err == (
        "commgraph: warning: email-Enron: counted 367,660 edge lines where the publisher states "
        "367,662; kept as counted (a stated count is not a checksum)\n"
    )
    assert main(["graph", "info", "email-Enron", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["name"] == "email-Enron" and info["num_nodes"] == n
    assert main(["graph", "datasets", "list", "--json"]) == 0
    rows = {row["name"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["email-Enron"]["cached"] == "converted" and rows["web-Google"]["cached"] == "-"


def test_reddit_layout(server):
    rng = np.random.default_rng(3)
    n = 40
    rows, cols = rng.integers(0, n, 300), rng.integers(0, n, 300)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        data = io.BytesIO()
        np.savez(data, feature=rng.random((n, 6)), label=np.arange(n) % 3, node_types=np.arange(n) % 3 + 1)
        archive.writestr("reddit_data.npz", data.getvalue())
        graph = io.BytesIO()
        sp.save_npz(graph, sp.coo_matrix((np.ones(300), (rows, cols)), shape=(n, n)))
        archive.writestr("reddit_graph.npz", graph.getvalue())
    server.files["/dataset/reddit.zip"] = buffer.getvalue()
    entry = Dataset(
        "toy-reddit", "reddit", (RemoteFile("https://data.dgl.ai/dataset/reddit.zip"),), "t", Stats(n, 300, 6, 3)
    )
    g = load_dataset(entry, progress=False)
    pairs = {(int(a), int(b)) for a, b in zip(rows, cols) if a != b}
    src, dst = g.edge_list()
    assert {(int(a), int(b)) for a, b in zip(src, dst)} == pairs | {(b, a) for a, b in pairs}
    assert g.train_mask.sum() == 14 and g.val_mask.sum() == 13 and g.num_classes == 3


@pytest.mark.multiproc
def test_killed_at_any_point_finishes_on_the_next_run(tmp_path):
    """Kill a download-and-convert process at points spread over a whole run, run it again each time
    from what the kill left; the last run must give exactly the graph of the file."""
    rng = np.random.default_rng(4)
    n, m = 200_000, 1_500_000
    pairs = rng.integers(0, n, size=(m, 2)) * 2  # sparse ids, remapped
    data = gz_lines(pairs)
    source = tmp_path / "big.txt.gz"
    source.write_bytes(data)
    expected = load_snap(source, name="big")
    files = FileServer(
        files={"/data/big.txt.gz": data}, faults={"/data/big.txt.gz": Fault(bytes_per_second=len(data) / 1.0)}
    )
    url = files.start()
    env = {
        **os.environ,
        "COMMGRAPH_HOME": str(tmp_path / "home"),
        "COMMGRAPH_MIRROR": url,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    spec = json.dumps({"name": "big", "url": f"{UPSTREAM}/data/big.txt.gz", "nodes": expected.num_nodes, "edges": m})
    driver = [sys.executable, str(Path(__file__).parent / "dataset_driver.py"), spec]
    root = tmp_path / "home" / "datasets" / "big"

    def start():
        proc = subprocess.Popen(driver, env=env, stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        return proc, time.monotonic()

    try:
        kills = {"download": 0, "after download": 0}
        for _ in range(16):  # the download takes about 1 s of transfer in all, resumed run after run
            phase = "after download" if (root / "raw" / "big.txt.gz").exists() else "download"
            if kills["after download"] == 2:
                break
            # on a busy machine a run may start late and move few bytes: after the third kill in the
            # download each run gets 0.3 s more, so the download still finishes within the loop
            slow = max(0, kills["download"] - 2)
            delay = 0.3 * (1 + slow) if phase == "download" else (0.05, 0.3)[kills[phase]]
            proc, began = start()
            time.sleep(max(0.0, delay - (time.monotonic() - began)))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
                kills[phase] += 1
            else:
                proc.communicate(timeout=30)
        proc, _ = start()
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        result = json.loads(out.strip().splitlines()[-1])
        assert result == {"nodes": expected.num_nodes, "edges": expected.num_edges, "checksum": expected.checksum()}
        assert kills["download"] >= 2 and kills["after download"] >= 1, kills
        assert any(r is not None for _, r in files.log)  # some run resumed a partial download
        assert load_npz(root / "graph.npz").equals(expected)
        assert not list(root.glob(".*.tmp")) and not list(root.glob(".unpack-*"))
    finally:
        files.stop()


def zipped(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def npz_bytes(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


@pytest.mark.multiproc
def test_papers100m_binary_and_proteins_multitask_layouts(server):
    rng = np.random.default_rng(5)
    n, m = 30, 120
    edge_index = rng.integers(0, n, size=(2, m))
    labels = np.where(np.arange(n) % 4 == 3, np.nan, np.arange(n) % 3).astype(np.float32)[:, None]
    split = {
        f"papers100M-bin/split/time/{part}.csv.gz": csv_gz(ids)
        for part, ids in (("train", [0, 1, 2]), ("valid", [4, 5]), ("test", [6]))
    }
    server.files["/ogb/data/nodeproppred/papers100M-bin.zip"] = zipped(
        {
            "papers100M-bin/raw/data.npz": npz_bytes(
                edge_index=edge_index,
                node_feat=rng.random((n, 5)).astype(np.float16),
                num_nodes_list=np.array([n]),
                num_edges_list=np.array([m]),
            ),
            "papers100M-bin/raw/node-label.npz": npz_bytes(node_label=labels),
            **split,
        }
    )
    entry = Dataset(
        "toy-papers",
        "ogb",
        (RemoteFile(f"{UPSTREAM}/ogb/data/nodeproppred/papers100M-bin.zip"),),
        "t",
        Stats(n, m, 5, 3),
        folder="papers100M-bin",
        split="time",
    )
    g = load_dataset(entry, progress=False)
    reference = from_edges(edge_index[0], edge_index[1], n)
    assert np.array_equal(g.indptr, reference.indptr) and np.array_equal(g.indices, reference.indices)
    assert g.labels.tolist() == [-1 if i % 4 == 3 else i % 3 for i in range(n)]
    assert np.flatnonzero(g.val_mask).tolist() == [4, 5]

    server.files["/ogb/data/nodeproppred/proteins.zip"] = zipped(
        {
            "proteins/raw/edge.csv.gz": csv_gz(f"{a},{b}" for a, b in edge_index.T),
            "proteins/raw/edge-feat.csv.gz": csv_gz("0.1,0.2" for _ in range(m)),
            "proteins/raw/node-label.csv.gz": csv_gz("0,1,1" for _ in range(n)),  # several binary tasks
            "proteins/raw/num-node-list.csv.gz": csv_gz([n]),
            "proteins/split/species/train.csv.gz": csv_gz([0]),
            "proteins/split/species/valid.csv.gz": csv_gz([1]),
            "proteins/split/species/test.csv.gz": csv_gz([2]),
        }
    )
    proteins = REGISTRY["ogbn-proteins"]
    entry = Dataset(
        "toy-proteins",
        "ogb",
        proteins.files,
        "t",
        Stats(n, m),
        folder="proteins",
        split="species",
        labels=proteins.labels,
    )
    g = load_dataset(entry, progress=False)
    assert g.labels is None and g.features is None and np.array_equal(g.indices, reference.indices)


SNAP_TRAPS = {
    # email-Enron: the header's range 0..N-1 holds an id no edge names; N nodes, as published
    "header-range": ("# Nodes: 6 Edges: 4\n", [(0, 1), (1, 2), (2, 5), (5, 0)], 6),
    # web-Google: sparse ids, the header counts the ids that occur
    "sparse-ids": ("# Nodes: 4 Edges: 4\n", [(10, 20), (20, 30), (30, 916), (916, 10)], 4),
    # soc-LiveJournal1: self loops and both directions are lines of the file, counted as listed
    "self-loops": ("# Nodes: 3 Edges: 5\n", [(0, 0), (0, 1), (1, 0), (1, 2), (2, 2)], 3),
    # com-orkut / com-friendster ungraph: each undirected edge listed once, no header
    "ungraph": ("# Undirected graph\n", [(0, 1), (0, 2), (1, 2), (2, 3)], 4),
}


@pytest.mark.parametrize("trap", sorted(SNAP_TRAPS))
def test_a_correct_snap_download_passes_its_check_whatever_the_trap(server, trap, capsys):
    """The published figures are counted as the file loads: header N (or the ids that occur) for
    nodes, the file's edge lines for edges; a correct file passes without a word, a count that
    disagrees is a warning and the graph loads all the same."""
    header, pairs, nodes = SNAP_TRAPS[trap]
    server.files[f"/data/{trap}.txt.gz"] = gz_lines(pairs, header)
    remote = (RemoteFile(f"{UPSTREAM}/data/{trap}.txt.gz"),)
    capsys.readouterr()
    g = load_dataset(Dataset(f"toy-{trap}", "snap", remote, "t", Stats(nodes, len(pairs))), progress=False)
    assert g.num_nodes == nodes and capsys.readouterr().err == ""
    kept = load_dataset(Dataset(f"bad-{trap}", "snap", remote, "t", Stats(nodes + 1, len(pairs))), progress=False)
    assert np.array_equal(kept.indptr, g.indptr) and np.array_equal(kept.indices, g.indices)
    assert f"counted {nodes} nodes where the publisher states {nodes + 1}" in capsys.readouterr().err


@pytest.mark.multiproc
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["reddit", "ogbn-products"])
def test_the_thesis_datasets_go_through_the_sampling_benchmark_or_say_how_to_get_them(tmp_path, name):
    """``benchmarks/sampling.py --train-graphs reddit`` (or ``ogbn-products``) resolves the
    registry's name; with the dataset neither cached nor reachable, it stops with exit 2 and one
    line saying where to put the archive, not a traceback."""
    env = {
        **os.environ,
        "COMMGRAPH_HOME": str(tmp_path / "home"),
        "COMMGRAPH_MIRROR": "http://127.0.0.1:9",  # the discard port: nothing listens
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    job = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).parents[1] / "benchmarks" / "sampling.py"),
            "--skip-speed",
            "--train-graphs",
            name,
            "--workers",
            "8",
            "--count-steps",
            "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    last = job.stderr.strip().splitlines()[-1]
    assert job.returncode == 2 and "Traceback" not in job.stderr
    assert last.startswith("sampling.py: error: cannot download")
    assert str(tmp_path / "home" / "datasets" / name / "raw") in last


def test_a_silent_mirror_is_waited_for_as_long_as_asked_and_said(server, capsys):
    """A mirror that accepts and never answers: each read waits --read-timeout seconds, --tries
    times, each abandoned try said on stderr; the error names both and how to change them."""
    _, stats = serve_ogb(server)
    server.faults["/ogb/data/nodeproppred/arxiv.zip"] = Fault(silent_seconds=5)
    started = time.monotonic()
    code = main(
        ["graph", "datasets", "download", "ogbn-arxiv", "--no-convert", "--read-timeout", "0.3", "--tries", "2"]
    )
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - started < scaled(4)
    assert "sent nothing for 0.3 s; 0 bytes kept; try 2 of 2 (at most 0.3 s per read)" in err
    assert err.strip().splitlines()[-1].startswith("commgraph: error: cannot download arxiv.zip (")
    assert "2 tries of at most 0.3 s per read" in err and "--tries N --read-timeout S" in err


def test_a_stalled_download_keeps_and_reports_the_bytes_that_arrived(server, monkeypatch):
    monkeypatch.setattr("commgraph.graph.download.time.sleep", lambda s: None)
    data, stats = serve_ogb(server)
    server.faults["/ogb/data/nodeproppred/arxiv.zip"] = Fault(stall_after=1000, stall_seconds=3)
    monkeypatch.setenv("COMMGRAPH_DOWNLOAD_TIMEOUT", "0.3")
    monkeypatch.setenv("COMMGRAPH_DOWNLOAD_TRIES", "1")
    with pytest.raises(DatasetError, match="1,000 bytes kept"):
        fetch(ogb_entry(stats=stats), progress=False)
    part = dataset_dir("toy-arxiv") / "raw" / "arxiv.zip.part"
    assert part.read_bytes() == data[:1000]
    server.faults.clear()  # the next run resumes from byte 1000
    assert load_dataset(ogb_entry(stats=stats), progress=False).num_nodes == stats.nodes
    assert server.log[-1][1] == "bytes=1000-"
