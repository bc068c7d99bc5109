"""Executed all-reduce schedules: the ring and the weighted spanning trees of
:mod:`commgraph.plan.allreduce`, run on point-to-point operations, beside torch's own all_reduce;
and the arborescences of an all-gather or reduce-scatter (:mod:`commgraph.plan.gather`).

A schedule is compiled, for one rank and one tensor length, into a ``Program``: rounds of sends and
receives of contiguous slices of the flat tensor. A round's operations run concurrently; the next
round starts when they are all done, so no operation's data is ever in use by another. Rounds are
numbered alike on every rank: a message is sent and received in rounds of the same index.

Rings (reduce-scatter, then all-gather; Patarasuk and Yuan, JPDC 2009): the tensor is cut into one
contiguous share per ring by weight (rounded cumulative shares, as for trees), the rings run side by
side (NCCL's channels), and each ring's share into n segments (their sizes differ by at most one
element). In round s < n-1 the rank at ring position i
sends segment i-s to the next rank and adds segment i-s-1 from the previous one into its own; it then
holds segment i+1 summed over all ranks, and n-1 more rounds pass the sums around.

Trees (Wang, Li, Liberty and Smola, SysML'18: a convex combination of spanning trees, each
reducing its share of the data towards its root and broadcasting the result back down): the
tensor is cut into one contiguous share per tree by weight (rounded cumulative shares, so every
element belongs to exactly one tree) and every share into the same number of chunks, the largest
share's in chunks of about ``chunk_bytes``, so all trees advance together, each at its weight. Chunk c is
pipelined: a node of height h (0 at a leaf) sends its partial sum of chunk c to its parent in round
c + h, having added its children's in earlier rounds; the root, of height H, has the total after
round c + H - 1, and a node at depth d receives it in round c + H + d - 1 and passes it to its
children in the next. Once the pipeline is full every round moves one chunk over every tree edge in
each direction, for all trees at once. A node's broadcast receive of chunk c comes at least one
round after it sent its partial sum of chunk c up, so it lands in place, in the tensor.

All-gather and reduce-scatter (``schedule.collective``, :mod:`commgraph.plan.gather`): the trees are
rooted at the shards' owners, grouped by root, so device k's shard (``shard_bounds``) is the shares
of its trees; an all-gather runs only the broadcast down of every tree (each rank's tensor holding its
own shard beforehand, every shard after), a reduce-scatter only the reduction up (every rank's
tensor holding its whole input; afterwards its own shard holds the sum, the rest partial sums). The
rounds and tags are the all-reduce's, the other phase left out.

Routes: a ring hop or tree edge whose schedule splits it over several routes sends each of its
messages as that many messages, the slice cut by the routes' shares (rounded cumulative shares),
each with its own tag (the message's tag x the schedule's ``fan_out`` + the route's index). On Gloo
and on NCCL's point-to-point the pieces all travel between the same two ranks, over whatever path
the library takes between them; relaying a piece through a third GPU (PXN) is not executed.

Execution: on Gloo a round posts tagged ``isend``/``irecv`` and waits for them; on NCCL it is one
``batch_isend_irecv`` of the round's operations in tag order (the order both ends of a pair agree
on). Tags are unique per (tree, chunk, phase) in a call. The executor has its own process group, so
its tags never meet the halo exchange's, and one background thread that runs calls one after the
other in the order they were started (the same order on every rank, as NCCL needs): ``start``
returns at once, which lets the gradient sync overlap the backward pass.
"""

from __future__ import annotations

import datetime
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.distributed as dist

from commgraph.errors import PlanError
from commgraph.plan.allreduce import AllReduceSchedule, Ring, Route, Tree
from commgraph.plan.model import CommPlan, Send
from commgraph.runtime.comm import Communicator

# A tree's share is pipelined in chunks of about this many bytes. Every round costs Gloo a wake-up of
# each process it involves, which on CPUs shared by several workers outweighs the deeper pipeline of
# small chunks (benchmarks/allreduce_speed.py: 4 MiB beat 1 MiB and 256 KiB on 4 workers, 2 cores);
# NCCL rounds are kernel launches, and 1 MiB keeps deep trees' pipelines full.
CHUNK_BYTES = {"gloo": 4 << 20, "nccl": 1 << 20}


