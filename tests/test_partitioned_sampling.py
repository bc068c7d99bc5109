"""--structure partitioned: the machine's parts' in-edges, remote hops drawn at their owners, and
the same blocks as the replicated structure."""

from __future__ import annotations

import numpy as np
import pytest

from commgraph.graph import load_graph
from commgraph.partition import load_partition_set, write_partition_set
from commgraph.runtime.sampling import RemoteRows
from commgraph.sample import NeighborSampler, SamplingGraph
from commgraph.sample.keyed import keyed_slots, sample_rows
from commgraph.sample.partitioned import PartitionedGraph, merge_rows
from forked import run_commgraph
from ports import free_port

PARTS = 4


@pytest.fixture(scope="module")
def sbm_set(tmp_path_factory):
    graph = load_graph("sbm:nodes=600,classes=4,features=8,degree=12,seed=3")
    assignment = np.random.default_rng(0).integers(0, PARTS, graph.num_nodes)
    out = tmp_path_factory.mktemp("psample") / "set"
    write_partition_set(graph, assignment, PARTS, out, method="random", seed=0, seconds=0.0, metrics={})
    return load_partition_set(out)


class InProcess:
    """The runtime's remote sampling for workers that live in this process: requests go straight
    to their owners' ``serve``."""

    def __init__(self):
        self.graphs: dict[int, PartitionedGraph] = {}
        self.asked = 0

    def __call__(self, nodes, owners, fanout, key, serve) -> RemoteRows:
        counts, sources = [], []
        for q in np.unique(owners):
            c, s = self.graphs[int(q)].serve(nodes[owners == q], fanout, key)
            counts.append(c)
            sources.append(s)
        self.asked += nodes.shape[0]
        none = np.zeros(0, np.int64)
        return RemoteRows(np.concatenate(counts or [none]), np.concatenate(sources or [none]))


def _partitioned(pset, machines: list[list[int]]) -> tuple[dict[int, PartitionedGraph], InProcess]:
    remote = InProcess()
    for machine in machines:
        for rank in machine:
            remote.graphs[rank] = PartitionedGraph.from_partition(
                pset, rank, np.array(machine), remote if len(machines) > 1 else None
            )
    return remote.graphs, remote


def test_keyed_draws_depend_only_on_the_key_and_the_node():
    indptr = np.array([0, 5, 10, 16])
    ids = np.array([7, 8, 9])
    one, slots = keyed_slots(indptr, np.array([0, 1, 2]), ids, 3, 42)
    # the same node (same in-edges) drawn alone, elsewhere in a batch, or at another CSR position
    alone, slots_alone = keyed_slots(indptr, np.array([2]), np.array([9]), 3, 42)
    assert list(one) == [3, 3, 3] and list(slots[6:] - 10) == list(slots_alone - 10)
    moved, slots_moved = keyed_slots(np.array([0, 6]), np.array([0]), np.array([9]), 3, 42)
    assert list(slots_moved) == list(slots_alone - 10)
    assert len(set(slots[:3])) == 3 and all(0 <= s < 5 for s in slots[:3])  # without replacement
    other, slots_other = keyed_slots(indptr, np.array([0, 1, 2]), ids, 3, 43)
    assert not np.array_equal(slots, slots_other)  # another key, other draws


def test_keyed_draws_are_uniform():
    """Each of 10 in-neighbours is kept with probability 3/10 (over 20,000 keys)."""
    indptr, indices = np.array([0, 10]), np.arange(10)
    hits = np.zeros(10)
    for key in range(20000):
        hits[sample_rows(indptr, indices, np.array([0]), 3, key)[1]] += 1
    assert np.allclose(hits / 20000, 0.3, atol=0.015)


def test_merge_rows_puts_groups_back_in_destination_order():
    counts, sources = merge_rows(
        4,
        [
            (np.array([1, 3]), np.array([2, 1]), np.array([10, 11, 30])),
            (np.array([0, 2]), np.array([1, 0]), np.array([0])),
        ],
    )
    assert list(counts) == [1, 2, 0, 1] and list(sources) == [0, 10, 11, 30]


@pytest.mark.parametrize("machines", [[[0], [1], [2], [3]], [[0, 1], [2, 3]], [[0, 1, 2, 3]]])
def test_partitioned_blocks_equal_the_replicated_ones(sbm_set, machines):
    graphs, remote = _partitioned(sbm_set, machines)
    for rank in range(PARTS):
        replicated = SamplingGraph.from_partition(sbm_set, rank)
        seeds = np.asarray(sbm_set.part(rank).owned)[:40]
        fanouts = [5, 3, 2]
        a = NeighborSampler(replicated, fanouts).sample(seeds, np.random.default_rng(rank))
        b = NeighborSampler(graphs[rank], fanouts).sample(seeds, np.random.default_rng(rank))
        for x, y in zip(a.layers, b.layers):
            for name in ("dst", "src", "edge_src", "edge_dst"):
                assert np.array_equal(getattr(x, name), getattr(y, name)), name
        assert np.array_equal(a.remote_input, b.remote_input)
        assert np.array_equal(graphs[rank].degree[a.input_nodes], replicated.degree[a.input_nodes])
    assert (remote.asked > 0) == (len(machines) > 1)  # hops left the machine exactly when it lacked parts


