"""Calibration: measure how this machine moves bytes between workers, and fit a topology to it.

The probes run in real worker processes (the local launcher, or torchrun), on the backend training
uses: Gloo between CPU workers, NCCL between GPUs. Each probe times one pattern at a few message
sizes ``s`` and message counts ``m`` (``m`` messages of ``s`` bytes posted at once by every worker),
``repeats`` times after one warm-up, and keeps the median of the slowest rank's times:

- ``pair``: ping-pong between ranks 0 and 1, the others idle (half the round trip): one message alone.
- ``all``: every worker sends ``m`` messages and receives ``m``, all at once, message ``k`` going
  ``k + 1`` ranks ahead (wrapping over the other ranks): one message is a ring step, several spread
  over the peers as a halo exchange's do; every worker's sending and receiving side busy.
- ``copy``: every worker gathers ``m`` messages of 1 KB rows out of a table (``index_select``) and
  scatters them into another (``index_copy_``), as the runtime does around each message of a halo
  exchange; a point is the time of one pass (half of both). The tables hold at least
  ``TABLE_BYTES``, more than a core's private caches, as a layer's table does: rows come from
  memory, not from a cache a small probe would fit in. A message's rows are a random subset in
  ascending order, as a plan's rows are sorted by vertex id.
- ``allreduce``: torch's own ``all_reduce`` of one tensor of ``s`` bytes on every worker (Gloo's
  or NCCL's algorithm, not a plan of ours), so that ``native`` is priced as it runs.
- ``collective``: an 8-byte ``all_reduce`` on every worker, the median of at least
  :data:`COLLECTIVE_REPEATS`: the fixed cost of one of the runtime's small collectives (a sampled
  step's request round makes two), kept as ``calibrated.collective_us`` (not fitted).
- on GPU workers also ``h2d`` and ``d2h``: ``m`` copies between pinned host memory and the
  worker's GPU, every GPU at once.

Each probe's points are fitted by the cost of ``m`` messages sharing one sender:
``T(s, m) = latency + m * overhead + m * s / bandwidth``, by non-negative least squares on the
relative error (each row divided by its measured time), so 4 KB and 64 MB points weigh alike. The
``copy`` probe is fitted on the absolute error instead: a copy's time is its bytes' (the fixed cost
is a microsecond), and small copies that stay in a core's caches run faster per byte than the
large ones that make up an exchange's copy time, so the large points set the rate.
``latency`` is paid once (messages are in flight together), ``overhead`` once per message (the
sending process handles them one by one) and the bytes share the bandwidth. With a single message
count (``pair``) latency and overhead cannot be told apart and the fixed cost is all latency.

The calibrated topology describes the measured workers as ``localhost-cpu:N`` does, a star: worker
``w`` joins a hub by one link whose directions are its sending and its receiving side, with the
``all`` fit's per-message overhead and half its latency (a route crosses two links) and the
bandwidth one worker gets alone (the faster of the ``pair`` and ``all`` fits). The hub forwards at
most N times the ``all`` bandwidth (``forward_gbps``, one resource every message crossing it
shares): what N busy workers move together, which on a machine with fewer cores than workers is far
below N times what one pair alone gets. So the flow-level model of the ``all`` pattern is exactly
the fitted formula, while fewer busy workers (a tree's rounds, a pair) each get more. The
``allreduce`` fit becomes the topology's ``calibrated.allreduce`` (latency and bandwidth of the
whole collective across every worker). In the
simulator a message pays the overhead of each link it crosses, occupying that link direction
meanwhile. GPU workers hang off the host (``cpu0``) by links fitted from ``h2d``/``d2h`` and join
one another through a hub fitted from ``all`` and ``pair`` (NCCL). Every worker device gets the ``copy``
fit's bandwidth as its ``copy_gbps``, with which ``commgraph.plan.price`` prices the row copies.
Workers run with the trainer's allocator setting (``keep_freed_memory``), so buffers are reused
as in training rather than faulted in afresh.
"""

from __future__ import annotations

import datetime
import json
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from scipy.optimize import nnls

from commgraph.atomic import atomic_write
from commgraph.errors import TopologyError
from commgraph.runtime.memory import keep_freed_memory
from commgraph.runtime.world import World, join, pick_device
from commgraph.topology import Calibration, Device, Link, Topology

DEFAULT_SIZES = (4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20)
DEFAULT_MESSAGES = (1, 4)
DEFAULT_REPEATS = 5
CPU_PROBES = ("pair", "all", "copy", "allreduce")
GPU_PROBES = ("pair", "all", "copy", "allreduce", "h2d", "d2h")
ROW_BYTES = 1024  # the rows the copy probe gathers: 256 float32, a typical hidden layer
TABLE_BYTES = 64 << 20  # the copy probe's smallest table
COLLECTIVE_REPEATS = 20  # the small collective is timed at least this often (a millisecond each)


