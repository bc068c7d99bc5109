"""Test helper run as each rank of a 2-rank job (``launch_forked(..., module="pyg_loader_dgs_driver")``):
a PyG GraphSAGE loop over ``commgraph.pyg.NeighborLoader(..., sampler="dgs")`` batches on Cora,
the model in ``DistributedDataParallel``, DGS's masks read from a mask file.

Usage: ``python -m pyg_loader_dgs_driver OUT``. Part ``k``'s masks are drawn from seed ``k``
(:func:`masks_of`): half the nodes' probabilities 0, a random feature mask. Every rank writes the
same mask file, ``OUT/masks<r>.npz``, and reads its own part's masks from it. Rank r writes
``OUT/rank<r>.json``: per batch of the first epoch its ``n_id``, batch size, edges (global ids),
whether each remote row of ``x`` is the feature row with DGS's dropped columns zero and every other
row the feature row; the seeds of its own batches; the global mean loss of each epoch; and the
parameters after training.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GraphSAGE

import commgraph.pyg as cg
from commgraph.graph import load_graph
from commgraph.graph.pyg import to_pyg
from commgraph.pyg.data import handle_of
from commgraph.sample.dgs import DGSMasks
from commgraph.sample.maskfile import save_masks

FEATURE_RATE = 0.25


def masks_of(part: int, num_nodes: int, width: int) -> DGSMasks:
    rng = np.random.default_rng(part)
    return DGSMasks((rng.random(num_nodes) * (rng.random(num_nodes) < 0.5)).astype(np.float32), rng.random(width))


def rows_ok(batch, data, owner: np.ndarray, masks: DGSMasks) -> bool:
    """Remote rows: the feature rows, cut to DGS's columns; local rows: the feature rows."""
    wanted = data.x[batch.n_id].clone()
    remote = torch.from_numpy(owner[batch.n_id.numpy()] != cg.rank())
    cut = torch.ones(data.num_features, dtype=torch.bool)
    cut[torch.from_numpy(masks.feature_columns(FEATURE_RATE))] = False
    wanted[remote.nonzero()[:, 0][:, None], cut.nonzero()[:, 0]] = 0
    return bool(torch.equal(batch.x, wanted))


def main() -> None:
    out = Path(sys.argv[1])
    torch.set_num_threads(1)
    cg.init(timeout=60, device="cpu")
    data = to_pyg(load_graph("cora"))
    pset = handle_of(cg.partition(data)).pset
    owner = np.asarray(pset.assignment())
    masks = [masks_of(k, data.num_nodes, data.num_features) for k in range(pset.num_parts)]
    path = out / f"masks{cg.rank()}.npz"
    save_masks(path, pset, masks)
    loader = cg.NeighborLoader(
        data,
        num_neighbors=[5, 3],
        batch_size=16,
        input_nodes=data.train_mask,
        shuffle=True,
        sampler="dgs",
        dgs_masks=path,
        feature_rate=FEATURE_RATE,
    )
    torch.manual_seed(cg.rank())  # different on each rank: DDP starts every rank from rank 0's
    model = DistributedDataParallel(GraphSAGE(data.num_features, 32, 2, 7))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    batches, losses = [], []
    for epoch in range(8):
        total = 0.0
        for batch in loader:
            optimizer.zero_grad()
            logits = model(batch.x, batch.edge_index)[: batch.batch_size]
            loss = cg.global_mean(F.cross_entropy(logits, batch.y[: batch.batch_size], reduction="none"))
            loss.backward()
            optimizer.step()
            total += float(loss)
            if epoch == 0:
                batches.append(
                    {
                        "n_id": batch.n_id.tolist(),
                        "batch_size": batch.batch_size,
                        "edges": batch.n_id[batch.edge_index].tolist(),
                        "local_max": int(batch.edge_index.max()) if batch.edge_index.numel() else -1,
                        "rows_ok": rows_ok(batch, data, owner, masks[cg.rank()]),
                    }
                )
        losses.append(total / len(loader))
    result = {
        "batches": batches,
        "seeds": loader.seeds.tolist(),
        "losses": losses,
        "node_prob": masks[cg.rank()].node_prob.tolist(),
        "owner": owner.tolist(),
        "parameters": torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist(),
    }
    (out / f"rank{cg.rank()}.json").write_text(json.dumps(result))
    cg.shutdown()


if __name__ == "__main__":
    main()