@dataclass(frozen=True)
class Transfer:
    """One message: elements ``[start, stop)`` of the flat tensor, to or from rank ``peer``."""

    peer: int
    start: int
    stop: int
    tag: int
    add: bool = False  # a receive that adds into the slice (reduce) instead of overwriting it (broadcast)

    @property
    def size(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Round:
    index: int  # the same on both ends of each of its messages
    sends: tuple[Transfer, ...]
    recvs: tuple[Transfer, ...]


@dataclass(frozen=True)
class Program:
    """One rank's share of an all-reduce of ``numel`` elements, round by round."""

    numel: int
    rounds: tuple[Round, ...]

    @property
    def elements_sent(self) -> int:
        return sum(t.size for r in self.rounds for t in r.sends)

    @property
    def scratch_elements(self) -> int:
        """Room for one round's adding receives (they land beside the tensor, then are added)."""
        return max((sum(t.size for t in r.recvs if t.add) for r in self.rounds), default=0)


def compile_program(
    schedule: AllReduceSchedule, devices: list[str], rank: int, numel: int, chunk_elements: int
) -> Program:
    """The rounds rank ``rank`` runs to all-reduce ``numel`` elements; ``devices[r]`` is the
    schedule device rank ``r`` runs on (every device of the schedule, once)."""
    rank_of = ranks_of(schedule, devices)
    rounds = _Rounds(schedule.fan_out)
    if schedule.rings:
        bounds = tree_shares(schedule.rings, numel)
        for k, (ring, lo, hi) in enumerate(zip(schedule.rings, bounds[:-1], bounds[1:])):
            _ring(rounds, ring, [rank_of[d] for d in ring.order], rank, int(lo), int(hi), k * 2 * (len(ring.order) - 1))
    else:
        bounds = tree_shares(schedule.trees, numel)
        count = max(1, -(-int(np.diff(bounds).max()) // chunk_elements))  # every tree in as many chunks
        first_chunk = 0
        up, down = schedule.collective != "allgather", schedule.collective != "reducescatter"
        for tree, lo, hi in zip(schedule.trees, bounds[:-1], bounds[1:]):
            chunks = lo + _split(hi - lo, count)
            _tree(rounds, tree, rank_of, devices[rank], chunks, first_chunk, up, down)
            first_chunk += len(chunks) - 1
    return Program(numel, rounds.build())


def rounds_plan(
    schedule: AllReduceSchedule, devices: list[str], nbytes: float, chunk_bytes: int, element_size: int = 4
) -> CommPlan:
    """The schedule as executed, for the simulator: one stage per round holding every rank's
    messages of that round, so each round pays its messages' latency and per-message overhead,
    as execution does (the single-stage plan of ``plan_allreduce`` prices the steady state)."""
    numel = max(1, int(nbytes // element_size))
    plan = CommPlan("allreduce", schedule.planner, schedule.planner, notes={"rounds": True})
    stages: dict[int, list[Send]] = {}
    for rank in range(len(devices)):
        program = compile_program(schedule, devices, rank, numel, max(1, chunk_bytes // element_size))
        for round_ in program.rounds:
            stages.setdefault(round_.index, []).extend(
                Send(devices[rank], devices[t.peer], float(t.size * element_size)) for t in round_.sends
            )
    plan.stages = [stages[k] for k in sorted(stages)]
    return plan


def ranks_of(schedule: AllReduceSchedule, devices: list[str]) -> dict[str, int]:
    """Each schedule device's rank; the job's devices must be exactly the schedule's."""
    if sorted(devices) != sorted(schedule.devices):
        raise PlanError(
            f"the {schedule.planner!r} all-reduce schedule spans {len(schedule.devices)} devices "
            f"({', '.join(schedule.devices)}) but the job's {len(devices)} ranks run on "
            f"{', '.join(devices)}: plan it on a topology whose workers are the job's"
        )
    return {device: rank for rank, device in enumerate(devices)}


def tree_shares(parts: tuple[Tree, ...] | tuple[Ring, ...], numel: int) -> np.ndarray:
    """Boundaries of each tree's (or ring's) contiguous share: rounded cumulative weights, from 0
    to ``numel``."""
    cumulative = np.cumsum([part.weight for part in parts])
    bounds = np.rint(cumulative / cumulative[-1] * numel).astype(np.int64)
    return np.concatenate([[0], bounds])


def shard_bounds(schedule: AllReduceSchedule, numel: int) -> dict[str, tuple[int, int]]:
    """An all-gather's or reduce-scatter's shards: the elements ``[start, stop)`` of the tensor
    each device holds before the all-gather, or ends with summed after the reduce-scatter (the
    shares of the trees rooted at it, contiguous)."""
    if schedule.collective == "allreduce":
        raise PlanError("an all-reduce has no shards: every rank ends with the whole sum")
    bounds, shards = tree_shares(schedule.trees, numel), {}
    for tree, lo, hi in zip(schedule.trees, bounds[:-1].tolist(), bounds[1:].tolist()):
        start, _ = shards.get(tree.root, (lo, hi))
        shards[tree.root] = (start, hi)
    return shards


def _split(numel: int, parts: int) -> np.ndarray:
    """Boundaries of ``parts`` near-equal pieces of ``numel`` elements (no parts when empty)."""
    return (np.arange(parts + 1, dtype=np.int64) * numel) // max(parts, 1)


class _Rounds:
    """Transfers collected by round index; ``build`` drops the rounds this rank has no part in. A
    transfer over several routes is cut into one transfer per route (module docstring)."""

    def __init__(self, fan_out: int = 1):
        self.fan_out = fan_out
        self._sends: dict[int, list[Transfer]] = {}
        self._recvs: dict[int, list[Transfer]] = {}

    def send(self, round_: int, transfer: Transfer, routes: tuple[Route, ...] = ()) -> None:
        for piece in self._pieces(transfer, routes):
            self._sends.setdefault(round_, []).append(piece)

    def recv(self, round_: int, transfer: Transfer, routes: tuple[Route, ...] = ()) -> None:
        for piece in self._pieces(transfer, routes):
            self._recvs.setdefault(round_, []).append(piece)

    def _pieces(self, transfer: Transfer, routes: tuple[Route, ...]) -> list[Transfer]:
        shares = [r.share for r in routes] or [1.0]
        cumulative = np.cumsum(shares)
        stops = transfer.start + np.rint(cumulative / cumulative[-1] * transfer.size).astype(np.int64)
        starts = [transfer.start, *stops[:-1].tolist()]
        pieces = [
            replace(transfer, start=int(a), stop=int(b), tag=transfer.tag * self.fan_out + k)
            for k, (a, b) in enumerate(zip(starts, stops.tolist()))
        ]
        return [piece for piece in pieces if piece.size]

    def build(self) -> tuple[Round, ...]:
        indices = sorted(self._sends.keys() | self._recvs.keys())
        return tuple(Round(r, tuple(self._sends.get(r, ())), tuple(self._recvs.get(r, ()))) for r in indices)


def _ring(rounds: _Rounds, ring: Ring, order: list[int], rank: int, lo: int, hi: int, first_tag: int) -> None:
    """Elements [lo, hi) around one ring; tags ``first_tag`` to ``first_tag + 2(n-1) - 1``."""
    n = len(order)
    i = order.index(rank)
    after, before = order[(i + 1) % n], order[(i - 1) % n]
    out_routes = ring.routes[i] if ring.routes else ()  # hop i: from position i to i + 1
    in_routes = ring.routes[(i - 1) % n] if ring.routes else ()
    bounds = lo + _split(hi - lo, n)

    def segment(k: int) -> tuple[int, int]:
        return int(bounds[k % n]), int(bounds[k % n + 1])

    for s in range(n - 1):  # reduce-scatter: add the previous rank's partial sums into ours
        tag = first_tag + s
        rounds.send(s, Transfer(after, *segment(i - s), tag=tag), out_routes)
        rounds.recv(s, Transfer(before, *segment(i - s - 1), tag=tag, add=True), in_routes)
    for s in range(n - 1):  # all-gather: pass the finished segments on
        tag = first_tag + n - 1 + s
        rounds.send(n - 1 + s, Transfer(after, *segment(i + 1 - s), tag=tag), out_routes)
        rounds.recv(n - 1 + s, Transfer(before, *segment(i - s), tag=tag), in_routes)


def _tree(
    rounds: _Rounds,
    tree: Tree,
    rank_of: dict[str, int],
    me: str,
    chunks: np.ndarray,
    first_chunk: int,
    up: bool = True,
    down: bool = True,
) -> None:
    """Reduce ``up``, then broadcast ``down``, chunk by chunk (module docstring); tags 2k (up) and
    2k + 1 (down) for the call's k-th chunk."""
    children, depth, height = tree.children()[me], tree.depths(), tree.heights()
    top, parent = height[tree.root], next((p for c, p in tree.edges if c == me), None)
    routes = {edge: tree.routes[k] if tree.routes else () for k, edge in enumerate(tree.edges)}
    for c, (lo, hi) in enumerate(zip(chunks[:-1].tolist(), chunks[1:].tolist())):
        up_tag, down_tag = 2 * (first_chunk + c), 2 * (first_chunk + c) + 1
        for child in children:
            edge = routes[child, me]
            if up:
                rounds.recv(c + height[child], Transfer(rank_of[child], lo, hi, up_tag, add=True), edge)
            if down:
                rounds.send(c + top + depth[me], Transfer(rank_of[child], lo, hi, down_tag), edge)
        if parent is not None:
            edge = routes[me, parent]
            if up:
                rounds.send(c + height[me], Transfer(rank_of[parent], lo, hi, up_tag), edge)
            if down:
                rounds.recv(c + top + depth[me] - 1, Transfer(rank_of[parent], lo, hi, down_tag), edge)


# -- execution ------------------------------------------------------------------------------------


class AllReduceWork:
    """A started all-reduce; ``wait`` blocks until the tensor holds the sum (WorkerFailed names the
    rank at fault if it cannot)."""

    def __init__(self, future: Future):
        self._future = future

    def wait(self) -> None:
        self._future.result()


class ScheduledAllReduce:
    """Sums flat tensors over the ranks by running ``schedule`` (module docstring). ``devices[r]`` is
    the schedule device rank ``r`` runs on; ``chunk_bytes`` defaults to ``CHUNK_BYTES`` of the
    backend. Made on every rank at the same point (it creates a process group); a schedule whose
    devices are not the job's is refused with PlanError."""

    def __init__(
        self, schedule: AllReduceSchedule, devices: list[str], comm: Communicator, chunk_bytes: int | None = None
    ):
        world = comm.world
        if len(devices) != world.size:
            raise PlanError(
                f"the {schedule.planner!r} all-reduce runs on {len(devices)} devices "
                f"({', '.join(devices)}) but the job has {world.size} ranks: plan it on a topology "
                f"with {world.size} workers"
            )
        ranks_of(schedule, devices)
        chunk_bytes = CHUNK_BYTES[world.backend] if chunk_bytes is None else chunk_bytes
        if chunk_bytes < 1:
            raise PlanError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
        self.schedule, self.devices, self.comm, self.chunk_bytes = schedule, list(devices), comm, chunk_bytes
        self._nccl = world.backend == "nccl"
        self.group = dist.new_group(backend=world.backend, timeout=datetime.timedelta(seconds=world.timeout))
        try:  # a first call on every rank sets the group up (NCCL's first p2p batch must include all)
            dist.all_reduce(torch.zeros(1, device=world.device), group=self.group)
        except Exception as exc:  # noqa: BLE001 - Gloo/NCCL raise RuntimeError subclasses
            raise world.explain(exc) from None
        self._programs: dict[tuple[int, int], Program] = {}
        self._scratch = torch.empty(0, device=world.device)  # where adding receives land (``_run``)
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        # a daemon: a worker that fails exits without waiting for calls that will never finish
        threading.Thread(target=self._serve, daemon=True, name="commgraph-allreduce").start()

    def program(self, numel: int, element_size: int) -> Program:
        """This rank's program for a tensor of ``numel`` elements (compiled once per length)."""
        key = (numel, element_size)
        if key not in self._programs:
            self._programs[key] = compile_program(
                self.schedule, self.devices, self.comm.world.rank, numel, max(1, self.chunk_bytes // element_size)
            )
        return self._programs[key]

    def start(self, tensor: torch.Tensor) -> AllReduceWork:
        """Begin summing ``tensor`` (1-D, contiguous, the same length on every rank) in place over
        the ranks; returns at once. Bytes sent are charged to ``comm.bytes["allreduce"]``."""
        if tensor.dim() != 1 or not tensor.is_contiguous():
            raise ValueError(f"an all-reduce runs on a contiguous 1-D tensor, got shape {tuple(tensor.shape)}")
        program = self.program(tensor.numel(), tensor.element_size())
        self.comm.bytes["allreduce"] += program.elements_sent * tensor.element_size()
        future: Future = Future()
        self._calls.put((program, tensor, future))
        return AllReduceWork(future)

    def _serve(self) -> None:
        while True:
            program, tensor, future = self._calls.get()
            try:
                self._run(program, tensor)
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for this call
                future.set_exception(exc)
            else:
                future.set_result(None)

    def _run(self, program: Program, tensor: torch.Tensor) -> None:
        scratch = self._scratch_for(program.scratch_elements, tensor)
        for round_ in program.rounds:
            buffers, offset = [], 0
            for t in round_.recvs:  # adding receives land in scratch; the others in place
                buffers.append(scratch[offset : offset + t.size] if t.add else tensor[t.start : t.stop])
                offset += t.size if t.add else 0
            self._exchange(round_, tensor, buffers)
            for t, buffer in zip(round_.recvs, buffers):
                if t.add:
                    tensor[t.start : t.stop].add_(buffer)

    def _scratch_for(self, elements: int, like: torch.Tensor) -> torch.Tensor:
        """Room for ``elements`` values like ``like``'s, kept between calls (reused pages need no
        faulting in; calls run one at a time, so one buffer serves them all)."""
        if self._scratch.numel() < elements or (self._scratch.dtype, self._scratch.device) != (like.dtype, like.device):
            self._scratch = like.new_empty(elements)
        return self._scratch

    def _exchange(self, round_: Round, tensor: torch.Tensor, buffers: list[torch.Tensor]) -> None:
        """Post the round's operations and wait for all of them."""
        posts = [(t, buffer, dist.irecv) for t, buffer in zip(round_.recvs, buffers)]
        posts += [(t, tensor[t.start : t.stop], dist.isend) for t in round_.sends]
        peer = None
        try:
            if self._nccl:  # NCCL matches a pair's messages by order: both ends post them by tag, in one batch
                posts.sort(key=lambda post: post[0].tag)
                works = [
                    (work, None)
                    for work in dist.batch_isend_irecv(
                        [dist.P2POp(op, data, t.peer, self.group, t.tag) for t, data, op in posts]
                    )
                ]
            else:
                works = [(op(data, t.peer, group=self.group, tag=t.tag), t.peer) for t, data, op in posts]
            for work, peer in works:  # noqa: B007 - the peer waited for is named in the error below
                work.wait()
        except Exception as exc:  # noqa: BLE001 - Gloo/NCCL raise RuntimeError subclasses
            raise self.comm.world.explain(exc, waiting_for=peer) from None


@dataclass
class NativeWork:
    """A started native all-reduce; ``wait`` goes through ``Communicator.wait`` (timed, failures named)."""

    comm: Communicator
    work: object

    def wait(self) -> None:
        self.comm.wait(self.work)


class NativeAllReduce:
    """torch.distributed's all_reduce (Gloo's and NCCL's own algorithms) on the gradient group."""

    def __init__(self, comm: Communicator):
        self.comm = comm

    def start(self, tensor: torch.Tensor) -> NativeWork:
        self.comm.bytes["allreduce"] += tensor.numel() * tensor.element_size()
        return NativeWork(self.comm, dist.all_reduce(tensor, group=self.comm.world.grad_group, async_op=True))
