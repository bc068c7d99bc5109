"""Network scenarios for a packet-level cross-check: the flows of a coflow DAG that cross the network,
exported as plain data that a packet simulator (ns-3, ``benchmarks/ns3_crosscheck.py``) replays, and
the same scenario replayed by this package's flow-level simulator.

A scenario holds the network's hosts (one per NIC) and switches, its links (bits per second and
latency per direction), and per flow its coflow, source and destination host, bytes, release time
(when the flow-level run of the whole DAG started it, the first release at 0), priority band and
path (the hosts and switches it crosses: the flow-level simulator's ECMP choice). ``routing`` is
the fabric's: ``ecmp`` sends each flow on its path; ``spray`` splits it over every shortest path
(the flow-level replay spreads it evenly, a packet simulator sprays its packets), the path
kept as the ECMP reference. Bands are the
schedule's priority classes ranked and cut into ``bands`` equal ranges, 0 served first: a packet
network has few strict-priority queues. Written as JSON::

    {"format": "commgraph-packet-scenario", "version": 1, "name": "...", "bands": 4, "routing": "ecmp",
     "nodes": [{"id": "s0.nic0", "kind": "host"}, {"id": "edge0.0", "kind": "switch"}, ...],
     "links": [{"a": "s0.nic0", "b": "edge0.0", "bits_per_second": 1e11, "latency_us": 1.0}, ...],
     "flows": [{"id": "...", "coflow": "...", "kind": "dp", "src": "s0.nic0", "dst": "s1.nic0",
                "bytes": 1048576, "release_s": 0.0012, "band": 3,
                "path": ["s0.nic0", "edge0.0", "s1.nic0"]}, ...]}
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from commgraph.atomic import atomic_write
from commgraph.errors import SimulationError
from commgraph.sim.coflow import Coflow
from commgraph.sim.dag import Compute, Task, Transfer, read_json
from commgraph.sim.engine import simulate
from commgraph.topology.model import ROUTINGS, Device, Link, Topology

FORMAT, VERSION = "commgraph-packet-scenario", 1
NETWORK_LINKS = ("infiniband", "ethernet")


@dataclass(frozen=True)
class ScenarioLink:
    a: str
    b: str
    bits_per_second: float
    latency_us: float


@dataclass(frozen=True)
class ScenarioFlow:
    id: str
    coflow: str
    kind: str
    src: str
    dst: str
    bytes: int
    release_s: float
    band: int
    path: tuple[str, ...]


@dataclass(frozen=True)
class Scenario:
    """A network and the flows to replay on it (module docstring); validated on construction."""

    name: str
    bands: int
    hosts: tuple[str, ...]
    switches: tuple[str, ...]
    links: tuple[ScenarioLink, ...]
    flows: tuple[ScenarioFlow, ...]
    routing: str = "ecmp"

    def __post_init__(self) -> None:
        _check(self)

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "bands": self.bands,
            "routing": self.routing,
            "nodes": [{"id": h, "kind": "host"} for h in self.hosts]
            + [{"id": s, "kind": "switch"} for s in self.switches],
            "links": [asdict(link) for link in self.links],
            "flows": [{**asdict(f), "path": list(f.path)} for f in self.flows],
        }


def export_scenario(
    topology: Topology,
    tasks: list[Task],
    coflows: list[Coflow],
    start: np.ndarray,
    *,
    bands: int = 4,
    name: str = "scenario",
) -> Scenario:
    """The non-empty transfers of ``coflows`` whose route leaves a server, released at ``start`` (a
    flow-level run's start times, indexed like ``tasks``), on the network part of ``topology``:
    NICs become hosts, network switches stay switches, links crossed by no flow are kept; the
    scenario routes as ``topology`` does."""
    if bands < 1:
        raise SimulationError(f"bands must be >= 1, got {bands}")
    picked = []
    for coflow in coflows:
        for i in coflow.flows:
            path = _network_path(topology, tasks[i])
            if path and tasks[i].bytes > 0:
                picked.append((coflow, i, path))
    if not picked:
        raise SimulationError("no flow of these coflows crosses the network")
    t0 = min(float(start[i]) for _, i, _ in picked)
    priorities = np.array([tasks[i].priority for _, i, _ in picked])
    distinct, rank = np.unique(priorities, return_inverse=True)
    band = rank.reshape(-1) * bands // len(distinct)
    flows = tuple(
        ScenarioFlow(
            tasks[i].id, c.id, c.kind, path[0], path[-1], math.ceil(tasks[i].bytes), float(start[i]) - t0, int(b), path
        )
        for (c, i, path), b in zip(picked, band.tolist())
    )
    kinds = {d.id: d.kind for d in topology.devices}
    links = tuple(
        ScenarioLink(link.a, link.b, link.bandwidth_gbps * 8e9, link.latency_us)
        for link in topology.links
        if link.kind in NETWORK_LINKS
    )
    nodes = list(dict.fromkeys(n for link in links for n in (link.a, link.b)))
    return Scenario(
        name,
        bands,
        tuple(n for n in nodes if kinds[n] == "nic"),
        tuple(n for n in nodes if kinds[n] == "switch"),
        links,
        flows,
        topology.routing,
    )


def _network_path(topology: Topology, task: Transfer) -> tuple[str, ...]:
    hops = [h for h in topology.route(task.src, task.dst) if topology.links[h.link].kind in NETWORK_LINKS]
    return (hops[0].src, *(h.dst for h in hops)) if hops else ()


def write_scenario(scenario: Scenario, path: str | Path) -> None:
    """JSON, written atomically."""
    with atomic_write(path) as out:
        out.write(json.dumps(scenario.to_dict()).encode())


def read_scenario(path: str | Path) -> Scenario:
    """A scenario written by :func:`write_scenario`, validated; :class:`SimulationError` naming the
    first problem otherwise."""
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise SimulationError(f"{path}: not a {FORMAT} version {VERSION} file")
    try:
        nodes = data["nodes"]
        return Scenario(
            str(data["name"]),
            int(data["bands"]),
            tuple(str(n["id"]) for n in nodes if n["kind"] == "host"),
            tuple(str(n["id"]) for n in nodes if n["kind"] == "switch"),
            tuple(
                ScenarioLink(str(k["a"]), str(k["b"]), float(k["bits_per_second"]), float(k["latency_us"]))
                for k in data["links"]
            ),
            tuple(
                ScenarioFlow(
                    str(f["id"]),
                    str(f["coflow"]),
                    str(f["kind"]),
                    str(f["src"]),
                    str(f["dst"]),
                    int(f["bytes"]),
                    float(f["release_s"]),
                    int(f["band"]),
                    tuple(str(p) for p in f["path"]),
                )
                for f in data["flows"]
            ),
            str(data.get("routing", "ecmp")),
        )
    except KeyError as exc:
        raise SimulationError(f"{path}: missing field {exc}") from None
    except (TypeError, ValueError) as exc:
        raise SimulationError(f"{path}: {exc}") from None


def _check(s: Scenario) -> None:
    if s.bands < 1:
        raise SimulationError(f"scenario {s.name!r}: bands must be >= 1, got {s.bands}")
    if s.routing not in ROUTINGS:
        raise SimulationError(f"scenario {s.name!r}: routing must be one of {', '.join(ROUTINGS)}, got {s.routing!r}")
    nodes = [*s.hosts, *s.switches]
    if len(set(nodes)) != len(nodes):
        raise SimulationError(f"scenario {s.name!r}: node ids repeat")
    hosts = set(s.hosts)
    linked = set()
    for link in s.links:
        if link.a not in nodes or link.b not in nodes or link.a == link.b:
            raise SimulationError(f"scenario {s.name!r}: link {link.a}-{link.b} must join two different nodes")
        if not (link.bits_per_second > 0 and link.latency_us >= 0):
            raise SimulationError(
                f"scenario {s.name!r}: link {link.a}-{link.b} needs bits_per_second > 0 and latency_us >= 0"
            )
        linked |= {(link.a, link.b), (link.b, link.a)}
    seen = set()
    for f in s.flows:
        where = f"scenario {s.name!r}: flow {f.id!r}"
        if f.id in seen:
            raise SimulationError(f"{where} repeats")
        seen.add(f.id)
        if f.src not in hosts or f.dst not in hosts or f.src == f.dst:
            raise SimulationError(f"{where}: src and dst must be two different hosts")
        if f.bytes < 1 or not (f.release_s >= 0) or not 0 <= f.band < s.bands:
            raise SimulationError(f"{where}: needs bytes >= 1, release_s >= 0 and 0 <= band < {s.bands}")
        if f.path[0] != f.src or f.path[-1] != f.dst or any(p in hosts for p in f.path[1:-1]):
            raise SimulationError(f"{where}: the path must go from src to dst through switches only")
        if any((a, b) not in linked for a, b in zip(f.path, f.path[1:])):
            raise SimulationError(f"{where}: the path uses a pair of nodes no link joins")


@dataclass(frozen=True)
class Replay:
    """Per flow when it finished (seconds from the first release), in the scenario's order."""

    finish: np.ndarray


def flow_level(scenario: Scenario, *, priorities: bool = True) -> Replay:
    """Replay the scenario on the flow-level simulator: each flow on its path (sprayed over every
    shortest path under ``spray``), released at its time, in strict priority by band
    (``priorities``) or all in one class."""
    devices = [Device(h, "nic", h) for h in scenario.hosts] + [
        Device(w, "switch", "network") for w in scenario.switches
    ]
    links = [Link(k.a, k.b, "infiniband", 1, k.bits_per_second / 8e9, k.latency_us) for k in scenario.links]
    tasks: list[Task] = []
    clock: dict[str, tuple[float, str | None]] = {}  # per host: the last release task, chained
    for n, f in sorted(enumerate(scenario.flows), key=lambda item: item[1].release_s):
        at, last = clock.get(f.src, (0.0, None))
        wait = f"release{n}"
        tasks.append(Compute(wait, f.src, f.release_s - at, (last,) if last else ()))
        clock[f.src] = (f.release_s, wait)
        path = f.path if scenario.routing == "ecmp" else None
        tasks.append(Transfer(f"flow{n}", f.src, f.dst, float(f.bytes), f.band if priorities else 0, path, (wait,)))
    result = simulate(Topology(scenario.name, devices, links, routing=scenario.routing), tasks, timeline=False)
    index = {t.id: i for i, t in enumerate(tasks)}
    return Replay(np.array([result.finish[index[f"flow{n}"]] for n in range(len(scenario.flows))]))


def coflow_completion(scenario: Scenario, finish: np.ndarray) -> dict[str, float]:
    """Per coflow: its last flow's finish minus its first flow's release (seconds)."""
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for f, end in zip(scenario.flows, finish.tolist()):
        first[f.coflow] = min(first.get(f.coflow, math.inf), f.release_s)
        last[f.coflow] = max(last.get(f.coflow, -math.inf), end)
    return {c: last[c] - first[c] for c in first}
