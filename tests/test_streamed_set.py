"""``partition make papers-shaped:... --method chunk`` (and ``sbm:...,chunked=1``) writes the partition
set straight from the generator (``commgraph.partition.streamed``): every file the same, byte for
byte, as writing the graph file and then partitioning it with ``--method chunk``; the manifest's
graph checksum that of the graph file's graph; no graph file written; nothing left behind when a
write fails; and a writer whose memory does not grow with the node count."""

from __future__ import annotations

import errno
import json

import numpy as np
import pytest

from commgraph.errors import OutputError, PartitionError
from commgraph.graph import load_graph
from commgraph.graph.nodefile import NpyWriter
from commgraph.graph.resolve import chunked_graph
from commgraph.partition import load_partition_set, make_partition_set
from commgraph.partition.streamed import write_streamed_set
from forked import run_commgraph
from writer_peak import writer_peak

SPECS = [
    # two generator chunks (the second short), three parts whose bounds cut a chunk, float16 features
    ("papers-shaped:nodes=40000,seed=3,train=0.2", 3, "float16"),
    # the block model's external sort, an isolated node, float32 features
    ("sbm:nodes=30000,classes=5,features=16,seed=0,chunked=1", 4, None),
    ("papers-shaped:nodes=100,seed=1", 1, None),
]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.mark.parametrize("spec, parts, dtype", SPECS)
def test_the_straight_set_is_the_two_step_sets_byte_for_byte(spec, parts, dtype, tmp_path, home):
    straight = write_streamed_set(chunked_graph(spec), parts, tmp_path / "straight", feature_dtype=dtype)
    assert not home.exists()  # no graph file was written
    graph = load_graph(spec)
    two_step = make_partition_set(graph, parts, tmp_path / "two", method="chunk", seed=0, feature_dtype=dtype)
    mine, theirs = straight.pset.manifest, two_step.pset.manifest
    assert mine["files"] == theirs["files"] and mine["arrays"] == theirs["arrays"]
    for name in theirs["files"]:  # every array of every part, and the structure
        a, b = np.load(tmp_path / "straight" / name), np.load(tmp_path / "two" / name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert mine["graph"] == theirs["graph"]  # the graph file's checksum, nodes and edges
    assert {**mine["metrics"], "isolated_nodes": 0} == {**theirs["metrics"], "isolated_nodes": 0}
    assert mine["metrics"]["isolated_nodes"] == graph.stats()["isolated_nodes"]
    load_partition_set(tmp_path / "straight", graph).validate()  # made from that very graph


@pytest.mark.multiproc
def test_partition_make_writes_the_set_straight_and_info_and_train_accept_it(tmp_path, home):
    out = tmp_path / "p"
    made = run_commgraph(
        ["partition", "make", "papers-shaped:nodes=3000,seed=0,train=0.3", "--parts", "2", "--method", "chunk"]
        + ["--feature-dtype", "float16", "--out", str(out), "--json"]
    )
    assert made.returncode == 0, made.stderr
    assert "straight into 2 parts" in made.stderr and json.loads(made.stdout)["method"] == "chunk"
    assert not home.exists()
    assert run_commgraph(["partition", "info", str(out)]).returncode == 0
    trained = run_commgraph(["train", str(out), "--sampler", "neighbor", "--fanout", "5,5", "--epochs", "1"])
    assert trained.returncode == 0, trained.stderr


def test_bad_requests_are_refused_before_writing(tmp_path, home):
    graph = chunked_graph("papers-shaped:nodes=100,seed=0")
    with pytest.raises(PartitionError, match="cannot split 100 nodes into 101"):
        write_streamed_set(graph, 101, tmp_path / "p")
    with pytest.raises(PartitionError, match="unknown feature dtype 'int8'"):
        write_streamed_set(graph, 2, tmp_path / "p", feature_dtype="int8")
    (tmp_path / "p").mkdir()
    with pytest.raises(PartitionError, match="already exists; pass --force"):
        write_streamed_set(graph, 2, tmp_path / "p")
    assert chunked_graph("sbm:nodes=100,classes=2,features=4") is None  # drawn whole: the two-step path
    assert chunked_graph("cora") is None


@pytest.mark.parametrize("spec", ["papers-shaped:nodes=5000,seed=0", "sbm:nodes=5000,classes=3,features=4,chunked=1"])
def test_a_full_disk_leaves_nothing_behind(spec, tmp_path, home, monkeypatch):
    written = NpyWriter.write

    def fill(self, chunk):
        if "features" in str(self.path):
            raise OSError(errno.ENOSPC, "No space left on device")
        written(self, chunk)

    monkeypatch.setattr(NpyWriter, "write", fill)
    with pytest.raises(OutputError, match="no space left on the disk"):
        write_streamed_set(chunked_graph(spec), 2, tmp_path / "p")
    assert list(tmp_path.iterdir()) == []  # no set, no temporary set, no edge buckets


@pytest.mark.multiproc
@pytest.mark.slow
def test_the_writers_memory_does_not_grow_with_the_node_count(tmp_path):
    """Per node the writer holds three eighths of a byte (bit sets and a count per 64 nodes): four
    times the nodes add well under 16 MB to its peak."""
    call = (
        "from commgraph.graph.papers import papers_chunks\n"
        "write_streamed_set(papers_chunks(int(sys.argv[2])), 2, sys.argv[1], feature_dtype='float16')"
    )

    def peak(nodes: int) -> dict:
        return writer_peak(
            "commgraph.partition.streamed", "write_streamed_set", tmp_path / f"{nodes}", nodes, call=call
        )

    small, large = peak(100000), peak(400000)
    assert large["file"] > 3.5 * small["file"]
    assert large["peak_added"] < small["peak_added"] + 16e6
    assert large["peak_added"] < 0.5 * large["file"]
