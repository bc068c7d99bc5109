"""PyG's published distributed speed-up predicted on paper: ``torch_geometric.distributed`` states
that GraphSAGE on ogbn-products trains an epoch in 98 s on 1 CPU node and in 22 s on 16 (4.45x).
This script predicts both with ``commgraph train --dry-run`` (issue 53's target: the predicted
1-to-16 speed-up within +-25% of 4.45x) and prints them beside PyG's.

Inputs assumed (each printed with the result; PyG states the dataset, the model and the node
count, and its example ``examples/distributed/pyg/node_ogb_cpu.py`` the rest):

- **graph**: a products-sized R-MAT stand-in (ogbn-products itself is not downloaded here):
  2,449,029 nodes, 61,859,140 undirected edges, 100 features, 47 classes, a 10% training split
  (ogbn-products: 8%, 196,615 nodes); R-MAT, because products' degrees are skewed as R-MAT's are;
- **model**: GraphSAGE, 3 layers, hidden 256, fanouts 15,10,5, batches of 1,024 seeds
  (``node_ogb_cpu.py``'s defaults);
- **nodes**: one worker a node, ``--threads`` compute threads (default 32), each thread as fast as
  one of this machine's (the cost model is this machine's, ``--cost-model``: made by ``commgraph
  topo calibrate --workers 2`` under ``--work-dir`` when absent);
- **network**: every node on one non-blocking Ethernet switch of ``--network-gbits`` (default 25)
  per node; a batch's rows owned by other nodes cross it (15 of 16 at 16 nodes);
- **partition**: ``chunk`` (the prediction reads its parts' training counts and the batch measured
  on the whole structure, not its cut).

The topologies are written as YAML under ``--work-dir`` (one host for 1 node, 16 hosts joined by
:func:`~commgraph.topology.presets.join_hosts`), and the partition sets made there on first use
(about 3 GB each; a few minutes). Run it under the benchmark lock::

    python benchmarks/pyg_products_speedup.py --work-dir WORK
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from commgraph.topology import load_preset, write_yaml
from commgraph.topology.presets import join_hosts

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_time import _commgraph, calibrated  # noqa: E402

PRODUCTS = "rmat:nodes=2449029,edges=61859140,features=100,classes=47,seed=0"
MODEL = ("--model", "sage", "--layers", "3", "--hidden", "256", "--fanout", "15,10,5", "--batch-size", "1024")
PYG_SECONDS = {1: 98.0, 16: 22.0}
TARGET = 0.25


def cluster(nodes: int, network_gbits: float) -> object:
    """``nodes`` CPU machines of one worker each on one Ethernet switch of ``network_gbits`` a node."""
    hosts = [(f"node{i}", load_preset("localhost-cpu:1")) for i in range(nodes)]
    topology = join_hosts(hosts, "eth")
    network = [
        replace(link, bandwidth_gbps=network_gbits / 8) if "netswitch" in (link.a, link.b) else link
        for link in topology.links
    ]
    return replace(topology, links=network)


def predict(nodes: int, args, cost: Path) -> dict:
    """The dry run's step time of the job on ``nodes`` nodes."""
    topology = args.work_dir / f"cpu-nodes-{nodes}.yaml"
    write_yaml(cluster(nodes, args.network_gbits), topology)
    out = _commgraph(
        args.python,
        "train",
        args.graph,
        "--workers",
        str(nodes),
        "--partition",
        "chunk",
        "--partition-dir",
        str(args.work_dir / f"{args.graph.split(':')[0]}-{nodes}"),
        *MODEL,
        "--sampler",
        "neighbor",
        "--topology",
        str(topology),
        "--cost-model",
        str(cost),
        "--threads",
        str(args.threads),
        "--timeout",
        "1800",  # generating and partitioning 124M edges outlasts a phase's default 120 s
        "--dry-run",
        "--json",
    )
    return json.loads(out)["step_time"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", type=Path, default=Path("pyg-products-work"), help="sets, topologies")
    parser.add_argument("--graph", default=PRODUCTS, help="the graph (default: the products-sized stand-in)")
    parser.add_argument("--threads", type=int, default=32, help="compute threads of a node's worker (default 32)")
    parser.add_argument("--network-gbits", type=float, default=25.0, help="each node's network, Gbit/s (default 25)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs commgraph")
    args = parser.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    cost = calibrated(args.work_dir, 2, args.python)
    print(f"graph {args.graph}; {' '.join(MODEL)}; --sampler neighbor")
    print(f"one worker a node, {args.threads} threads; {args.network_gbits:g} Gbit/s Ethernet; cost model {cost}")
    predicted = {}
    for nodes in PYG_SECONDS:
        step = predict(nodes, args, cost)
        predicted[nodes] = step["epoch_seconds"]
        parts = ", ".join(
            f"{p} {step[f'{p}_seconds'] * 1e3:.1f}"
            for p in ("compute", "sampling", "feature_fetch", "halo_exchange", "allreduce")
        )
        print(
            f"{nodes:>2} node(s): {step['epoch_seconds']:.1f} s an epoch predicted ({step['steps_per_epoch']} steps "
            f"of {step['step_seconds'] * 1e3:.1f} ms: {parts} ms); PyG: {PYG_SECONDS[nodes]:g} s"
        )
    ours, theirs = predicted[1] / predicted[16], PYG_SECONDS[1] / PYG_SECONDS[16]
    verdict = "met" if abs(ours / theirs - 1) <= TARGET else "missed"
    print(
        f"speed-up 1 -> 16 nodes: predicted {ours:.2f}x, PyG {theirs:.2f}x "
        f"({ours / theirs - 1:+.0%}; target within +-{TARGET:.0%}: {verdict})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
