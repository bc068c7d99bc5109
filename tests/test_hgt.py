"""Built-in HGT (commgraph.nn.hgt, ``commgraph train --model hgt``): a layer equal to PyG's
``HGTConv`` on the same weights, values and gradients, on a whole graph and on a block of one
type's rows; bad options refused in one line. Its losses at 2 and 4 workers equal one worker's in
``tests/test_rgcn.py`` (one job per worker count for both models)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.nn import HGTConv

from commgraph.errors import TrainingError
from commgraph.nn.hgt import HGTBlock, HGTLayer
from commgraph.train import TrainConfig

TYPES = ["a", "b"]
RELATIONS = [("a", "x", "b"), ("b", "y", "a"), ("a", "z", "a")]
COUNTS = {"a": 7, "b": 5}
WIDTH, HEADS = 8, 2


def _pair() -> tuple[HGTConv, HGTLayer]:
    """PyG's layer with random weights (its prior and skip too), and ours holding the same."""
    torch.manual_seed(0)
    pyg = HGTConv(WIDTH, WIDTH, (TYPES, RELATIONS), heads=HEADS)
    with torch.no_grad():
        for param in pyg.parameters():
            param.uniform_(-0.5, 0.5)
    ours = HGTLayer(WIDTH, len(TYPES), len(RELATIONS), HEADS)
    d = WIDTH // HEADS
    with torch.no_grad():
        for i, t in enumerate(TYPES):
            for mine, theirs in ((ours.kqv[i], pyg.kqv_lin.lins[t]), (ours.out[i], pyg.out_lin.lins[t])):
                mine.weight.copy_(theirs.weight)
                mine.bias.copy_(theirs.bias)
            ours.skip[i] = pyg.skip[t]
        for name in ("k_rel", "v_rel"):  # PyG's type h * R + r: head h of relation r
            getattr(ours, name).copy_(getattr(pyg, name).weight.view(HEADS, len(RELATIONS), d, d).transpose(0, 1))
        for r, relation in enumerate(RELATIONS):
            ours.p_rel[r] = pyg.p_rel["__".join(relation)][0]
    return pyg, ours


def _graph() -> tuple[dict, dict, torch.Tensor, HGTBlock]:
    """A typed graph as PyG's dicts, and as one table (a's rows, then b's) and its block."""
    g = torch.Generator().manual_seed(1)
    x = {t: torch.randn(n, WIDTH, generator=g) for t, n in COUNTS.items()}
    edges = {
        r: torch.stack(
            [torch.randint(0, COUNTS[r[0]], (12,), generator=g), torch.randint(0, COUNTS[r[2]], (12,), generator=g)]
        )
        for r in RELATIONS
    }
    offset = {"a": 0, "b": COUNTS["a"]}
    src = np.concatenate([edges[r][0].numpy() + offset[r[0]] for r in RELATIONS])
    dst = np.concatenate([edges[r][1].numpy() + offset[r[2]] for r in RELATIONS])
    relation = np.repeat(np.arange(len(RELATIONS)), 12)
    order = np.lexsort((src, dst))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst[order], minlength=sum(COUNTS.values())))])
    row_type = np.repeat([0, 1], [COUNTS["a"], COUNTS["b"]])
    block = HGTBlock.from_csr(indptr, src[order], relation[order], row_type, len(RELATIONS))
    return x, edges, torch.cat([x["a"], x["b"]]), block


def test_a_layer_equals_pygs_hgtconv_and_its_gradients():
    pyg, ours = _pair()
    x, edges, table, block = _graph()
    x = {t: v.clone().requires_grad_() for t, v in x.items()}
    table = table.clone().requires_grad_()
    want, got = pyg(x, edges), ours(table, table, block)
    torch.testing.assert_close(got, torch.cat([want["a"], want["b"]]), rtol=1e-5, atol=1e-6)
    (torch.cat([want["a"], want["b"]]) ** 2).sum().backward()
    (got**2).sum().backward()
    torch.testing.assert_close(table.grad, torch.cat([x["a"].grad, x["b"].grad]), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.k_rel.grad, pyg.k_rel.weight.grad.view(HEADS, 3, 4, 4).transpose(0, 1))
    torch.testing.assert_close(ours.p_rel.grad[0], pyg.p_rel["a__x__b"].grad[0])
    b = slice(COUNTS["a"], None)
    with torch.no_grad():  # the rows of type b alone, from a block of their in-edges
        torch.testing.assert_close(ours(table, table[b], block.rows(b.start, table.shape[0])), want["b"])


def test_bad_hgt_options_are_refused():
    with pytest.raises(TrainingError, match="hidden 10 into heads 4"):
        TrainConfig.build(model="hgt", hidden=10, heads=4)
    with pytest.raises(TrainingError, match="drop sampler neighbor"):
        TrainConfig.build(model="hgt", sampler="neighbor")
    with pytest.raises(TrainingError, match="bases is rgcn's"):
        TrainConfig.build(model="hgt", bases=2)
    with pytest.raises(TrainingError, match="heads that divide"):
        HGTLayer(10, 2, 3, heads=4)


@pytest.mark.multiproc
def test_the_docs_block_runs(tmp_path, monkeypatch):
    """docs/heterogeneous.md's "Train HGT": its command (a plain ``bash`` block, run here rather
    than by test_docs's page run, to keep that within its time) runs as written and the model learns."""
    import re
    from pathlib import Path

    from forked import run_commgraph

    page = Path(__file__).parent.parent / "docs" / "heterogeneous.md"
    section = page.read_text().split("## Train HGT", 1)[1].split("\n## ", 1)[0]
    (command,) = re.findall(r"^```bash(?: runnable)?\n(.*?)^```$", section, re.S | re.M)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COMMGRAPH_HOME", str(tmp_path / "home"))
    result = run_commgraph(command.split()[1:])
    assert result.returncode == 0, result.stderr[-2000:]
    assert float(re.search(r"test accuracy ([\d.]+)", result.stdout).group(1)) > 0.05  # 349 classes: chance 0.003