@dataclass(frozen=True)
class ProbeSpec:
    """What to measure: message sizes (bytes), message counts per worker, repeats per point.
    A point moves at most ``max(sizes)`` bytes per worker, so ``m`` messages of the largest size
    are skipped for ``m > 1``."""

    sizes: tuple[int, ...] = DEFAULT_SIZES
    messages: tuple[int, ...] = DEFAULT_MESSAGES
    repeats: int = DEFAULT_REPEATS

    def __post_init__(self) -> None:
        if not self.sizes or any(int(s) != s or s <= 0 for s in self.sizes):
            raise TopologyError(f"message sizes must be positive whole bytes, got {list(self.sizes)}")
        if not self.messages or any(int(m) != m or m < 1 for m in self.messages):
            raise TopologyError(f"message counts must be integers >= 1, got {list(self.messages)}")
        if int(self.repeats) != self.repeats or self.repeats < 1:
            raise TopologyError(f"repeats must be an integer >= 1, got {self.repeats}")

    def grid(self) -> list[tuple[int, int]]:
        """(size, messages) of every point, in the order they are measured."""
        largest = max(self.sizes)
        return [
            (int(s), int(m))
            for m in sorted(set(self.messages))
            for s in sorted(set(self.sizes))
            if m == 1 or m * s <= largest
        ]


@dataclass(frozen=True)
class Point:
    """One measured point: ``messages`` messages of ``nbytes`` per worker took ``seconds`` (the
    median over repeats of the slowest rank; ``low``/``high`` are the fastest and slowest repeats)."""

    probe: str
    nbytes: int
    messages: int
    seconds: float
    low: float
    high: float


@dataclass(frozen=True)
class LinkFit:
    """``latency_s + messages * overhead_s + messages * nbytes / bandwidth``; ``worst_error`` is the
    largest relative difference between the fit and a measured point."""

    latency_s: float
    overhead_s: float
    bandwidth_gbps: float
    worst_error: float

    def seconds(self, nbytes, messages=1):
        return self.latency_s + messages * (self.overhead_s + np.asarray(nbytes) / (self.bandwidth_gbps * 1e9))


@dataclass
class CalibratedLinks:
    """Everything one calibration found: where and when, the measured points and the fit per probe."""

    workers: int
    device: str  # "cpu" or "cuda"
    backend: str
    host: str
    when: str
    spec: ProbeSpec
    points: list[Point]
    fits: dict[str, LinkFit]
    collective_s: float | None = None  # one 8-byte all_reduce across every worker (None: one worker)

    def topology(self) -> Topology:
        """The measured workers as a topology (see the module docstring for its shape)."""
        fabric = self.fits["all"] if "all" in self.fits else None
        devices, links = [], []
        if self.device == "cpu":
            kind, hub, prefix = "loopback", Device("loopback", "switch", self.host), "cpu"
        else:
            kind, hub, prefix = "nvlink", Device("gpufabric", "nvswitch", self.host), "gpu"
        copy = round(self.fits["copy"].bandwidth_gbps, 6)
        workers = [Device(f"{prefix}{w}", prefix, self.host, copy) for w in range(self.workers)]
        devices += workers
        if fabric is not None:
            alone = max(fabric.bandwidth_gbps, self.fits["pair"].bandwidth_gbps if "pair" in self.fits else 0.0)
            devices.append(replace(hub, forward_gbps=round(self.workers * fabric.bandwidth_gbps, 6)))
            links += [_link(w.id, hub.id, kind, replace(fabric, bandwidth_gbps=alone)) for w in workers]
        if self.device == "cuda":
            host_link = min((self.fits[p] for p in ("h2d", "d2h")), key=lambda f: f.bandwidth_gbps)
            devices.append(Device("cpu0", "cpu", self.host))
            links += [_link(w.id, "cpu0", "pcie", host_link) for w in workers]
        how = (
            f"commgraph topo calibrate: {self.backend}, {self.workers} {self.device} worker(s), "
            f"{len(self.spec.sizes)} sizes {min(self.spec.sizes)}..{max(self.spec.sizes)} B, "
            f"messages {list(self.spec.messages)}, median of {self.spec.repeats}"
        )
        details = {f"{probe}_{key}": value for probe, fit in self.fits.items() for key, value in _rounded(fit).items()}
        native = self.fits.get("allreduce")
        allreduce = (
            None
            if native is None
            else {"latency_us": round(native.latency_s * 1e6, 3), "bandwidth_gbps": round(native.bandwidth_gbps, 6)}
        )
        return Topology(
            name=f"calibrated-{self.device}:{self.workers}",
            devices=devices,
            links=links,
            calibrated=Calibration(
                when=self.when,
                how=how,
                host=self.host,
                details=details,
                allreduce=allreduce,
                collective_us=None if self.collective_s is None else round(self.collective_s * 1e6, 3),
            ),
        )

    def rows(self) -> list[dict]:
        """Each point beside the fitted model: probe, bytes, messages, measured, model, error."""
        rows = []
        for p in self.points:
            model = float(self.fits[p.probe].seconds(p.nbytes, p.messages))
            rows.append(
                {
                    "probe": p.probe,
                    "bytes": p.nbytes,
                    "messages": p.messages,
                    "measured_s": p.seconds,
                    "model_s": model,
                    "error": model / p.seconds - 1.0,
                }
            )
        return rows

    def to_dict(self) -> dict:
        return {
            "workers": self.workers,
            "device": self.device,
            "backend": self.backend,
            "host": self.host,
            "when": self.when,
            "spec": asdict(self.spec),
            "points": [asdict(p) for p in self.points],
            "fits": {k: asdict(v) for k, v in self.fits.items()},
            "collective_s": self.collective_s,
        }


