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
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from commgraph.errors import PlanError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
POISSON_KEYS = ("load", "rate", "size", "types", "n", "seed", "dep", "compute")


def parse_bytes(text: str) -> float:
    """``4096``, ``64K``, ``1M``, ``1G`` (powers of 1024) or ``1e9`` -> bytes."""
    text = text.strip()
    number, unit = (text[:-1], text[-1].upper()) if text and text[-1].upper() in "KMG" else (text, "")
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        raise PlanError(f"bad size {text!r}: expected bytes such as 4096, 64K, 1M or 1e9") from None
    if not value > 0:
        raise PlanError(f"bad size {text!r}: must be > 0")
    return value


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


def parse_poisson(text: str) -> PoissonSpec:
    """``poisson:load=0.7,size=1M,types=cpu0:gpu0+cpu0:gpu3`` -> its options, checked."""
    body = text.split(":", 1)[1] if ":" in text else ""
    options: dict[str, str] = {}
    for item in filter(None, body.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in POISSON_KEYS:
            raise PlanError(f"bad workload option {item!r}; poisson takes {', '.join(k + '=' for k in POISSON_KEYS)}")
        options[key] = value
    if ("load" in options) == ("rate" in options):
        raise PlanError("a poisson workload needs exactly one of load=FRACTION or rate=PER_SECOND")
    try:
        spec = PoissonSpec(
            types=tuple(filter(None, options.get("types", "").split("+"))),
            size=parse_bytes(options.get("size", "1M")),
            load=float(options["load"]) if "load" in options else None,
            rate=float(options["rate"]) if "rate" in options else None,
            n=int(options.get("n", 1000)), seed=int(options.get("seed", 0)),
            dep=float(options.get("dep", 0.0)), compute=float(options.get("compute", 0.0)))
    except ValueError as exc:
        raise PlanError(f"bad poisson workload {text!r}: {exc}") from None
    if not (spec.load or spec.rate or 0) > 0 or spec.n < 1 or not 0 <= spec.dep <= 1 or spec.compute < 0:
        raise PlanError(f"bad poisson workload {text!r}: load or rate must be > 0, n >= 1, 0 <= dep <= 1, "
                        "compute >= 0")
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
            raise PlanError(f"{path}, line {line}: unknown request type {row['type']!r}; "
                            f"known: {', '.join(type_names)}")
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
    return RequestStream(np.array(arrival), np.array(kind, dtype=np.int64), np.array(nbytes),
                         np.array(after, dtype=np.int64))
