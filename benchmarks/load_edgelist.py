"""Loading a SNAP edge list into a CSR Graph: time, peak memory, and the cached second load.

One run, three measurements on one synthetic SNAP file (sparse ids, as in real dumps):

1. time: ``load_snap`` against numpy's C ``loadtxt`` parsing the file's first ``--cut`` lines into an
   array and nothing more (the floor of any text loader), both on that same cut;
2. peak memory: ``load_snap`` of the whole file in a fresh process, the growth of its peak resident
   memory over its resident memory before the load, against the final CSR's bytes (target <= 2x);
3. second load: the cut through the dataset cache (checksum, conversion to a stored npz) against
   the next load of the same dataset (checksum check, memory-mapped npz) (target <= 1/10).

    python benchmarks/load_edgelist.py [--lines 10000000] [--cut 10000000] [--nodes 1000000] [--dir DIR]
                                       [--repeats 3]

Each figure is the median over ``--repeats`` runs, with the range (min-max) beside it.

``--lines 100000000`` writes about 1.6 GB; ``--dir`` keeps the files there for the next run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np

BLOCK = 5_000_000


@numba.njit(cache=True)
def _format_pairs(pairs, out):
    """``a\\tb\\n`` lines into ``out``; returns the bytes used."""
    k = 0
    digits = np.empty(20, dtype=np.uint8)
    for i in range(pairs.shape[0]):
        for col in range(2):
            value = pairs[i, col]
            n = 0
            while True:
                digits[n] = 48 + value % 10
                value //= 10
                n += 1
                if value == 0:
                    break
            for j in range(n - 1, -1, -1):
                out[k] = digits[j]
                k += 1
            out[k] = 9 if col == 0 else 10
            k += 1
    return k


def write_edge_list(path: Path, nodes: int, lines: int, cut: Path | None = None, cut_lines: int = 0) -> None:
    """``lines`` random pairs of ids 3*[0, nodes) (sparse, so they are remapped), block by block;
    the first ``cut_lines`` lines also go to ``cut``."""
    rng = np.random.default_rng(0)
    header = b"# Synthetic benchmark graph\n# FromNodeId\tToNodeId\n"
    cut_handle = open(cut, "wb") if cut else None
    with open(path, "wb") as handle:
        handle.write(header)
        if cut_handle:
            cut_handle.write(header)
        written = 0
        while written < lines:
            count = min(BLOCK, lines - written)
            pairs = rng.integers(0, nodes, size=(count, 2)) * 3
            buffer = np.empty(count * 42, dtype=np.uint8)
            text = buffer[: _format_pairs(pairs, buffer)].tobytes()
            handle.write(text)
            if cut_handle and written < cut_lines:
                keep = min(count, cut_lines - written)
                cut_handle.write(text if keep == count else text[: _nth_newline(text, keep)])
            written += count
    if cut_handle:
        cut_handle.close()


def _nth_newline(text: bytes, n: int) -> int:
    positions = np.flatnonzero(np.frombuffer(text, dtype=np.uint8) == 10)
    return int(positions[n - 1]) + 1


def child_load(path: str) -> None:
    """In a fresh process: load, and report seconds, peak growth of resident memory, CSR bytes."""
    from commgraph.graph import load_snap
    from commgraph.runtime.table_memory import status_bytes

    warm = Path(tempfile.mkdtemp()) / "warm.txt"
    warm.write_text("1 2\n2 3\n")
    load_snap(warm)  # compiled kernels loaded from numba's cache before measuring
    before = status_bytes("VmRSS") // 1024
    start = time.perf_counter()
    graph = load_snap(path)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    csr = graph.indptr.nbytes + graph.indices.nbytes + (0 if graph.node_ids is None else graph.node_ids.nbytes)
    print(
        json.dumps(
            {
                "seconds": seconds,
                "peak_growth": (peak - before) * 1024,
                "csr_bytes": csr,
                "graph_bytes": graph.nbytes(),
                "nodes": graph.num_nodes,
                "edges": graph.num_edges,
            }
        )
    )


def cached_loads(cut: Path, lines: int, home: Path) -> tuple[float, float]:
    """First load of the cut as a dataset (record the download's digest, parse, check, convert) and
    the second (check the npz's digest, map it)."""
    from commgraph.graph.datasets import dataset_dir, load_dataset
    from commgraph.graph.registry import Dataset, RemoteFile, Stats
    from commgraph.graph.snap import read_snap

    os.environ["COMMGRAPH_HOME"] = str(home)
    nodes = read_snap(cut).graph.num_nodes  # warms the kernels too
    entry = Dataset("bench-cut", "snap", (RemoteFile(f"https://example.org/{cut.name}"),), "-", Stats(nodes, lines))
    raw = dataset_dir(entry.name) / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cut, raw / cut.name)  # as if just downloaded
    start = time.perf_counter()
    load_dataset(entry, progress=False)
    first = time.perf_counter() - start
    start = time.perf_counter()
    load_dataset(entry, progress=False)
    return first, time.perf_counter() - start


def _timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def _spread(values: list[float], digits: int = 2) -> str:
    """median (min-max)"""
    return f"{np.median(values):,.{digits}f} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=10_000_000, help="edge lines of the file (default 10M)")
    parser.add_argument("--cut", type=int, default=10_000_000, help="lines of the cut timed against loadtxt")
    parser.add_argument("--nodes", type=int, default=1_000_000, help="distinct ids drawn from (default 1M)")
    parser.add_argument("--dir", type=Path, help="keep the files here (reused when present)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each measurement (default 3)")
    parser.add_argument("--child-load", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_load:
        child_load(args.child_load)
        return
    folder = args.dir or Path(tempfile.mkdtemp(prefix="load-edgelist-"))
    folder.mkdir(parents=True, exist_ok=True)
    path, cut = folder / f"edges-{args.lines}-{args.nodes}.txt", folder / f"cut-{args.cut}-{args.nodes}.txt"
    cut_lines = min(args.cut, args.lines)
    if not (path.is_file() and cut.is_file()):
        start = time.perf_counter()
        write_edge_list(path, args.nodes, args.lines, cut, cut_lines)
        print(
            f"wrote {args.lines:,} lines ({path.stat().st_size / 2**20:,.0f} MiB) "
            f"in {time.perf_counter() - start:.1f} s"
        )
    try:
        from commgraph.graph import load_snap

        load_snap(cut)  # compile or load the kernels once
        baseline, ours = [], []
        for _ in range(args.repeats):
            baseline.append(_timed(lambda: np.loadtxt(cut, dtype=np.int64, comments="#", usecols=(0, 1))))
            ours.append(_timed(lambda: load_snap(cut)))
        ratios = [o / b for o, b in zip(ours, baseline)]
        print(
            f"{cut_lines:,}-line cut: numpy.loadtxt parse only {_spread(baseline)} s, load_snap -> CSR "
            f"{_spread(ours)} s, ratio {_spread(ratios)}x"
        )

        results = [
            json.loads(
                subprocess.run(
                    [sys.executable, __file__, "--child-load", str(path)], check=True, capture_output=True, text=True
                ).stdout
            )
            for _ in range(args.repeats)
        ]
        last = results[-1]
        print(
            f"{args.lines:,} lines: load_snap {_spread([r['seconds'] for r in results])} s, {last['nodes']:,} nodes, "
            f"{last['edges']:,} stored edges; peak memory growth "
            f"{_spread([r['peak_growth'] / 2**20 for r in results], 0)} MiB = "
            f"{_spread([r['peak_growth'] / r['csr_bytes'] for r in results])}x the final CSR "
            f"({last['csr_bytes'] / 2**20:,.0f} MiB)"
        )

        firsts, seconds = [], []
        for _ in range(args.repeats):
            home = Path(tempfile.mkdtemp(prefix="commgraph-home-"))
            try:
                first, second = cached_loads(cut, cut_lines, home)
            finally:
                shutil.rmtree(home, ignore_errors=True)
            firsts.append(first)
            seconds.append(second)
        print(
            f"dataset cache, {cut_lines:,}-line cut: first load {_spread(firsts)} s, second {_spread(seconds, 3)} s, "
            f"second/first {_spread([s / f for s, f in zip(seconds, firsts)], 3)}"
        )
    finally:
        if args.dir is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
