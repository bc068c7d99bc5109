"""``Traffic`` (:mod:`commgraph.runtime.traffic`): a communicator's per-label byte counts as named
counters that add, subtract and sum over the workers."""

from __future__ import annotations

import pytest

from commgraph.errors import JobError
from commgraph.runtime import Communicator, World
from commgraph.runtime.traffic import Traffic, global_traffic


def test_labels_become_fields_and_forward_rows_a_tuple_by_layer():
    traffic = Traffic.from_counts(
        {"halo_forward:2": 30, "halo_backward": 7, "features": 5, "requests": 3, "link_forward": 11, "other": 1}
    )
    assert traffic == Traffic(halo_forward=(0, 0, 30), halo_backward=7, features=5, requests=3, other=12)
    assert traffic.network == 30 + 7 + 5 + 3 + 12
    assert Traffic(local=9).network == 0
    assert Traffic.from_counts({}) == Traffic()
    assert Traffic.from_counts({"labels": 16}) == Traffic(labels=16)  # the bridge's rows of y and the masks


def test_traffic_adds_and_subtracts_counter_by_counter():
    a = Traffic(halo_forward=(1, 2), allreduce=10, local=4)
    b = Traffic(halo_forward=(5,), allreduce=3, sampling=2)
    assert a + b == Traffic(halo_forward=(6, 2), allreduce=13, sampling=2, local=4)
    assert (a + b) - b == Traffic(halo_forward=(1, 2), allreduce=10, local=4)
    assert a.layers(4).halo_forward == (1, 2, 0, 0)
    with pytest.raises(JobError, match="rows moved at 2 layers, more than the model's 1"):
        a.layers(1)


def test_a_communicator_reads_its_counts_as_traffic_and_sums_them_over_one_worker():
    comm = Communicator(World.alone())
    comm.bytes["halo_forward:1"] += 64
    comm.bytes["activations"] += 16
    before = comm.traffic
    comm.bytes["activations"] += 8
    assert comm.traffic - before == Traffic(halo_forward=(0, 0), activations=8)
    assert global_traffic(comm, comm.traffic, 3) == Traffic(halo_forward=(0, 64, 0), activations=24)
