"""Emulated machines: one sampled job as 1, 2 and 4 torchrun agents on this host (issue 39).

Each "machine" is a torchrun agent (``--nnodes M``, ``8 / M`` workers each: the same host name,
its own ``GROUP_RANK``), so the agents of a run together are the same 8-worker job. Every run is
started the same way (torchrun, also for one machine), on the same partition set and options, so
the runs differ only in how many machines the workers are spread over and in ``--structure``.

Per run and per agent it samples, every ``--every`` seconds:

- **PSS**: the tree's proportional set size, as ``benchmarks/memory.py`` reports it (the sum over
  agents is what the emulation costs this host);
- **alone**: what a real machine holding that agent alone would hold. The emulated machines share
  one page cache, so PSS splits the shared libraries' and files' pages between agents and makes
  each look smaller than a machine of its own would be. Every ``--alone-every`` seconds the agent's
  resident pages are counted once each, whoever else maps them (the union of the page frames of
  its processes, from ``/proc/PID/pagemap``: seconds per sample, too slow to catch a peak), beside
  its PSS at that moment; the largest difference is added to the agent's PSS peak. That figure is
  the per-machine peak (an upper bound: the difference is taken at its largest).

and from the run's ``--metrics-out``: the losses (which must equal the one-machine run's), the
structure and sampling bytes per step, and the step time (rank 0's epoch seconds over its steps).
The table gives each machine's peak against the one-machine peak: the issue's targets are
<= 0.55x with 2 machines and <= 0.3x with 4 (``--structure partitioned``).

Run it alone on the machine (it takes most of it), e.g.::

    .venv/bin/python benchmarks/machines.py --work-dir DIR
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_scenarios import SAMPLED_100K, SBM_100K  # noqa: E402
from pss import CHECKOUT, GB, commgraph_env, kill_tree, process_tree, pss_bytes  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
PRESENT = np.uint64(1 << 63)
PFN_MASK = np.uint64((1 << 55) - 1)
WORKERS = 8
TRAIN = (
    *SAMPLED_100K[:-4],
    "--epochs",
    "2",
    "--steps-per-epoch",
    "4",
    "--dropout",
    "0",
    "--eval-every",
    "2",
    "--device",
    "cpu",
    "--timeout",
    "600",
)


def resident_frames(pid: int) -> np.ndarray:
    """The page frames ``pid`` has resident (empty once it is gone): its mappings with resident
    pages, looked up in ``/proc/PID/pagemap``."""
    frames = []
    try:
        with open(f"/proc/{pid}/smaps") as smaps:
            regions, start, end = [], 0, 0
            for line in smaps:
                head = line.split(maxsplit=2)
                if "-" in head[0]:
                    start, end = (int(x, 16) for x in head[0].split("-"))
                elif head[0] == "Rss:" and int(head[1]) > 0:
                    regions.append((start, end))
        with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
            for start, end in regions:
                try:
                    pagemap.seek(start // PAGE * 8)
                    entries = np.frombuffer(pagemap.read((end - start) // PAGE * 8), dtype=np.uint64)
                except (OSError, ValueError):  # a region the kernel will not describe ([vsyscall])
                    continue
                frames.append(entries[(entries & PRESENT) != 0] & PFN_MASK)
    except OSError:
        pass
    return np.concatenate(frames) if frames else np.zeros(0, np.uint64)


def alone_bytes(pids: list[int]) -> int:
    """Resident bytes of a set of processes, each page once."""
    frames = [resident_frames(pid) for pid in pids]
    return int(np.unique(np.concatenate(frames)).shape[0]) * PAGE if frames else 0


@dataclass
class Agent:
    proc: subprocess.Popen
    pss_peak: int = 0
    shared_extra: int = 0  # the most its pages counted once exceeded its PSS, at one moment

    @property
    def alone_peak(self) -> int:
        return self.pss_peak + self.shared_extra


@dataclass
class Run:
    machines: int
    structure: str
    seconds: float
    alone_peaks: list[int]
    pss_peaks: list[int]
    records: list[dict] = field(default_factory=list)
    returncodes: list[int] = field(default_factory=list)
    errors: str = ""

    def per_step(self, key: str) -> float:
        steps = sum(r["steps"] for r in self.records)
        return sum(r[key] for r in self.records) / max(steps, 1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(pset: Path, machines: int, structure: str, work: Path, every: float, alone_every: float, python: str) -> Run:
    """The job as ``machines`` agents, sampled until every agent exits."""
    metrics = work / f"m{machines}-{structure}.jsonl"
    metrics.unlink(missing_ok=True)
    port, env = _free_port(), commgraph_env()
    logs = [open(work / f"m{machines}-{structure}-agent{node}.log", "w") for node in range(machines)]
    agents = [
        Agent(
            subprocess.Popen(
                [
                    python,
                    "-m",
                    "torch.distributed.run",
                    "--nnodes",
                    str(machines),
                    "--nproc-per-node",
                    str(WORKERS // machines),
                    "--node-rank",
                    str(node),
                    "--master-addr",
                    "127.0.0.1",
                    "--master-port",
                    str(port),
                    "-m",
                    "commgraph",
                    "train",
                    str(pset),
                    *TRAIN,
                    "--structure",
                    structure,
                    "--quiet",
                    *(["--metrics-out", str(metrics)] if node == 0 else []),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=logs[node],
            )
        )
        for node in range(machines)
    ]
    started = last_alone = time.perf_counter()
    try:
        while any(a.proc.poll() is None for a in agents):
            tick = time.perf_counter()
            counting = tick - last_alone > alone_every
            for agent in agents:
                pids = process_tree(agent.proc.pid)
                pss = sum(pss_bytes(p) for p in pids)
                agent.pss_peak = max(agent.pss_peak, pss)
                if counting:
                    agent.shared_extra = max(agent.shared_extra, alone_bytes(pids) - pss)
            if counting:
                last_alone = time.perf_counter()
            time.sleep(max(0.0, every - (time.perf_counter() - tick)))
    finally:
        for agent in agents:
            if agent.proc.poll() is None:
                kill_tree(process_tree(agent.proc.pid))
        for log in logs:
            log.close()
    seconds = time.perf_counter() - started
    records = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.is_file() else []
    errors = "\n".join(
        line
        for node in range(machines)
        for line in (work / f"m{machines}-{structure}-agent{node}.log").read_text().splitlines()
        if "error" in line
    )[-2000:]
    return Run(
        machines,
        structure,
        seconds,
        [a.alone_peak for a in agents],
        [a.pss_peak for a in agents],
        records,
        [a.proc.returncode for a in agents],
        errors,
    )


def table(runs: list[Run]) -> str:
    base = next(r for r in runs if r.machines == 1)
    one = max(base.alone_peaks)
    lines = [
        "| machines | --structure | each machine's peak, alone (GB) | vs one machine | PSS per agent (GB) | "
        "structure bytes / step | of which sampling | step s | losses equal |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        if not r.records:
            lines.append(f"| {r.machines} | {r.structure} | failed: rc {r.returncodes} {r.errors[-200:]} ||||||")
            continue
        equal = [x["loss"] for x in r.records] == [x["loss"] for x in base.records]
        step = sum(x["epoch_seconds"] for x in r.records) / max(sum(x["steps"] for x in r.records), 1)
        lines.append(
            f"| {r.machines} | {r.structure} | {', '.join(f'{b / GB:.2f}' for b in r.alone_peaks)} | "
            f"{max(r.alone_peaks) / one:.2f}x | {', '.join(f'{b / GB:.2f}' for b in r.pss_peaks)} | "
            f"{r.per_step('structure_bytes') / 1e6:.2f} MB | {r.per_step('sampling_bytes') / 1e6:.2f} MB | "
            f"{step:.2f} | {'yes' if equal else 'NO'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=Path("/tmp/cg-machines"),
        help="where the partition set, logs and metrics go (default /tmp/cg-machines)",
    )
    parser.add_argument(
        "--set",
        type=Path,
        default=None,
        help="an 8-part partition set (default: the 100k-node DGS-regime graph's METIS set, made "
        "under --work-dir on first use)",
    )
    parser.add_argument("--machines", default="1,2,4", help="agent counts to run (default 1,2,4)")
    parser.add_argument(
        "--structures",
        default="partitioned,replicated",
        help="--structure values for the multi-machine runs (default partitioned,replicated)",
    )
    parser.add_argument("--every", type=float, default=0.5, help="seconds between PSS samples (default 0.5)")
    parser.add_argument(
        "--alone-every",
        type=float,
        default=10.0,
        help="seconds between counts of each agent's pages counted once (default 10)",
    )
    parser.add_argument("--python", default=sys.executable, help="the interpreter (default: this one)")
    parser.add_argument("--json-out", type=Path, default=None, help="also write the runs as JSON here")
    opts = parser.parse_args()
    opts.work_dir.mkdir(parents=True, exist_ok=True)
    pset = opts.set or opts.work_dir / "sbm100k-metis8"
    if not pset.exists():
        subprocess.run(
            [
                opts.python,
                "-m",
                "commgraph",
                "partition",
                "make",
                SBM_100K,
                "--parts",
                str(WORKERS),
                "--method",
                "metis",
                "--out",
                str(pset),
            ],
            env=commgraph_env(),
            check=True,
        )
    runs = []
    for machines in (int(m) for m in opts.machines.split(",")):
        for structure in ["replicated"] if machines == 1 else opts.structures.split(","):
            runs.append(run(pset, machines, structure, opts.work_dir, opts.every, opts.alone_every, opts.python))
            print(
                f"{machines} machine(s), {structure}: {runs[-1].seconds:.0f} s, rc {runs[-1].returncodes}",
                file=sys.stderr,
                flush=True,
            )
    print(f"set {pset}; train {' '.join(TRAIN)}; {WORKERS} workers; checkout {CHECKOUT}")
    print(table(runs))
    if opts.json_out:
        opts.json_out.write_text(json.dumps([r.__dict__ for r in runs], indent=1))


if __name__ == "__main__":
    main()
