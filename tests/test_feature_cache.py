"""The feature cache under a memory budget: hot rows by degree, a batch's missing rows read sorted
in coalesced runs, read ahead on a thread, fp16 files widened on read; every value the file's."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from commgraph.errors import FeatureError
from commgraph.plan.memory import estimate_memory
from commgraph.runtime.feature_cache import FeatureCache, coalesce, hot_rows
from commgraph.runtime.features import FeatureStore, gathered
from commgraph.train.config import TrainConfig
from commgraph.train.shape import job_shape
from forked import run_commgraph


@pytest.fixture
def table(tmp_path):
    values = np.random.default_rng(0).standard_normal((500, 24)).astype(np.float32)
    np.save(tmp_path / "x.npy", values)
    return values, np.load(tmp_path / "x.npy", mmap_mode="r")


def test_runs_merge_rows_at_most_gap_apart():
    rows = np.array([1, 2, 3, 10, 11, 30])
    runs = coalesce(rows, 0)
    assert runs.first.tolist() == [1, 10, 30] and runs.last.tolist() == [3, 11, 30]
    runs = coalesce(rows, 6)
    assert runs.first.tolist() == [1, 30] and runs.last.tolist() == [11, 30]
    assert coalesce(rows[:0], 4).first.shape == (0,)


def test_hot_rows_are_the_highest_degrees_lower_id_first_on_ties():
    assert hot_rows(np.array([5, 1, 9, 5, 0]), 3).tolist() == [0, 2, 3]
    assert hot_rows(np.array([5, 1]), 0).tolist() == [] and hot_rows(np.array([5, 1]), 9).tolist() == [0, 1]


def test_reads_are_the_files_values_and_each_run_is_one_request(table):
    values, mapped = table
    cache = FeatureCache(mapped, hot=np.arange(0, 500, 5), gap=2)
    rows = np.array([7, 3, 3, 8, 0, 499, 9, 100, 120, 8])
    got = cache.read(rows)
    assert got.dtype == torch.float32 and torch.equal(got, torch.from_numpy(values[rows]))
    counts = cache.counts_now()
    # distinct rows 0 3 7 8 9 100 120 499: hot 0 100 120; cold 3 7 8 9 499 in runs 3, 7-9, 499
    assert (counts.hits, counts.misses) == (3, 5)
    assert counts.missed_bytes == 5 * 24 * 4
    assert counts.requested_bytes == 100 * 24 * 4 + (1 + 3 + 1) * 24 * 4  # the hot rows' one read, then the runs
    cache.close()


def test_a_batch_read_ahead_is_served_from_its_stage_and_counted_once(table):
    values, mapped = table
    cache = FeatureCache(mapped, hot=np.array([1, 2]))
    batch = np.array([40, 1, 41, 300])
    cache.prefetch(batch)
    cache.advance()
    before = cache.counts_now()
    assert (before.hits, before.misses) == (1, 3)
    for _ in range(2):  # a chunk read twice (checkpointing reads it again) reads nothing new
        assert torch.equal(cache.read(batch[::-1]), torch.from_numpy(values[batch[::-1]]))
    assert cache.counts_now() == before
    cache.prefetch(np.array([5]))
    cache.advance()
    after = cache.counts_now()
    assert (after.hits, after.misses, after.requested_bytes) == (1, 4, before.requested_bytes + 24 * 4)
    assert torch.equal(cache.read(np.array([5])), torch.from_numpy(values[[5]]))
    cache.close()


def test_a_float16_file_is_widened_on_read(tmp_path, table):
    values = table[0].astype(np.float16)
    np.save(tmp_path / "h.npy", values)
    cache = FeatureCache(np.load(tmp_path / "h.npy", mmap_mode="r"), hot=np.array([4]))
    rows = np.array([4, 17, 16, 400])
    assert torch.equal(cache.read(rows), torch.from_numpy(values[rows].astype(np.float32)))
    assert cache.counts_now().missed_bytes == 3 * 24 * 2
    cache.close()


def test_a_disk_store_gathers_through_its_cache(table):
    values, mapped = table
    store = FeatureStore.on_disk(mapped, torch.device("cpu"), cache_bytes=10 * 24 * 4, degree=np.arange(500))
    assert (store.placement, store.method, store.cache.hot.tolist()) == ("disk", "cache", list(range(490, 500)))
    rows = torch.tensor([499, 3, 3])
    assert torch.equal(gathered(store, rows), torch.from_numpy(values[[499, 3, 3]]))
    assert "10 rows of highest degree (2%)" in store.describe()
    store.cache.close()


def test_bad_tables_and_rows_are_refused(table, tmp_path):
    values, mapped = table
    with pytest.raises(FeatureError, match="np.load"):
        FeatureCache(values, hot=np.zeros(0, np.int64))
    np.save(tmp_path / "i.npy", np.zeros((3, 2), np.int32))
    with pytest.raises(FeatureError, match="float32 or float16"):
        FeatureCache(np.load(tmp_path / "i.npy", mmap_mode="r"), hot=np.zeros(0, np.int64))
    with pytest.raises(FeatureError, match="hot rows must lie in 0..499"):
        FeatureCache(mapped, hot=np.array([500]))
    cache = FeatureCache(mapped, hot=np.zeros(0, np.int64))
    with pytest.raises(FeatureError, match="row ids must lie in 0..499"):
        cache.read(np.array([-1]))
    cache.close()


def _losses(partdir, out, *options):
    job = run_commgraph(
        ["train", str(partdir), "--metrics-out", str(out), "--quiet", "--timeout", "60", *TRAIN, *options]
    )
    assert job.returncode == 0, job.stderr
    return [json.loads(line) for line in out.read_text().splitlines()], job.stderr


TRAIN = ("--sampler", "neighbor", "--fanout", "5,5", "--batch-size", "64", "--hidden", "16", "--epochs", "2")


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_losses_under_a_budget_equal_the_uncapped_runs_bit_for_bit(cora_set, tmp_path):
    """Two workers on a float32 set: one run holds every feature row, the other reads a quarter
    of each part's rows from the cache and the rest from the files, read ahead a batch; the
    losses are the same floats."""
    config = TrainConfig.build(sampler="neighbor", fanouts=(5, 5), batch_size=64, hidden=16, memory_budget=1)
    estimate = estimate_memory(cora_set, job_shape(config, cora_set, 2))
    table = 4 * 1433 * max(cora_set.part(k).num_owned for k in range(2))
    budget = estimate.minimum_bytes + table  # a quarter of a table cached on each of the two workers
    plain, _ = _losses(cora_set.path, tmp_path / "plain.jsonl")
    capped, _ = _losses(cora_set.path, tmp_path / "capped.jsonl", "--memory-budget", str(budget))
    assert [r["loss"] for r in capped] == [r["loss"] for r in plain]
    assert all(r["cache_hits"] > 0 and r["cache_misses"] > 0 for r in capped)
    assert all(r["cache_missed_bytes"] == 4 * 1433 * r["cache_misses"] for r in capped)
    assert plain[0]["cache_hits"] is None


def test_a_set_stores_its_features_as_float16_when_asked(tmp_path):
    from commgraph.errors import PartitionError
    from commgraph.graph import load_graph
    from commgraph.partition import partition_graph, partition_metrics, write_partition_set

    graph = load_graph("cora")
    assignment, _ = partition_graph(graph, 2, "chunk", 0)
    metrics = partition_metrics(graph, assignment, 2)
    made = write_partition_set(
        graph,
        assignment,
        2,
        tmp_path / "h",
        method="chunk",
        seed=0,
        seconds=0.0,
        metrics=metrics,
        feature_dtype="float16",
    )
    part = made.part(1)
    assert part.features.dtype == np.float16 and part.labels.dtype == graph.labels.dtype
    assert np.array_equal(part.features, graph.features[part.owned].astype(np.float16))
    assert made.manifest["arrays"]["part-1/features.npy"]["dtype"] == "<f2"
    with pytest.raises(PartitionError, match="unknown feature dtype 'int8'; choose one of float32, float16"):
        write_partition_set(
            graph,
            assignment,
            2,
            tmp_path / "i",
            method="chunk",
            seed=0,
            seconds=0.0,
            metrics=metrics,
            feature_dtype="int8",
        )
