"""The graph held as read-only file maps while it is partitioned (partition.mapped) and the one
partition-and-write sequence (partition.make_partition_set)."""

import numpy as np
import pytest

from commgraph.errors import PartitionError
from commgraph.graph import load_graph, sbm
from commgraph.graph.npz import load_npz, save_npz
from commgraph.partition import load_partition_set, make_partition_set, partition_graph
from commgraph.partition.mapped import advise_random, map_graph, release_pages


def _resident_bytes(path) -> int:
    """Resident bytes of this process's maps of ``path`` (``/proc/self/smaps``)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a map's header line
                inside = len(head) == 6 and head[5] == str(path)
            elif inside and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


def test_map_graph_moves_heap_arrays_to_read_only_maps_with_the_same_values(tmp_path):
    graph = sbm(nodes=3000, classes=4, features=64, seed=1)
    before = graph.checksum()
    features = graph.features.copy()
    map_graph(graph, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{name}.npy" for name in ("indptr", "indices", "features", "labels", "train_mask", "val_mask", "test_mask")
    )
    assert isinstance(graph.features, np.memmap) and graph.features.mode == "r"
    assert np.array_equal(graph.features, features) and graph.checksum() == before
    with pytest.raises(ValueError, match="read-only"):
        graph.features[0, 0] = 1.0
    map_graph(graph, tmp_path / "again")  # every array is a map already: nothing is written
    assert not (tmp_path / "again").exists()


def test_release_pages_hands_back_what_reading_brought_in_and_keeps_the_values(tmp_path):
    graph = sbm(nodes=20000, classes=4, features=128, seed=2)  # 10 MB of features
    map_graph(graph, tmp_path)
    features = tmp_path / "features.npy"
    total = float(np.asarray(graph.features).sum(dtype=np.float64))  # every page read
    assert _resident_bytes(features) >= graph.features.nbytes * 0.9
    released = release_pages(graph)
    assert released >= graph.features.nbytes + graph.indices.nbytes
    assert _resident_bytes(features) < graph.features.nbytes * 0.1
    assert float(np.asarray(graph.features).sum(dtype=np.float64)) == total


def test_copy_on_write_maps_are_left_alone(tmp_path):
    save_npz(sbm(nodes=2000, classes=4, features=16, seed=3), tmp_path / "g.npz", compress=False)
    graph = load_npz(tmp_path / "g.npz")  # stored members: copy-on-write maps, the caller may write
    graph.features[0, 0] = 42.0
    assert release_pages(graph) == 0
    assert graph.features[0, 0] == 42.0


@pytest.mark.parametrize("method", ["metis", "g3"])
def test_make_partition_set_writes_what_the_partitioner_chose_and_leaves_no_scratch(tmp_path, method):
    cora = load_graph("cora")
    expected, _ = partition_graph(load_graph("cora"), 4, method, seed=1)
    made = make_partition_set(cora, 4, tmp_path / "set", method=method, seed=1, notes={"components": 78})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]
    pset = load_partition_set(tmp_path / "set", load_graph("cora"))
    assert np.array_equal(np.asarray(pset.assignment()), expected)
    assert made.metrics["components"] == 78 and pset.manifest["metrics"] == made.metrics
    assert made.seconds > 0 and pset.manifest["seconds"] == made.seconds


def test_a_failed_make_leaves_no_scratch(tmp_path):
    with pytest.raises(PartitionError, match="unknown method"):
        make_partition_set(load_graph("cora"), 4, tmp_path / "set", method="nope", seed=0)
    assert list(tmp_path.iterdir()) == []


def test_advise_random_advises_read_only_maps_only(tmp_path):
    """A read-only file map is advised (its bytes counted); an array in the heap and a
    copy-on-write map are left alone."""
    np.save(tmp_path / "a.npy", np.arange(5000, dtype=np.int64))
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    written = np.load(tmp_path / "a.npy", mmap_mode="c")
    assert advise_random(mapped) >= mapped.nbytes
    assert advise_random(np.arange(10), written) == 0
    assert int(mapped[4999]) == 4999  # still readable


def test_a_sampling_graph_advises_the_maps_it_reads(tmp_path, monkeypatch):
    """``read_at_random`` advises the CSR arrays the sampler reads: the set's structure for the
    whole graph's sampler, each part's for the partitioned one."""
    from commgraph.sample import base, partitioned

    pset = make_partition_set(sbm(200, 2, 4, degree=6.0, seed=0), 2, tmp_path / "set", method="chunk", seed=0).pset
    advised = []
    for module in (base, partitioned):
        monkeypatch.setattr(module, "advise_random", lambda *arrays: advised.append(len(arrays)))
    base.SamplingGraph.from_partition(pset, 0).read_at_random()
    machine = np.arange(2)
    partitioned.PartitionedGraph.from_partition(pset, 0, machine, None).read_at_random()
    assert advised == [2, 4]
