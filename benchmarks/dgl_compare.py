"""commgraph's PyG bridge against DGL 2.1 by the baseline protocol (``benchmarks/protocol.py``), one
process each: link prediction (issue 51), R-GCN (issue 52) and node classification (issue 58).

Both run in their own interpreter, DGL's in the environment ``benchmarks/dgl_baseline.py`` makes
(``--dgl-env DIR`` or ``$COMMGRAPH_DGL_ENV``, else ``.bench-envs/dgl``; made on first use), on one
graph file written once under ``--work-dir``, alternately A (DGL) then B (commgraph) for ``--pairs``
pairs, ``--threads`` threads each, ``--warmup`` steps excluded and ``--steps`` measured on both
sides, under the whole-tree PSS sampler:

- ``link``: ``benchmarks/dgl_link.py`` (DGL's ``link_pred.py`` recipe: ``as_edge_prediction_sampler``
  over ``NeighborSampler``, ``exclude="reverse_id"``, ``negative_sampler.Uniform(1)``) against
  ``benchmarks/cg_link.py`` (``cg.LinkNeighborLoader`` with ``neg_sampling_ratio=1.0``), GraphSAGE
  of ``--fanout``'s layer count, hidden ``--hidden``, a dot-product decoder, Adam; ``--batch-size``
  label edges a batch, each undirected edge of the graph once a label edge. The graph (default the
  products-sized SBM) as ``dgl_baseline.py`` writes it, ``.npz`` and a 1-part chunk set. Rate:
  label edges per second; targets >= 0.8x DGL's at <= 1.0x its peak.
- ``rgcn``: ``benchmarks/dgl_rgcn.py`` (DGL's rgcn-hetero mini-batch recipe: ``RelGraphConvLayer``
  of ``HeteroGraphConv``, ``NeighborSampler``) against ``benchmarks/cg_rgcn.py`` (the same layer
  in PyG's ``SAGEConv``, ``cg.NeighborLoader`` on a ``HeteroData``); the ``mag-shaped`` graph at
  ``--graph``'s scale written once as ``benchmarks/hetero_file.py``'s file; ``--batch-size``
  training papers a batch. Rate: seeds per second; the same targets.
- ``node``: ``benchmarks/dgl_train.py FILE.npz train`` (DGL's node-classification recipe, as
  ``benchmarks/dgl_baseline.py`` runs it) against ``benchmarks/cg_node.py`` (a PyG user's loop:
  ``cg.NeighborLoader`` over the training nodes, PyG's ``SAGEConv`` wrapped by ``cg.sampled(...,
  trim=True)``; with ``--whole-batch``, run on the whole batch unwrapped), GraphSAGE mean of
  ``--fanout``'s layer count, hidden ``--hidden``, ReLU and dropout 0.5, Adam lr 0.01 weight decay
  5e-4; the graph as for ``link``; ``--batch-size`` training nodes a batch. Rate: seeds per second;
  targets >= 1.2x DGL's at <= 0.8x its peak.

``--fanout`` is in DGL's order (the first GNN layer's first); the commgraph scripts reverse it.

    python benchmarks/dgl_compare.py link|rgcn|node [--graph SPEC] [--pairs 3] [--threads 2] [--warmup 3]
        [--steps 20] [--fanout F] [--hidden H] [--batch-size 1024] [--work-dir DIR] [--dgl-env DIR]
        [--json-out FILE] [--cap-gb G] [--time-limit S] [--whole-batch]

Run it under ``flock`` (the machine is shared): each pair loads the graph twice.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from dgl_baseline import ENV_VARIABLE, commgraph_fanout, ensure_env, env_python, graph_files, prepare  # noqa: E402
from hetero_file import HeteroArrays  # noqa: E402
from memory_scenarios import PRODUCTS  # noqa: E402
from protocol import Setup, Side, json_rate, report, run_pairs, threads_env  # noqa: E402
from pss import GB, commgraph_env  # noqa: E402

DEFAULTS = {  # per task: graph, fanout (DGL's order), hidden
    "link": (PRODUCTS, "15,10", 256),
    "rgcn": ("mag-shaped:scale=0.1,seed=0", "25,20", 64),
    "node": (PRODUCTS, "15,10,5", 256),
}
TARGETS = {"link": (0.8, 1.0), "rgcn": (0.8, 1.0), "node": (1.2, 0.8)}  # speed at least, memory at most
DGL_SCRIPTS = {"link": ["dgl_link.py"], "rgcn": ["dgl_rgcn.py"], "node": ["dgl_train.py", "train"]}


def write_hetero(spec: str, work: Path) -> Path:
    """The heterogeneous graph ``spec`` as :class:`hetero_file.HeteroArrays`' file, written once."""
    path, _ = graph_files(spec, work)
    if not path.exists():
        from commgraph.graph import load_graph

        graph = load_graph(spec)
        relations = {key: (r.indptr, r.indices) for key, r in graph.relations.items()}
        arrays = HeteroArrays(graph.num_nodes, relations, graph.features, graph.target, graph.labels, graph.train_mask)
        arrays.save(path)
    return path


