"""Request streams for multi-path selection: arrival times, request types, sizes and dependencies.

Two sources:

- ``poisson:load=L,size=S,types=T1+T2,...``: Poisson arrivals, each request of a type drawn
  uniformly. ``load`` is the offered load as a fraction of the direct paths' capacity (at load 1 the
  busiest link or compute device of the all-``direct`` assignment is busy all the time); ``rate=R``
  (requests per second) is the alternative. Options: ``n`` requests (default 1000), ``seed``
  (default 0), ``dep`` (probability that a request must follow the previous request of its type,
  default 0), ``compute`` (seconds at the destination, for ``SRC:DST`` types, default 0).
- a CSV file with a header ``time,type`` and optional columns ``bytes`` (overrides the type's size)
  and ``after`` (0-based row of an earlier request this one must follow; empty for none).

Types are ``SRC:DST`` (or ``SRC:DST1|DST2``, served at either) with paths from
:func:`commgraph.plan.paths.candidate_paths`, or names of a path set's types.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from commgraph.errors import PlanError
from commgraph.units import parse_bytes

POISSON_KEYS = ("load", "rate", "size", "types", "n", "seed", "dep", "compute")


@dataclass(frozen=True)
class RequestStream:
    """``arrival`` seconds (non-decreasing), ``kind`` type index, ``nbytes`` size and ``after``
    (index of an earlier request this one must follow, -1 for none), one entry per request."""

    arrival: np.ndarray
    kind: np.ndarray
    nbytes: np.ndarray
    after: np.ndarray

    def __post_init__(self) -> None:
        n = self.arrival.shape[0]
        if any(a.shape != (n,) for a in (self.kind, self.nbytes, self.after)):
            raise PlanError("a request stream's arrays must all have one entry per request")
        if n == 0:
            raise PlanError("the request stream is empty")
        if np.any(np.diff(self.arrival) < 0) or not np.all(np.isfinite(self.arrival)) or self.arrival[0] < 0:
            raise PlanError("request arrival times must be finite, >= 0 and non-decreasing")
        if np.any(self.after >= np.arange(n)) or np.any(self.after < -1):
            raise PlanError("a request may only follow an earlier request ('after' must be a smaller row)")
        if np.any(self.nbytes < 0):
            raise PlanError("request sizes must be >= 0")

    def __len__(self) -> int:
        return int(self.arrival.shape[0])


@dataclass(frozen=True)
class PoissonSpec:
    types: tuple[str, ...]
    size: float
    load: float | None
    rate: float | None
    n: int
    seed: int
    dep: float
    compute: float


def _workload_options(text: str, kind: str, keys: tuple[str, ...]) -> dict[str, str]:
    """``KIND:key=value,...`` -> {key: value}; an unknown key or an item without ``=`` is a
    :class:`PlanError` naming the keys ``kind`` takes."""
    body = text.split(":", 1)[1] if ":" in text else ""
    options: dict[str, str] = {}
    for item in filter(None, body.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in keys:
            raise PlanError(f"bad workload option {item!r}; {kind} takes {', '.join(k + '=' for k in keys)}")
        if not _finite_or_text(value):
            raise PlanError(f"bad workload option {item!r}: must be a finite number")
        options[key] = value
    return options


def _finite_or_text(value: str) -> bool:
    """False for a number that is not finite (``inf``, ``nan``); True for any other value."""
    try:
        return math.isfinite(float(value))
    except ValueError:
        return True


def parse_poisson(text: str) -> PoissonSpec:
    """``poisson:load=0.7,size=1M,types=cpu0:gpu0+cpu0:gpu3`` -> its options, checked."""
    options = _workload_options(text, "poisson", POISSON_KEYS)
    if ("load" in options) == ("rate" in options):
        raise PlanError("a poisson workload needs exactly one of load=FRACTION or rate=PER_SECOND")
    try:
        spec = PoissonSpec(
            types=tuple(filter(None, options.get("types", "").split("+"))),
            size=parse_bytes(options.get("size", "1M")),
            load=float(options["load"]) if "load" in options else None,
            rate=float(options["rate"]) if "rate" in options else None,
            n=int(options.get("n", 1000)),
            seed=int(options.get("seed", 0)),
            dep=float(options.get("dep", 0.0)),
            compute=float(options.get("compute", 0.0)),
        )
    except ValueError as exc:
        raise PlanError(f"bad poisson workload {text!r}: {exc}") from None
    if not (spec.load or spec.rate or 0) > 0 or spec.n < 1 or not 0 <= spec.dep <= 1 or spec.compute < 0:
        raise PlanError(f"bad poisson workload {text!r}: load or rate must be > 0, n >= 1, 0 <= dep <= 1, compute >= 0")
    return spec


def poisson_stream(spec: PoissonSpec, type_bytes: np.ndarray, rate: float) -> RequestStream:
    """``spec.n`` requests at ``rate`` per second, types drawn uniformly; with ``spec.dep``, a
    request follows the previous request of its type with that probability."""
    rng = np.random.default_rng(spec.seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate, spec.n))
    kind = rng.integers(0, type_bytes.shape[0], spec.n)
    after = np.full(spec.n, -1, dtype=np.int64)
    if spec.dep > 0:
        after = np.where(rng.random(spec.n) < spec.dep, previous_of_type(kind), -1)
    return RequestStream(arrival, kind.astype(np.int64), type_bytes[kind].astype(np.float64), after)


def previous_of_type(kind: np.ndarray) -> np.ndarray:
    """For each request, the latest earlier request of the same type (-1 for the first)."""
    order = np.lexsort((np.arange(kind.shape[0]), kind))  # by type, then arrival
    same = kind[order][1:] == kind[order][:-1]
    previous = np.full(kind.shape[0], -1, dtype=np.int64)
    previous[order[1:][same]] = order[:-1][same]
    return previous


def with_ordered_types(stream: RequestStream, ordered: np.ndarray) -> RequestStream:
    """``stream`` where every request of a type in ``ordered`` (a mask over types) follows the
    previous request of its type, unless it already follows another."""
    follows = ordered[stream.kind] & (stream.after < 0)
    after = np.where(follows, previous_of_type(stream.kind), stream.after)
    return replace(stream, after=after)


def trace_rows(path: str | Path) -> list[dict[str, str]]:
    """A CSV trace's rows, its columns checked."""
    path = Path(path)
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    except FileNotFoundError:
        raise PlanError(f"{path}: no such file") from None
    if not rows:
        raise PlanError(f"{path}: no requests (expected a header time,type[,bytes][,after] and one row each)")
    header = set(rows[0])
    if not {"time", "type"} <= header or header - {"time", "type", "bytes", "after"}:
        raise PlanError(f"{path}: columns must be time,type and optionally bytes, after; got {sorted(header)}")
    return rows


