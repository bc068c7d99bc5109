"""Time to load a SNAP edge list of 10M edges into a CSR Graph (issue: foundation).

Baseline, measured in the same run: numpy's C ``loadtxt`` parsing the same file into an array and
nothing more, i.e. the floor for any text loader. The ratio is the price of everything else
(id compaction, symmetrisation, de-duplication, CSR build, validation).

    python benchmarks/load_edgelist.py [--edges 10000000] [--nodes 1000000] [--gzip]
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import time
from pathlib import Path

import numpy as np

from commgraph.graph import load_snap


def write_edge_list(path: Path, nodes: int, edges: int, compress: bool) -> None:
    rng = np.random.default_rng(0)
    # sparse ids, as in real SNAP dumps: every id times 3
    pairs = rng.integers(0, nodes, size=(edges, 2)) * 3
    opener = gzip.open if compress else open
    with opener(path, "wt") as handle:
        handle.write(f"# Synthetic benchmark graph\n# Nodes: {nodes} Edges: {edges}\n# FromNodeId\tToNodeId\n")
        np.savetxt(handle, pairs, fmt="%d", delimiter="\t")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edges", type=int, default=10_000_000)
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--gzip", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("edges.txt.gz" if args.gzip else "edges.txt")
        start = time.perf_counter()
        write_edge_list(path, args.nodes, args.edges, args.gzip)
        print(f"wrote {args.edges:,} edges to {path.name} ({path.stat().st_size / 2**20:.0f} MiB) "
              f"in {time.perf_counter() - start:.1f} s")

        start = time.perf_counter()
        opener = gzip.open if args.gzip else open
        with opener(path, "rt") as handle:
            np.loadtxt(handle, dtype=np.int64, comments="#", usecols=(0, 1))
        baseline = time.perf_counter() - start

        start = time.perf_counter()
        graph = load_snap(path)
        ours = time.perf_counter() - start
    print(f"numpy.loadtxt parse only (baseline): {baseline:6.2f} s")
    print(f"commgraph load_snap -> CSR Graph:    {ours:6.2f} s  "
          f"({graph.num_nodes:,} nodes, {graph.num_edges:,} stored edges)")
    print(f"ratio load_snap / baseline:          {ours / baseline:6.2f}x")


if __name__ == "__main__":
    main()