def sides(opts) -> tuple[Side, Side, Setup]:
    """DGL's side and commgraph's, and what they share."""
    common = ["--warmup", str(opts.warmup), "--steps", str(opts.steps), "--fanout", opts.fanout]
    common += ["--hidden", str(opts.hidden), "--batch-size", str(opts.batch_size)]
    layers = len(opts.fanout.split(","))
    if opts.task in ("link", "node"):
        npz, partdir = prepare(opts.graph, opts.work_dir, sys.executable)
        dgl_file, ours_file, ours_graph = npz, partdir, f"its 1-part chunk set {partdir.name}"
    if opts.task == "link":
        model = f"GraphSAGE mean, {layers} layers, hidden {opts.hidden}, dot-product decoder"
        seeds = "each undirected edge once (source < destination) and 1 uniform negative per edge"
        batch = f"{opts.batch_size} label edges + as many negatives"
    elif opts.task == "node":
        model = f"GraphSAGE mean, {layers} layers, hidden {opts.hidden}, ReLU and dropout 0.5"
        model += "; commgraph's on the whole batch" if opts.whole_batch else "; commgraph's trimmed (cg.sampled)"
        seeds = "the training nodes"
        batch = f"{opts.batch_size} seeds"
    else:
        dgl_file = ours_file = write_hetero(opts.graph, opts.work_dir)
        ours_graph = "the same file"
        model = f"R-GCN ({layers} layers, hidden {opts.hidden}, self loop, no basis)"
        model += ", learnable embeddings for featureless types"
        seeds = "the target type's training nodes"
        batch = f"{opts.batch_size} seeds"
    script, *verb = DGL_SCRIPTS[opts.task]
    dgl = Side(
        f"dgl-{opts.task}",
        [str(env_python()), str(HERE / script), str(dgl_file), *verb, *common],
        json_rate(),
        env=threads_env(opts.threads, {**os.environ, "DGLBACKEND": "pytorch"}),
    )
    whole = ["--whole-batch"] if opts.task == "node" and opts.whole_batch else []
    ours = Side(
        f"commgraph-{opts.task}",
        [sys.executable, str(HERE / f"cg_{opts.task}.py"), str(ours_file), *common, *whole],
        json_rate(),
        env=threads_env(opts.threads, {**commgraph_env(), "COMMGRAPH_HOME": str(opts.work_dir / "home")}),
    )
    setup = Setup(
        graph=f"{opts.graph} (DGL: {dgl_file.name}; commgraph: {ours_graph})",
        threads=opts.threads,
        seeds=f"{seeds}, shuffled by each side's generator (seed 0)",
        fanouts={dgl.name: opts.fanout, ours.name: commgraph_fanout(opts.fanout)},
        batch=batch,
        model=model,
        optimiser="Adam lr 0.01" + (", weight decay 5e-4" if opts.task == "node" else ""),
        warmup=opts.warmup,
        steps=opts.steps,
        unit="label edges" if opts.task == "link" else "seeds",
    )
    return dgl, ours, setup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", choices=sorted(DEFAULTS))
    parser.add_argument("--graph", help="link, node: a graph commgraph reads; rgcn: a mag-shaped spec")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--warmup", type=int, default=3, help="steps excluded on both sides")
    parser.add_argument("--steps", type=int, default=20, help="steps measured on both sides")
    parser.add_argument("--fanout", help="DGL's order, the first layer's first (link 15,10; rgcn 25,20; node 15,10,5)")
    parser.add_argument("--hidden", type=int)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/commgraph-dgl-compare"))
    parser.add_argument("--dgl-env", type=Path, help=f"the DGL environment (default: ${ENV_VARIABLE})")
    parser.add_argument("--json-out", type=Path, help="write the protocol's JSON here")
    parser.add_argument("--cap-gb", type=float, help="kill a process tree whose PSS sum passes this many GB")
    parser.add_argument("--time-limit", type=float, help="kill a run still going after this many seconds")
    parser.add_argument(
        "--whole-batch",
        action="store_true",
        help="node: run commgraph's model on the whole batch, untrimmed, as PyG's examples write it",
    )
    opts = parser.parse_args()
    graph, fanout, hidden = DEFAULTS[opts.task]
    opts.graph, opts.fanout = opts.graph or graph, opts.fanout or fanout
    opts.hidden = opts.hidden or hidden
    if opts.dgl_env is not None:
        os.environ[ENV_VARIABLE] = str(opts.dgl_env.resolve())
    ensure_env()
    opts.work_dir.mkdir(parents=True, exist_ok=True)
    dgl, ours, setup = sides(opts)
    pairs = run_pairs(
        dgl, ours, opts.pairs, opts.work_dir / "runs", opts.cap_gb * GB if opts.cap_gb else None, opts.time_limit
    )
    result = report(setup, pairs, targets=TARGETS[opts.task])
    if opts.json_out is not None:
        opts.json_out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