def _link(a: str, b: str, kind: str, fit: LinkFit) -> Link:
    """One of two links a route crosses: half the fitted latency each, the full per-message
    overhead (each paid by the message on its own link direction, at the same time)."""
    return Link(
        a, b, kind, 1, round(fit.bandwidth_gbps, 6), round(fit.latency_s * 0.5e6, 3), round(fit.overhead_s * 1e6, 3)
    )


def _rounded(fit: LinkFit) -> dict:
    return {
        "latency_us": round(fit.latency_s * 1e6, 3),
        "overhead_us": round(fit.overhead_s * 1e6, 3),
        "bandwidth_gbps": round(fit.bandwidth_gbps, 6),
        "worst_error": round(fit.worst_error, 4),
    }


# -- fitting ---------------------------------------------------------------------------------------


def fit(points: list[Point], relative: bool = True) -> LinkFit:
    """Least-squares fit of ``latency + m * overhead + m * s / bandwidth`` to one probe's points,
    minimising the squared relative error (or, ``relative=False``, the absolute one), with every
    term >= 0."""
    if not points:
        raise TopologyError("nothing to fit: no measured points")
    size = np.array([p.nbytes for p in points], dtype=np.float64)
    count = np.array([p.messages for p in points], dtype=np.float64)
    seconds = np.array([p.seconds for p in points], dtype=np.float64)
    if not (seconds > 0).all():
        raise TopologyError("measured times must be > 0")
    columns = [np.ones_like(size), count, count * size]
    if np.unique(count).size == 1:  # one message count: the fixed cost is all latency
        columns[1] = np.zeros_like(size)
    scale = seconds if relative else np.full_like(seconds, seconds.max())
    design = np.stack(columns, axis=1) / scale[:, None]
    (latency, overhead, per_byte), _ = nnls(design, seconds / scale)
    if per_byte * size.max() < 1e-3 * seconds.max():  # the bytes explain (almost) none of the time
        raise TopologyError(
            "the measured times do not grow with message size, so no bandwidth can be "
            "fitted: include larger sizes (1 MB and up)"
        )
    result = LinkFit(float(latency), float(overhead), float(1.0 / per_byte / 1e9), 0.0)
    worst = float(np.abs(result.seconds(size, count) / seconds - 1.0).max())
    return LinkFit(result.latency_s, result.overhead_s, result.bandwidth_gbps, worst)


def fit_all(points: list[Point]) -> dict[str, LinkFit]:
    """Every probe's fit; a probe that cannot be fitted is named in the error."""
    fits = {}
    for probe in dict.fromkeys(p.probe for p in points):
        try:
            fits[probe] = fit([p for p in points if p.probe == probe], relative=probe != "copy")
        except TopologyError as exc:
            raise TopologyError(f"the {probe} probe: {exc}") from None
    return fits


# -- the probes, run by every worker ---------------------------------------------------------------


