"""Layer 0 streamed from a host feature store, chunk by chunk, computes the whole table's layer 0:
the same output, the same dropout mask, the same gradients. On a CPU-only machine the store's rows
come from ``index_select``; the chunking, renumbering and recomputation are what is tested."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from commgraph.nn import GNN, Block
from commgraph.nn.model import MODELS
from commgraph.runtime.features import FeatureStore
from commgraph.train import streamed
from commgraph.train.streamed import InputTable, chunk_ends

WIDTH, STORED, OWNED, HALO = 12, 70, 40, 10


def test_chunk_ends_cut_at_the_limit_and_keep_an_oversized_item_alone():
    assert chunk_ends(np.array([3, 3, 3, 10, 1]), 6).tolist() == [2, 3, 4, 5]
    assert chunk_ends(np.array([1] * 10), 4).tolist() == [4, 8, 10]
    assert chunk_ends(np.array([5]), 100).tolist() == [1]
    assert chunk_ends(np.zeros(0, dtype=np.int64), 4).tolist() == [0]


def _store(table: np.ndarray, placement: str) -> FeatureStore:
    """A CPU store; ``host`` marks it as host memory read by a device, which makes layer 0 stream."""
    return FeatureStore(torch.from_numpy(table), torch.device("cpu"), placement, "index_select", "test")


def _blocks(rng: np.random.Generator, degree: torch.Tensor) -> list[Block]:
    """Two bins of a table of OWNED + HALO rows, reading owned and halo rows, with a self loop and
    a duplicate edge; the second bin's destinations start at row 25."""
    blocks = []
    for start, end in ((0, 25), (25, OWNED)):
        dst = rng.integers(0, end - start, 6 * (end - start))
        src = rng.integers(0, OWNED + HALO, dst.shape[0])
        src[:2], dst[:2] = start + 3, 3  # a self loop, twice
        edges = torch.from_numpy(np.stack([src, dst]))
        blocks.append(Block(OWNED + HALO, end - start, edges, degree, start))
    return blocks


@pytest.mark.parametrize("kind", MODELS)
def test_streamed_layer_zero_equals_the_whole_tables(kind, monkeypatch):
    monkeypatch.setattr(streamed, "CHUNK_BYTES", 4 * WIDTH * 30)  # chunks of about 30 input rows
    rng = np.random.default_rng(MODELS.index(kind))
    table = rng.standard_normal((STORED, WIDTH)).astype(np.float32)
    rows = torch.from_numpy(rng.choice(STORED, OWNED, replace=False))
    halo = torch.from_numpy(rng.standard_normal((HALO, WIDTH)).astype(np.float32))
    degree = torch.from_numpy(rng.integers(0, 9, OWNED + HALO).astype(np.float32))
    model = GNN(kind, WIDTH, 8, 3, layers=2, dropout=0.5)
    results = {}
    for placement in ("cpu", "host"):
        inputs = InputTable(_store(table, placement), rows, halo)
        assert inputs.streamed == (placement == "host")
        blocks = _blocks(np.random.default_rng(7), degree)
        model.zero_grad()
        torch.manual_seed(11)  # the same dropout masks
        first = inputs.first_layer(model)
        out = torch.cat([first(block) for block in blocks])
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results[placement] = (
            out.detach(),
            {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None},
        )
        if placement == "host":
            assert all(len(b.cache["streamed"]) > 1 for b in blocks)  # several chunks per bin
    (out_cpu, grads_cpu), (out_host, grads_host) = results["cpu"], results["host"]
    torch.testing.assert_close(out_host, out_cpu, rtol=1e-5, atol=1e-6)
    assert grads_host.keys() == grads_cpu.keys() and grads_cpu
    for name, grad in grads_cpu.items():
        torch.testing.assert_close(grads_host[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_the_streamed_chunks_gather_only_the_rows_they_read(monkeypatch):
    monkeypatch.setattr(streamed, "CHUNK_BYTES", 4 * WIDTH * 4)  # about four input rows per chunk
    degree = torch.ones(OWNED + HALO)
    # destination i reads owned row i + 1 and halo row i (table row OWNED + i)
    dst = torch.arange(HALO).repeat(2)
    src = torch.cat([torch.arange(HALO) + 1, torch.arange(HALO) + OWNED])
    block = Block(OWNED + HALO, HALO, torch.stack([src, dst]), degree, 0)
    rows = torch.arange(OWNED) * 2  # table row r is store row 2r
    inputs = InputTable(_store(np.zeros((STORED + 20, WIDTH), np.float32), "host"), rows, torch.zeros((HALO, WIDTH)))
    inputs.first_layer(GNN("sage", WIDTH, 8, 3, dropout=0.0))(block)
    chunks = block.cache["streamed"]
    assert [c.block.num_dst for c in chunks] == [1] * HALO  # three rows each: over four per two destinations
    for i, chunk in enumerate(chunks):
        assert chunk.stored.tolist() == [2 * i, 2 * (i + 1)] and chunk.extra.tolist() == [i]
        assert chunk.block.dst_start == 0 and chunk.block.edge_index.tolist() == [[1, 2], [0, 0]]
