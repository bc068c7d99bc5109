"""The baseline protocol of issue 58: two commands compared so that a maintainer of either accepts it.

Side A (the baseline, e.g. DGL) and side B (commgraph) run one after the other, alternately, A B A
B ..., for ``pairs`` pairs (at least 3), each a fresh process under the whole-tree PSS sampler of
``benchmarks/memory.py`` (:func:`pss.measure`, every 0.5 s). Both get the same thread count
(``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``NUMBA_NUM_THREADS``, read at start-up), and the caller states
what else they share (:class:`Setup`: graph file, seeds, each side's fanouts in its own order,
batch, model, optimiser, warm-up steps excluded on both sides, measured steps).

Before every run the protocol waits (at most :data:`SETTLE_SECONDS`) for the machine's 1-minute load
(``os.getloadavg``) to fall to :data:`LOAD_LIMIT` (1.0), since the previous run's own threads hold
it up for a minute after they end. It records the load then and after the run, and the CPU the rest
of the machine used while the run ran (:func:`foreign_cores`: the machine's busy CPU seconds from
``/proc/stat`` less the run's own tree's and the sampler's, over the run's wall time). A run that started above the
load limit, or beside more than :data:`FOREIGN_LIMIT` cores of other work, is *loaded*; the load
after a run counts the run's own threads, so it is recorded but flags nothing. A pair with a loaded
run is flagged, printed and in the JSON: its figure says as much about the other work on the
machine as about the two sides.

Each pair gives the ratio of B's rate to A's (:math:`r_k = \\text{rate}_B / \\text{rate}_A`, rates
over the measured steps only) and of B's peak memory to A's; the result is the median ratio with
its min and max over the pairs (:class:`Summary`), with the same over the pairs that were not
loaded beside it.

A side reports its rate by what its run leaves: :attr:`Side.rate` reads it (typically the JSON
object a script prints, ``{"rate": ...}``); :attr:`Side.until`, a test of the run's progress, keeps
the peak of the measured phase apart from the whole run's (:func:`pss.measure`'s ``until``).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pss import GB, Measurement, measure

LOAD_LIMIT = 1.0
FOREIGN_LIMIT = 0.25  # cores of other work beside a run
SETTLE_SECONDS = 180.0
MIN_PAIRS = 3


@dataclass
class Setup:
    """What both sides share, stated with the result.

    ``fanouts`` maps each side's name to its fanout list in its own order (DGL lists the first GNN
    layer's first, PyG and commgraph the seeds' hop first); ``warmup`` is the steps each side runs
    before its clock starts, ``steps`` the measured ones; ``unit`` what a rate counts per second
    (``seeds``, ``edges``)."""

    graph: str
    threads: int
    seeds: str
    fanouts: dict[str, str]
    batch: str
    model: str
    optimiser: str
    warmup: int
    steps: int
    unit: str


@dataclass
class Side:
    """One side: its command and how its rate is read from a finished run.

    ``rate`` gets the file the run's standard output went to and returns units per second over
    the measured steps (None: the run reported none). ``before`` runs before each run (e.g. to
    remove the last run's metrics file)."""

    name: str
    command: list[str]
    rate: Callable[[Path], float | None]
    env: dict | None = None
    until: Callable[[], bool] | None = None
    before: Callable[[], None] | None = None


@dataclass
class Run:
    """One run of one side."""

    side: str
    status: str
    rate: float | None
    peak_bytes: int  # the measured phase's peak where the side keeps it apart (until), else the run's
    run_peak_bytes: int  # the whole run's
    seconds: float
    load_before: float
    load_after: float
    foreign_cores: float = 0.0  # the rest of the machine's CPU use while the run ran

    @property
    def loaded(self) -> bool:
        return self.load_before > LOAD_LIMIT or self.foreign_cores > FOREIGN_LIMIT


@dataclass
class Pair:
    """A then B; B's rate and peak over A's."""

    index: int
    a: Run
    b: Run

    @property
    def loaded(self) -> bool:
        return self.a.loaded or self.b.loaded

    @property
    def ratio(self) -> float | None:
        if not self.a.rate or self.b.rate is None:
            return None
        return self.b.rate / self.a.rate

    @property
    def memory_ratio(self) -> float | None:
        if self.a.status != "ok" or self.b.status != "ok" or not self.a.peak_bytes:
            return None
        return self.b.peak_bytes / self.a.peak_bytes


@dataclass
class Spread:
    """The median of some values, with their min and max (None: no values)."""

    median: float | None
    minimum: float | None
    maximum: float | None
    count: int

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        if not values:
            return cls(None, None, None, 0)
        return cls(statistics.median(values), min(values), max(values), len(values))

    def text(self, fmt: str = "{:.3f}x") -> str:
        if self.median is None:
            return "none"
        low, high = fmt.format(self.minimum), fmt.format(self.maximum)
        return f"median {fmt.format(self.median)} (min {low}, max {high}, n={self.count})"


@dataclass
class Summary:
    """The pairs' speed and memory ratios (B over A), over every pair and over the unloaded ones."""

    speed: Spread
    memory: Spread
    quiet_speed: Spread
    quiet_memory: Spread
    loaded_pairs: list[int] = field(default_factory=list)
    failed_pairs: list[int] = field(default_factory=list)


def summarise(pairs: list[Pair]) -> Summary:
    """The median ratios with their min and max; the loaded pairs (a run above :data:`LOAD_LIMIT`)
    and those with no ratio (a run that failed or reported no rate) named by index."""
    done = [p for p in pairs if p.ratio is not None and p.memory_ratio is not None]
    quiet = [p for p in done if not p.loaded]
    return Summary(
        speed=Spread.of([p.ratio for p in done]),
        memory=Spread.of([p.memory_ratio for p in done]),
        quiet_speed=Spread.of([p.ratio for p in quiet]),
        quiet_memory=Spread.of([p.memory_ratio for p in quiet]),
        loaded_pairs=[p.index for p in pairs if p.loaded],
        failed_pairs=[p.index for p in pairs if p not in done],
    )


def threads_env(threads: int, base: dict | None = None) -> dict:
    """``base`` (default: this process's environment) with torch's, MKL's and numba's thread counts set."""
    counts = {name: str(threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")}
    return {**(os.environ if base is None else base), **counts}


def json_rate(key: str = "rate") -> Callable[[Path], float | None]:
    """A :attr:`Side.rate` reading ``key`` of the last JSON object line the run printed."""

    def read(stdout: Path) -> float | None:
        for line in reversed(stdout.read_text().splitlines() if stdout.is_file() else []):
            if line.startswith("{"):
                return json.loads(line).get(key)
        return None

    return read


def settle(limit: float = LOAD_LIMIT, most: float = SETTLE_SECONDS) -> float:
    """Wait until the 1-minute load is at most ``limit`` (at most ``most`` seconds); the load then."""
    deadline = time.monotonic() + most
    while os.getloadavg()[0] > limit and time.monotonic() < deadline:
        time.sleep(5.0)
    return os.getloadavg()[0]


def busy_cpu_seconds() -> float:
    """The CPU seconds this machine's processors have spent busy since boot (``/proc/stat``: every
    field but idle and iowait)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """The CPU seconds of this process (the PSS sampler) and of its finished children (and theirs)."""
    usages = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return sum(usage.ru_utime + usage.ru_stime for usage in usages)


def foreign_cores(busy: float, own: float, seconds: float) -> float:
    """The cores the rest of the machine kept busy over ``seconds``: ``busy`` CPU seconds of the
    whole machine less ``own``, the run's tree's."""
    return max(0.0, busy - own) / seconds if seconds > 0 else 0.0


def run_side(side: Side, work: Path, tag: str, cap_bytes: float | None = None, time_limit: float | None = None) -> Run:
    """One measured run of ``side``; its standard output kept in ``work/<side>-<tag>.out``."""
    if side.before is not None:
        side.before()
    out = work / f"{side.name}-{tag}.out"
    load_before = settle()
    print(f"# {side.name} ({tag}, load {load_before:.2f}): {' '.join(side.command)}", file=sys.stderr, flush=True)
    busy, own, started = busy_cpu_seconds(), own_cpu_seconds(), time.perf_counter()
    run: Measurement = measure(
        side.command, env=side.env, cap_bytes=cap_bytes, time_limit=time_limit, stdout_path=out, until=side.until
    )
    elsewhere = foreign_cores(busy_cpu_seconds() - busy, own_cpu_seconds() - own, time.perf_counter() - started)
    load_after = os.getloadavg()[0]
    rate = side.rate(out) if run.status == "ok" else None
    peak = run.peak_bytes if run.before_bytes is None else run.before_bytes
    print(
        f"#   {run.status} in {run.seconds:.1f} s, peak {peak / GB:.2f} GB, rate {rate}, load after "
        f"{load_after:.2f}, other work {elsewhere:.2f} cores"
        + (f"\n#   {run.stderr_tail}" if run.status != "ok" else ""),
        file=sys.stderr,
        flush=True,
    )
    return Run(side.name, run.status, rate, peak, run.peak_bytes, run.seconds, load_before, load_after, elsewhere)


def run_pairs(
    a: Side, b: Side, pairs: int, work: Path, cap_bytes: float | None = None, time_limit: float | None = None
) -> list[Pair]:
    """``pairs`` pairs, A then B in each; each pair printed as it finishes."""
    if pairs < MIN_PAIRS:
        sys.exit(f"the protocol needs at least {MIN_PAIRS} pairs, got {pairs}: pass --pairs {MIN_PAIRS} or more")
    work.mkdir(parents=True, exist_ok=True)
    done = []
    for index in range(1, pairs + 1):
        pair = Pair(
            index,
            run_side(a, work, str(index), cap_bytes, time_limit),
            run_side(b, work, str(index), cap_bytes, time_limit),
        )
        print(pair_line(pair), flush=True)
        done.append(pair)
    return done


def pair_line(pair: Pair) -> str:
    def one(run: Run) -> str:
        rate = f"{run.rate:,.0f}/s" if run.rate is not None else run.status
        return (
            f"{run.side} {rate}, {run.peak_bytes / GB:.2f} GB (load {run.load_before:.2f}->{run.load_after:.2f}, "
            f"other work {run.foreign_cores:.2f} cores)"
        )

    ratio = "-" if pair.ratio is None else f"{pair.ratio:.3f}x"
    memory = "-" if pair.memory_ratio is None else f"{pair.memory_ratio:.3f}x"
    flag = f"  LOADED (1-minute load above {LOAD_LIMIT} at a start, or above {FOREIGN_LIMIT} cores of other work)"
    flag = flag if pair.loaded else ""
    return f"pair {pair.index}: {one(pair.a)}; {one(pair.b)}: speed {ratio}, memory {memory}{flag}"


def report(setup: Setup, pairs: list[Pair], targets: tuple[float, float | None] | None = None) -> dict:
    """The result as JSON (setup, every run, the summary) and its closing lines printed: the median
    ratios with min and max, the loaded pairs, and ``targets`` (speed at least, memory at most; a
    memory target of None: memory is recorded but judged against nothing)."""
    summary = summarise(pairs)
    a, b = pairs[0].a.side, pairs[0].b.side
    print(
        f"\n{b}/{a}, {setup.unit} per second: {summary.speed.text()}; peak memory: {summary.memory.text()}\n"
        f"  pairs not loaded only: speed {summary.quiet_speed.text()}; memory {summary.quiet_memory.text()}\n"
        f"  loaded pairs (1-minute load above {LOAD_LIMIT} at a run's start, or other work above {FOREIGN_LIMIT} "
        f"cores during it): {summary.loaded_pairs or 'none'}"
        + (f"; pairs with no ratio: {summary.failed_pairs}" if summary.failed_pairs else "")
    )
    print(
        f"  setup: {setup.graph}; {setup.threads} threads each; seeds {setup.seeds}; fanouts "
        + ", ".join(f"{name} {order}" for name, order in setup.fanouts.items())
        + f"; batch {setup.batch}; {setup.model}; {setup.optimiser}; {setup.warmup} warm-up steps excluded "
        f"on both sides, {setup.steps} measured"
    )
    verdict = {}
    if targets is not None and summary.speed.median is not None:
        speed, memory = targets
        verdict = {"speed_target": speed, "speed_met": summary.speed.median >= speed}
        line = f"  targets: speed >= {speed}x {'met' if verdict['speed_met'] else 'missed'}"
        if memory is not None:
            verdict.update(memory_target=memory, memory_met=summary.memory.median <= memory)
            line += f", memory <= {memory}x {'met' if verdict['memory_met'] else 'missed'}"
        print(line)
    return {
        "setup": asdict(setup),
        "load_limit": LOAD_LIMIT,
        "foreign_limit": FOREIGN_LIMIT,
        "pairs": [{**asdict(p), "ratio": p.ratio, "memory_ratio": p.memory_ratio, "loaded": p.loaded} for p in pairs],
        "summary": asdict(summary),
        **verdict,
    }
