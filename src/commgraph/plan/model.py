"""``CommPlan``: every byte a collective moves, planned once as plain data.

A plan is an ordered list of stages; a stage is a set of sends that may run concurrently; a stage
starts when the previous one has finished. A send moves either rows of a node-embedding table
(global vertex ids, ``row_bytes`` each) or an opaque byte count, from one device to another, over a
route (the devices it crosses; empty means the topology's own route) in a priority class. The
runtime executes the same object that the simulator prices.

A send's identity is (layer, direction, bin): one all-gather plan serves every layer, forward and
(reversed) backward, so the runtime supplies the layer and the direction when it executes the plan,
and the plan carries the bin, the G3 pipeline bin of the owner whose rows the send carries (0 when
the plan is not split into bins, see :mod:`commgraph.plan.bins`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from commgraph.atomic import atomic_write
from commgraph.errors import PlanError

FORMAT_VERSION = 1


@dataclass
class Send:
    """One message of a plan: ``nbytes`` from device ``src`` to device ``dst``.

    Args:
        src, dst: device ids of the plan's topology.
        nbytes: bytes moved (``len(ids) * row_bytes`` for a send of rows).
        ids: the global vertex ids of the embedding rows it carries, or None for opaque bytes
            (all-reduce, broadcast).
        route: the devices it crosses, ``src`` first and ``dst`` last; empty: the topology's own
            route (:meth:`~commgraph.topology.Topology.route`).
        priority: its priority class (0 highest).
        method: ``"zero_copy"`` or ``"copy"`` when a planner chose the transfer method (hybrid).
        bin: the owner's G3 pipeline bin of the rows it carries (0 without bins).

    Shapes:
        - **ids:** ``[len(ids)]`` (int64)
    """

    src: str
    dst: str
    nbytes: float
    ids: np.ndarray | None = None  # global vertex ids, when the payload is embedding rows
    route: tuple[str, ...] = ()
    priority: int = 0
    method: str | None = None  # "zero_copy" or "copy" when a planner chose one (hybrid)
    bin: int = 0  # the owner's pipeline bin of the rows it carries


@dataclass
class CommPlan:
    """Every byte one collective moves, as plain data (see the module's description): stages in
    order, the sends of a stage concurrent. Planners make it (:data:`commgraph.plan.PLANNERS`),
    :func:`~commgraph.plan.price` prices it on the simulator, the runtime executes it, and
    :meth:`save` / :meth:`load` keep it in a file.

    Args:
        kind: the collective (``allgather``, ``allreduce``, ``broadcast``, ``h2d``).
        planner: the planner that made it (``p2p``, ``spst``, ``ring``, ...).
        topology: the name of the topology it was planned on.
        stages: lists of :class:`Send`; a stage starts when the previous one has finished.
        row_bytes: bytes of one embedding row (sends of rows), else 0.
        notes: plain JSON-ready facts the planner reports (a fallback taken, duplicated nodes, ...).

    Example::

        >>> from commgraph.plan import CommPlan, Send
        >>> plan = CommPlan("allgather", "p2p", "dgx1-v100", row_bytes=512)
        >>> plan.stages.append([Send("gpu0", "gpu1", 1024.0), Send("gpu1", "gpu0", 512.0)])
        >>> plan.total_bytes, plan.num_sends
        (1536.0, 2)
    """

    kind: str  # "allgather" | "allreduce"
    planner: str
    topology: str
    stages: list[list[Send]] = field(default_factory=list)
    row_bytes: int = 0
    notes: dict = field(default_factory=dict)

    @property
    def total_bytes(self) -> float:
        """Bytes over all sends of all stages."""
        return float(sum(s.nbytes for stage in self.stages for s in stage))

    @property
    def num_sends(self) -> int:
        """Sends over all stages."""
        return sum(len(stage) for stage in self.stages)

    def rows_within(self, low: int, high: int) -> CommPlan:
        """The plan moving only the rows with global ids in ``low..high-1`` (one node type of a
        heterogeneous graph's homogeneous view): each send keeps those ids, a send left without
        any is dropped, stages and routes stay."""
        stages = []
        for stage in self.stages:
            kept = []
            for send in stage:
                ids = np.asarray(send.ids, dtype=np.int64)
                ids = ids[(ids >= low) & (ids < high)]
                if ids.size:
                    kept.append(replace(send, ids=ids, nbytes=float(ids.size * self.row_bytes)))
            stages.append(kept)
        return replace(self, stages=stages, notes={**self.notes, "rows": [low, high]})

    # -- files ---------------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """JSON (human-readable) or ``.npz`` (compact for large id lists), written atomically."""
        path = Path(path)
        header = {
            "format_version": FORMAT_VERSION,
            "kind": self.kind,
            "planner": self.planner,
            "topology": self.topology,
            "row_bytes": self.row_bytes,
            "notes": self.notes,
        }
        sends = [
            {
                "stage": i,
                "src": s.src,
                "dst": s.dst,
                "nbytes": s.nbytes,
                "route": list(s.route),
                "priority": s.priority,
                "method": s.method,
                "bin": s.bin,
                "has_ids": s.ids is not None,
            }
            for i, stage in enumerate(self.stages)
            for s in stage
        ]
        ids = [s.ids for stage in self.stages for s in stage if s.ids is not None]
        if path.suffix == ".npz":
            arrays = {"header": np.array(json.dumps({**header, "sends": sends}))}
            arrays["id_ptr"] = np.cumsum([0] + [len(i) for i in ids]).astype(np.int64)
            arrays["ids"] = np.concatenate(ids).astype(np.int64) if ids else np.empty(0, np.int64)
            with atomic_write(path) as handle:
                np.savez_compressed(handle, **arrays)
            return
        for send, record in zip((s for stage in self.stages for s in stage), sends):
            if send.ids is not None:
                record["ids"] = send.ids.tolist()
        with atomic_write(path) as handle:
            handle.write(json.dumps({**header, "sends": sends}).encode())

    @classmethod
    def load(cls, path: str | Path) -> CommPlan:
        """A plan written by :meth:`save` (JSON, or ``.npz`` by its suffix); never unpickles.

        Raises:
            PlanError: an unreadable file or another format version.
        """
        path = Path(path)
        try:
            if path.suffix == ".npz":
                with np.load(path, allow_pickle=False) as data:
                    header = json.loads(str(data["header"]))
                    ptr, flat = data["id_ptr"], data["ids"]
                chunks = iter(flat[ptr[i] : ptr[i + 1]] for i in range(len(ptr) - 1))
            else:
                header = json.loads(path.read_text())
                chunks = iter(np.asarray(s["ids"], dtype=np.int64) for s in header["sends"] if s["has_ids"])
        except (OSError, ValueError, KeyError) as exc:
            raise PlanError(f"{path}: not a readable plan ({exc})") from None
        if header.get("format_version") != FORMAT_VERSION:
            raise PlanError(f"{path}: plan format {header.get('format_version')}, expected {FORMAT_VERSION}")
        plan = cls(
            header["kind"], header["planner"], header["topology"], row_bytes=header["row_bytes"], notes=header["notes"]
        )
        for record in header["sends"]:
            while len(plan.stages) <= record["stage"]:
                plan.stages.append([])
            plan.stages[record["stage"]].append(
                Send(
                    record["src"],
                    record["dst"],
                    float(record["nbytes"]),
                    next(chunks) if record["has_ids"] else None,
                    tuple(record["route"]),
                    int(record["priority"]),
                    record.get("method"),
                    int(record.get("bin", 0)),
                )
            )
        return plan

    def same_as(self, other: CommPlan) -> bool:
        """Whether ``other`` is the same plan: header, stages and every send, ids included."""
        if (self.kind, self.planner, self.topology, self.row_bytes, self.notes) != (
            other.kind,
            other.planner,
            other.topology,
            other.row_bytes,
            other.notes,
        ):
            return False
        if [len(s) for s in self.stages] != [len(s) for s in other.stages]:
            return False
        for mine, theirs in zip((s for st in self.stages for s in st), (s for st in other.stages for s in st)):
            if (mine.src, mine.dst, mine.nbytes, mine.route, mine.priority, mine.method, mine.bin) != (
                theirs.src,
                theirs.dst,
                theirs.nbytes,
                theirs.route,
                theirs.priority,
                theirs.method,
                theirs.bin,
            ):
                return False
            if (mine.ids is None) != (theirs.ids is None) or (
                mine.ids is not None and not np.array_equal(mine.ids, theirs.ids)
            ):
                return False
        return True