def read_trace(path: str | Path, type_names: list[str], type_bytes: np.ndarray) -> RequestStream:
    """A CSV trace (see the module docstring); errors name the line."""
    rows = trace_rows(path)
    index = {name: i for i, name in enumerate(type_names)}
    arrival, kind, nbytes, after = [], [], [], []
    for line, row in enumerate(rows, start=2):
        if row["type"] not in index:
            raise PlanError(
                f"{path}, line {line}: unknown request type {row['type']!r}; known: {', '.join(type_names)}"
            )
        try:
            arrival.append(float(row["time"]))
            kind.append(index[row["type"]])
            nbytes.append(float(row["bytes"]) if row.get("bytes") else float(type_bytes[kind[-1]]))
            after.append(int(row["after"]) if row.get("after") else -1)
        except ValueError as exc:
            raise PlanError(f"{path}, line {line}: {exc}") from None
        if after[-1] >= line - 2 or after[-1] < -1:
            raise PlanError(f"{path}, line {line}: after={after[-1]} must name an earlier row (0-based)")
        if line > 2 and arrival[-1] < arrival[-2]:
            raise PlanError(f"{path}, line {line}: times must not decrease")
    return RequestStream(
        np.array(arrival), np.array(kind, dtype=np.int64), np.array(nbytes), np.array(after, dtype=np.int64)
    )


# -- the thesis's key-value store (section 6.4.2) ---------------------------------------------------

KVS_KEYS = (
    "ycsb",
    "get",
    "put",
    "load",
    "rate",
    "n",
    "seed",
    "key",
    "value",
    "cores",
    "acc_us",
    "cpu_us",
    "put_us",
    "keys",
    "zipf",
    "nic",
    "acc",
    "cpu",
)
YCSB_MIXES = {"c": (1.0, 0.0), "b": (0.95, 0.05)}  # (GET, PUT) shares: YCSB's workloads C and B


@dataclass(frozen=True)
class KvsSpec:
    """A key-value store's request stream and its servers (see :func:`parse_kvs`)."""

    get: float
    put: float
    load: float | None
    rate: float | None
    n: int
    seed: int
    key: float
    value: float
    cores: int
    acc_us: float
    cpu_us: float
    put_us: float
    keys: int
    zipf: float
    nic: str | None
    acc: str | None
    cpu: str | None

    @property
    def name(self) -> str:
        mix = next(
            (f"YCSB-{m.upper()}" for m, shares in YCSB_MIXES.items() if shares == (self.get, self.put)),
            f"GET {self.get:g} / PUT {self.put:g}",
        )
        return f"KVS {mix}"