def measure(world: World, spec: ProbeSpec, say: Callable[[str], None] | None = None) -> list[Point]:
    """Run every probe on this world; every rank must call it. Rank 0 gets the points, the others []."""
    probes = GPU_PROBES if world.backend == "nccl" else CPU_PROBES
    jobs = [
        (probe, s, m)
        for probe in probes
        for s, m in spec.grid()
        if (probe not in ("pair", "allreduce") or m == 1) and (world.size > 1 or probe in ("copy", "h2d", "d2h"))
    ]
    points = []
    for n, (probe, nbytes, messages) in enumerate(jobs):
        if say is not None and world.is_leader:
            say(f"\rcalibrating: {n + 1}/{len(jobs)} {probe:>4} {messages} x {_size(nbytes):>6}")
        times = _PROBES[probe](world, nbytes, messages, spec.repeats)
        slowest = torch.tensor(times, dtype=torch.float64, device=world.device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=world.grad_group)
        slowest = slowest.cpu().numpy()
        points.append(
            Point(probe, nbytes, messages, float(np.median(slowest)), float(slowest.min()), float(slowest.max()))
        )
    if say is not None and world.is_leader:
        say("\n")
    return points if world.is_leader else []


def _timed(world: World, repeats: int, once: Callable[[], None]) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``once`` after one warm-up, all ranks starting together."""
    once()
    dist.barrier(group=world.grad_group)
    times = []
    for _ in range(repeats):
        if world.backend == "nccl":
            torch.cuda.synchronize()
        start = time.perf_counter()
        once()
        if world.backend == "nccl":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times


def _buffers(world: World, nbytes: int, messages: int) -> list[torch.Tensor]:
    return [torch.ones(max(nbytes // 4, 1), dtype=torch.float32, device=world.device) for _ in range(messages)]


def _exchange(world: World, sends: list[tuple[torch.Tensor, int]], recvs: list[tuple[torch.Tensor, int]]) -> None:
    """Post every receive and send at once (tagged on Gloo, one group on NCCL) and wait for all."""
    group = world.halo_group
    if world.backend == "nccl":
        ops = [dist.P2POp(dist.irecv, t, peer, group) for t, peer in recvs]
        ops += [dist.P2POp(dist.isend, t, peer, group) for t, peer in sends]
        works = dist.batch_isend_irecv(ops) if ops else []
    else:
        works = [dist.irecv(t, peer, group=group, tag=i) for i, (t, peer) in enumerate(recvs)]
        works += [dist.isend(t, peer, group=group, tag=i) for i, (t, peer) in enumerate(sends)]
    for work in works:
        work.wait()


def _pair(world: World, nbytes: int, messages: int, repeats: int) -> list[float]:
    """Half the round trip of one message between ranks 0 and 1 (the other ranks idle)."""
    (buffer,) = _buffers(world, nbytes, 1)

    def once() -> None:
        if world.rank == 0:
            _exchange(world, [(buffer, 1)], [])
            _exchange(world, [], [(buffer, 1)])
        elif world.rank == 1:
            _exchange(world, [], [(buffer, 0)])
            _exchange(world, [(buffer, 0)], [])

    return [t / 2 for t in _timed(world, repeats, once)]


def _spread(world: World, nbytes: int, messages: int, repeats: int) -> list[float]:
    """Every rank sends ``messages`` messages, message ``k`` to the rank ``k % (size - 1) + 1`` ahead,
    and receives as many, message ``k`` from as many behind."""
    out, into = _buffers(world, nbytes, messages), _buffers(world, nbytes, messages)
    ahead = [k % (world.size - 1) + 1 for k in range(messages)]
    sends = [(t, (world.rank + a) % world.size) for t, a in zip(out, ahead)]
    recvs = [(t, (world.rank - a) % world.size) for t, a in zip(into, ahead)]
    return _timed(world, repeats, lambda: _exchange(world, sends, recvs))


def collective_seconds(world: World, repeats: int) -> float | None:
    """The median seconds of an 8-byte all_reduce on every rank (the slowest rank's), timed
    ``max(repeats, COLLECTIVE_REPEATS)`` times; None on one worker. Every rank must call it."""
    if world.size < 2:
        return None
    times = torch.tensor(_allreduce(world, 8, 1, max(repeats, COLLECTIVE_REPEATS)), dtype=torch.float64)
    slowest = times.to(world.device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=world.grad_group)
    return float(np.median(slowest.cpu().numpy()))


def _allreduce(world: World, nbytes: int, messages: int, repeats: int) -> list[float]:
    """torch's own all_reduce of one tensor of ``nbytes`` on every rank."""
    (tensor,) = _buffers(world, nbytes, 1)
    return _timed(world, repeats, lambda: dist.all_reduce(tensor, group=world.grad_group))


def _copies(to_gpu: bool) -> Callable[[World, int, int, int], list[float]]:
    """``messages`` copies between pinned host memory and this rank's GPU, on one stream."""

    def probe(world: World, nbytes: int, messages: int, repeats: int) -> list[float]:
        gpu = _buffers(world, nbytes, messages)
        host = [torch.ones(t.shape, dtype=t.dtype).pin_memory() for t in gpu]
        pairs = list(zip(gpu, host)) if to_gpu else list(zip(host, gpu))

        def once() -> None:
            for target, source in pairs:
                target.copy_(source, non_blocking=True)

        return _timed(world, repeats, once)

    return probe


def _rows(world: World, nbytes: int, messages: int, repeats: int) -> list[float]:
    """One pass of ``messages`` row gathers and scatters of ``nbytes`` each (half of both)."""
    width = ROW_BYTES // 4
    rows = max(nbytes // ROW_BYTES, 1)
    table = torch.randn(max(rows * messages, TABLE_BYTES // ROW_BYTES), width, device=world.device)
    target = torch.empty_like(table)
    order = torch.randperm(table.shape[0], device=world.device)[: rows * messages].reshape(messages, rows).sort().values

    def once() -> None:
        for index in order:
            target.index_copy_(0, index, table.index_select(0, index))

    return [t / 2 for t in _timed(world, repeats, once)]


_PROBES = {
    "pair": _pair,
    "all": _spread,
    "copy": _rows,
    "allreduce": _allreduce,
    "h2d": _copies(True),
    "d2h": _copies(False),
}


def _size(nbytes: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


# -- running a calibration -------------------------------------------------------------------------


def check_workers(workers: int, device: str) -> None:
    if workers < 1 or (device == "cpu" and workers < 2):
        raise TopologyError(
            f"calibration measures the links between worker processes: --workers must be >= 2 "
            f"(>= 1 with GPUs, for the host links alone), got {workers}"
        )


def calibrate(
    workers: int, spec: ProbeSpec = ProbeSpec(), *, device: str = "auto", timeout: float = 60.0, progress: bool = False
) -> CalibratedLinks:
    """Start ``workers`` local processes, measure them and fit every probe. ``device``: ``cpu``
    (Gloo), ``cuda`` (NCCL, a GPU per worker) or ``auto``; ``progress`` lets rank 0 report each
    point on stderr."""
    from commgraph.runtime.launch import launch_local

    chosen = pick_device(device, workers)
    check_workers(workers, chosen)
    with tempfile.TemporaryDirectory(prefix="commgraph-calibrate-") as folder:
        job = Path(folder) / "job.json"
        job.write_text(
            json.dumps(
                {
                    "spec": asdict(spec),
                    "device": chosen,
                    "timeout": timeout,
                    "progress": progress,
                    "out": str(Path(folder) / "points.json"),
                }
            )
        )
        code = launch_local([str(job)], workers, module="commgraph.runtime.calibrate", fresh=chosen == "cuda")
        if code != 0:
            raise TopologyError(f"calibration failed: a worker exited with code {code} (its message is above)")
        return CalibratedLinks(**_from_json(json.loads((Path(folder) / "points.json").read_text())))


def collect(world: World, spec: ProbeSpec, progress: bool = False) -> CalibratedLinks | None:
    """Measure this world (every rank calls it) and, on rank 0, fit the result; None elsewhere."""
    say = (lambda text: print(text, end="", file=sys.stderr, flush=True)) if progress else None
    points = measure(world, spec, say)
    collective = collective_seconds(world, spec.repeats)
    if not world.is_leader:
        return None
    return CalibratedLinks(
        workers=world.size,
        device=world.device.type,
        backend=world.backend,
        host=socket.gethostname(),
        when=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        spec=spec,
        points=points,
        fits=fit_all(points),
        collective_s=collective,
    )


def _from_json(data: dict) -> dict:
    return {
        **data,
        "spec": ProbeSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in data["spec"].items()}),
        "points": [Point(**p) for p in data["points"]],
        "fits": {k: LinkFit(**v) for k, v in data["fits"].items()},
    }


def main() -> None:
    """Worker entry point: ``python -m commgraph.runtime.calibrate JOB.json`` (as every rank)."""
    job = json.loads(Path(sys.argv[1]).read_text())
    keep_freed_memory()
    spec = ProbeSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in job["spec"].items()})
    world = join(job["timeout"], job["device"])
    try:
        result = collect(world, spec, job["progress"])
        if result is not None:
            with atomic_write(job["out"]) as handle:
                handle.write(json.dumps(result.to_dict()).encode())
    except Exception as exc:
        world.report_failure(f"{type(exc).__name__}: {exc}")
        raise
    finally:
        world.close()


if __name__ == "__main__":
    main()