def test_a_machine_needs_only_its_parts_and_the_node_maps(sbm_set, tmp_path):
    """Without the whole graph's in-edge files the partitioned structure samples as before; the
    replicated one cannot open."""
    import shutil

    from commgraph.errors import PartitionError

    copy = tmp_path / "set"
    shutil.copytree(sbm_set.path, copy)
    for name in ("indptr", "indices"):
        (copy / "structure" / f"{name}.npy").unlink()
    pset = load_partition_set(copy)
    graphs, _ = _partitioned(pset, [[0, 1], [2, 3]])
    seeds = np.asarray(pset.part(0).owned)[:20]
    batch = NeighborSampler(graphs[0], [4, 4]).sample(seeds, np.random.default_rng(0))
    expected = NeighborSampler(SamplingGraph.from_partition(sbm_set, 0), [4, 4]).sample(seeds, np.random.default_rng(0))
    assert np.array_equal(batch.input_nodes, expected.input_nodes)
    with pytest.raises(PartitionError, match="structure/indptr.npy is missing"):
        SamplingGraph.from_partition(pset, 0)


# -- whole jobs: emulated machines (torchrun agents on this host) ----------------------------------

SAMPLED = [
    "--sampler",
    "neighbor",
    "--fanout",
    "4,4",
    "--batch-size",
    "48",
    "--epochs",
    "3",
    "--steps-per-epoch",
    "3",
    "--dropout",
    "0",
    "--quiet",
    "--device",
    "cpu",
    "--eval-every",
    "3",
    "--timeout",
    "60",
]


def _agents(sets: list, per_agent: int, *args: str) -> list:
    """One torchrun agent ("machine") per entry of ``sets`` on this host, ``per_agent`` workers each;
    their (return code, stderr)."""
    import subprocess
    import sys

    port = free_port()
    jobs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                str(len(sets)),
                "--nproc-per-node",
                str(per_agent),
                "--node-rank",
                str(node),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(port),
                "-m",
                "commgraph",
                "train",
                str(pset),
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node, pset in enumerate(sets)
    ]
    return [(job.wait(timeout=240), job.communicate()[1]) for job in jobs]


@pytest.fixture(scope="module")
def cora_four(tmp_path_factory):
    from commgraph.cli.main import main

    out = tmp_path_factory.mktemp("cora4") / "set"
    assert main(["partition", "make", "cora", "--parts", "4", "--method", "metis", "--out", str(out)]) == 0
    return out


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_machines_of_two_train_like_one_machine_of_four(cora_four, tmp_path):
    """The same seeds, blocks and features: a 4-worker job on one machine (replicated structure) and
    the job as 2 torchrun "machines" of 2 workers (partitioned by default: hops through the other
    machine's nodes drawn there) give the same losses; only the partitioned job moves sampling bytes."""
    import json

    one = tmp_path / "one.jsonl"
    job = run_commgraph(
        [
            "train",
            str(cora_four),
            "--workers",
            "4",
            *SAMPLED,
            "--metrics-out",
            str(one),
        ]
    )
    assert job.returncode == 0, job.stderr
    two = tmp_path / "two.jsonl"
    for code, stderr in _agents([cora_four, cora_four], 2, *SAMPLED, "--metrics-out", str(two)):
        assert code == 0, stderr
    records = [[json.loads(line) for line in path.read_text().splitlines()] for path in (one, two)]
    assert [r["loss"] for r in records[0]] == pytest.approx([r["loss"] for r in records[1]], rel=1e-6, abs=1e-7)
    assert records[0][-1]["test_acc"] == pytest.approx(records[1][-1]["test_acc"])
    assert all(r["sampling_bytes"] == 0 for r in records[0])
    assert all(r["sampling_bytes"] > 0 and r["structure_bytes"] > r["sampling_bytes"] for r in records[1])


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.timeout(200)
def test_agents_with_different_partition_sets_are_refused(tmp_path):
    from commgraph.cli.main import main

    sets = [tmp_path / "metis", tmp_path / "chunk"]
    for method, out in zip(("metis", "chunk"), sets):
        assert main(["partition", "make", "cora", "--parts", "2", "--method", method, "--out", str(out)]) == 0
    for code, stderr in _agents(sets, 1, *SAMPLED):
        errors = [line for line in stderr.splitlines() if line.startswith("commgraph: error")]
        assert code != 0 and len(errors) == 1, stderr  # one line from the agent's worker
        assert "files differ from rank 0's" in errors[0], stderr
        assert "exitcode  : 2" in stderr  # our exit status for a refusal, as torchrun reports it
        assert "epoch" not in stderr


def test_partitioned_structure_is_a_neighbor_sampler_option(cora_four, capsys):
    from commgraph.cli.main import main

    assert main(["train", str(cora_four), "--workers", "4", "--sampler", "dgs", "--structure", "partitioned"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--structure is an option of --sampler neighbor" in err[0]


@pytest.mark.multiproc  # the launcher forks its zygote before it checks the set
def test_a_set_without_halo_files_is_refused_before_any_worker(cora_four, tmp_path, capsys):
    import shutil

    from commgraph.cli.main import main

    broken = tmp_path / "broken"
    shutil.copytree(cora_four, broken)
    (broken / "part-1" / "halo.npy").unlink()
    assert main(["train", str(broken), "--workers", "4", "--sampler", "neighbor", "--structure", "partitioned"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and "part-1/halo.npy is missing" in err[0] and "rank" not in err[0]