def parse_kvs(text: str) -> KvsSpec:
    """``kvs:ycsb=b,load=1.2,cores=8`` -> its options, checked; a bad one is one line
    (:class:`PlanError`). Defaults: the thesis's testbed (section 6.4.1, 6.4.2): YCSB-C, 8 B keys and
    64 B values, 8 CPU cores; an accelerator serving a GET in 0.2 us (the 5 Mrps where the thesis's
    accelerator-only KVS saturates, Figure 6.10a) and a CPU core in 4.8 us, so the accelerator serves
    3x the whole CPU's rate (the ratio of the 71.8 and 23.0 Mops the thesis takes from its [139]);
    keys drawn from 100,000 by YCSB's Zipf law (0.99)."""
    options = _workload_options(text, "kvs", KVS_KEYS)
    if ("load" in options) == ("rate" in options):
        raise PlanError(
            "a kvs workload needs exactly one of load=FRACTION (of the direct paths' capacity) or rate=PER_SECOND"
        )
    ycsb = options.get("ycsb", "c").lower()
    if ycsb not in YCSB_MIXES:
        raise PlanError(f"bad kvs workload: ycsb must be one of {', '.join(YCSB_MIXES)}, got {ycsb!r}")
    try:
        get, put = YCSB_MIXES[ycsb]
        if "get" in options or "put" in options:
            get, put = float(options.get("get", 0.0)), float(options.get("put", 0.0))
        cpu_us = float(options.get("cpu_us", 4.8))
        spec = KvsSpec(
            get=get,
            put=put,
            load=float(options["load"]) if "load" in options else None,
            rate=float(options["rate"]) if "rate" in options else None,
            n=int(options.get("n", 1000)),
            seed=int(options.get("seed", 0)),
            key=parse_bytes(options.get("key", "8")),
            value=parse_bytes(options.get("value", "64")),
            cores=int(options.get("cores", 8)),
            acc_us=float(options.get("acc_us", 0.2)),
            cpu_us=cpu_us,
            put_us=float(options.get("put_us", cpu_us)),
            keys=int(options.get("keys", 100000)),
            zipf=float(options.get("zipf", 0.99)),
            nic=options.get("nic"),
            acc=options.get("acc"),
            cpu=options.get("cpu"),
        )
    except ValueError as exc:
        raise PlanError(f"bad kvs workload {text!r}: {exc}") from None
    if not (spec.load if spec.load is not None else spec.rate) > 0:
        raise PlanError(f"bad kvs workload {text!r}: {'load' if spec.load is not None else 'rate'} must be > 0")
    if spec.get < 0 or spec.put < 0 or abs(spec.get + spec.put - 1.0) > 1e-9:
        raise PlanError(
            f"bad kvs workload {text!r}: the mix get={spec.get:g}, put={spec.put:g} must be >= 0 and sum to 1"
        )
    if spec.cores < 1:
        raise PlanError(f"bad kvs workload {text!r}: cores must be >= 1, got {spec.cores}")
    if spec.n < 1 or spec.keys < 1 or spec.zipf < 0 or not min(spec.acc_us, spec.cpu_us, spec.put_us) > 0:
        raise PlanError(f"bad kvs workload {text!r}: n and keys must be >= 1, zipf >= 0, acc_us, cpu_us and put_us > 0")
    return spec


def kvs_stream(spec: KvsSpec, type_bytes: np.ndarray, rate: float) -> tuple[RequestStream, np.ndarray]:
    """``spec.n`` requests at ``rate`` per second: type 0 a GET, 1 a PUT (by the mix), keys drawn by
    Zipf's law. Per key, requests are ordered at every PUT: a GET follows the key's latest earlier
    PUT (it reads that write), a PUT the key's latest earlier request (so the PUTs of a key finish
    in order, each after the GETs that read the one before). GETs between two PUTs are
    concurrent. Returns the stream and each request's key."""
    rng = np.random.default_rng(spec.seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate, spec.n))
    kind = (rng.random(spec.n) < spec.put).astype(np.int64)
    weights = 1.0 / np.arange(1, spec.keys + 1) ** spec.zipf
    keys = rng.choice(spec.keys, size=spec.n, p=weights / weights.sum())
    after = np.full(spec.n, -1, dtype=np.int64)
    last: dict[int, int] = {}  # latest request per key
    last_put: dict[int, int] = {}
    for t in range(spec.n):
        k = int(keys[t])
        if kind[t] == 1:
            after[t] = last.get(k, -1)
            last_put[k] = t
        else:
            after[t] = last_put.get(k, -1)
        last[k] = t
    return RequestStream(arrival, kind, type_bytes[kind].astype(np.float64), after), keys
