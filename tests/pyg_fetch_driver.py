"""Test helper run as each rank of a job (``launch_forked(..., module="pyg_fetch_driver")``): PyG
models trained on Cora from ``commgraph.pyg.NeighborLoader`` batches of a part, whose rows of ``x``
come through the feature fetch.

Usage: ``python -m pyg_fetch_driver OUT owner`` (2 ranks): a GCN and a GraphSAGE, each trained
twice on every rank's network rows (``peer_rows="network"``), with ``first_layer="features"``
and ``"owner"``, fanout -1 and dropout 0; rank r writes ``OUT/rank<r>.json`` with, per model and
mode, the global loss of each step and the bytes the loader sent; then the error a GCN raises when
its first layer gets a batch's ``x`` after dropout.

``python -m pyg_fetch_driver OUT machines M`` (any number of ranks, in M emulated machines of
consecutive ranks: torchrun's ``GROUP_RANK``): a GraphSAGE trained from batches of the set,
fanout 4, 4; rank r writes ``OUT/rank<r>.json`` with the losses, the loader's bytes, and whether
every batch's ``x``, ``y`` and masks held the graph's rows of ``n_id``.

``python -m pyg_fetch_driver OUT structure M``: the same, from the set's whole ``structure/`` and
from the machine's parts (``structure="partitioned"``), with fanouts -1, -1 and 4, 4; rank r writes,
per fanout and structure, each batch's ``n_id``, ``edge_index`` and a digest of ``x``, the losses,
whether every row was the graph's, the bytes, and the ``structure/`` files the set mapped; and the
same for fanout 4, 4 under a memory budget that caches a quarter of each part's rows, with the
feature cache's counts.
"""

import hashlib
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import GCN, GraphSAGE

import commgraph.pyg as cg
from commgraph.errors import BridgeError
from commgraph.graph import load_graph
from commgraph.graph.core import MASK_NAMES
from commgraph.graph.pyg import to_pyg

HIDDEN = 8


def train(model, loader, epochs: int, check=None) -> list[float]:
    """PyG's sampled loop, the loss the global mean over every rank's seeds; each step's loss."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(epochs):
        for batch in loader:
            if check is not None:
                check(batch)
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            loss = cg.global_mean(F.cross_entropy(out, batch.y[: batch.batch_size], reduction="none"))
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
    return losses


def owner(data, part) -> dict:
    result = {}
    for name, kind in (("gcn", GCN), ("sage", GraphSAGE)):
        for first_layer in ("features", "owner"):
            loader = cg.NeighborLoader(
                part,
                num_neighbors=[-1, -1],
                batch_size=48,
                input_nodes=part.n_id[part.train_mask],
                shuffle=True,
                first_layer=first_layer,
                peer_rows="network",
            )
            torch.manual_seed(0)
            model = DistributedDataParallel(cg.sampled(kind(data.num_features, HIDDEN, 2, 7, dropout=0.0), loader))
            losses = train(model, loader, 2)
            result[f"{name}/{first_layer}"] = {"losses": losses, "bytes": loader.bytes}
    loader = cg.NeighborLoader(part, num_neighbors=[-1], batch_size=48, first_layer="owner", peer_rows="network")
    model = cg.sampled(GCN(data.num_features, HIDDEN, 1, 7), loader)
    batch = next(iter(loader))
    try:  # dropout before the first layer: its rows are not the ones the owners transform
        model(F.dropout(batch.x, 0.5), batch.edge_index)
    except BridgeError as error:
        result["refused"] = str(error)
    return result


def graph_rows(batch, data) -> bool:
    """Whether the batch's x, y and masks are the graph's rows of its n_id."""
    keys = ("x", "y", *MASK_NAMES)
    return all(bool(torch.equal(batch[key], data[key][batch.n_id])) for key in keys)


def machines(data, part, epochs: int = 2, **options) -> dict:
    loader = cg.NeighborLoader(
        str(part_path(part)),
        batch_size=24,
        input_nodes=data.train_mask,
        shuffle=True,
        **{"num_neighbors": [4, 4], **options},
    )
    exact, batches = [], []

    def check(batch):
        exact.append(graph_rows(batch, data))
        digest = hashlib.sha256(batch.x.numpy().tobytes()).hexdigest()
        batches.append([batch.n_id.tolist(), batch.edge_index.tolist(), digest])

    torch.manual_seed(0)
    model = DistributedDataParallel(GraphSAGE(data.num_features, HIDDEN, 2, 7, dropout=0.0))
    losses = train(model, loader, epochs, check)
    return {
        "losses": losses,
        "bytes": loader.bytes,
        "traffic": loader.traffic.network,
        "global": loader.global_traffic().network,  # every rank's, summed in one all-reduce
        "exact": exact,
        "machine": loader.machine is not None,
        "batches": batches,
        "structure": loader.structure,
        "mapped": sorted(loader.handle.pset._structure),
        "cache": None if loader.cache is None else vars(loader.cache),
    }


def structures(data, part) -> dict:
    result = {
        f"{fanout}/{structure}": machines(data, part, 1, num_neighbors=[fanout, fanout], structure=structure)
        for fanout in (-1, 4)
        for structure in ("replicated", None)
    }
    roomy = cg.NeighborLoader(str(part_path(part)), num_neighbors=[4, 4], batch_size=24, memory_budget=10**13)
    budget = roomy.estimate.minimum_bytes + 4 * data.num_features * data.num_nodes // 4  # a quarter of a part cached
    result["4/budget"] = machines(data, part, 1, num_neighbors=[4, 4], memory_budget=budget)
    return result


def part_path(part) -> Path:
    from commgraph.pyg.data import handle_of

    return handle_of(part).pset.path


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    if mode in ("machines", "structure"):
        per_machine = int(os.environ["WORLD_SIZE"]) // int(sys.argv[3])
        os.environ["GROUP_RANK"] = str(int(os.environ["RANK"]) // per_machine)
    torch.set_num_threads(1)
    cg.init(timeout=60, device="cpu")
    data = to_pyg(load_graph("cora"))
    part = cg.partition(data)
    result = {"owner": owner, "machines": machines, "structure": structures}[mode](data, part)
    (out / f"rank{cg.rank()}.json").write_text(json.dumps(result))
    cg.shutdown()


if __name__ == "__main__":
    main()
