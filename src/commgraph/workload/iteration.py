"""One training iteration of a transformer as a task DAG of computations and coflows
(thesis-dgs-g3-hermod-leo, §5.2, Figure 5.4).

Every (pipeline stage, data-parallel replica) is one server-sized tensor-parallel group that works in
lockstep, so its computations run on its first GPU (the leader) while its transfers leave from and
arrive at every GPU of the group. Per layer and micro-batch a stage computes (and, for MoE layers,
exchanges tokens); between stages it sends activations forward and gradients backward; after a
layer's last backward pass its gradients are all-reduced across replicas. Coflows:

- ``pp``: one stage's hand-off of one micro-batch, one flow per tensor-parallel rank (its ``1/tp``
  slice), labelled with the boundary's layer;
- ``ep``: the all-to-all of one EP group for one MoE layer (dispatch and combine, forward and
  backward), flow sizes from seeded token routing (:func:`token_counts`); a stage's expert time is
  its busiest rank's tokens. With ``ep_flows="server"`` (a coarser model, for servers whose GPUs
  share one network link) the EP groups that span the same servers exchange as one all-to-all
  between those servers' leaders, each flow the tokens one server's GPUs send to another's, summed
  over the groups; tokens between two GPUs of one server (NVSwitch traffic) are left out. It has
  ``1 / (GPUs of a server in the exchange)`` as many flows;
- ``dp``: one tensor-parallel rank's gradient all-reduce of one layer across replicas, ring or tree,
  labelled with the last micro-batch (it starts after the last one, Table 5.4); with ZeRO-2
  (Rajbhandari et al., SC'20) a ring reduce-scatter and, after it, a ring all-gather of the updated
  parameters, each ``(n - 1)/n`` of the bytes per flow.

Several iterations run without a barrier between them (clip-by-value, the thesis's Case III): a
stage's next iteration starts after its last backward pass, and its first micro-batch's forward
pass of a layer waits only for that layer's DP coflow (the all-gather under ZeRO-2) to reach its
GPUs. Ids of iteration ``k > 0`` start with ``i{k}.``.

Tensor-parallel all-reduces stay inside a server, where only they use the NVSwitch links; each is
priced once by simulating it alone on the server and added to the computation it blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from commgraph.errors import SimulationError
from commgraph.sim import Compute, Transfer, simulate
from commgraph.sim.coflow import Coflow
from commgraph.sim.dag import Task, paused_collection
from commgraph.topology.model import Topology
from commgraph.workload.collectives import (
    ALLREDUCE,
    FlowSet,
    all_to_all,
    path_latency,
    ring_allreduce,
    ring_half,
    token_counts,
)
from commgraph.workload.layout import Layout, Op
from commgraph.workload.models import GPUSpec, ModelSpec

GRAD_BYTES = 2.0  # bf16 gradients
PARAM_BYTES = 2.0  # bf16 parameters (what ZeRO-2's all-gather sends)


@dataclass
class Iteration:
    """The DAG of one iteration and its coflows; ``tokens`` is what the iteration trains on."""

    model: ModelSpec
    layout: Layout
    gpu: GPUSpec
    topology: Topology
    tasks: list[Task]
    coflows: list[Coflow]
    tokens: int
    leaders: list[str] = field(default_factory=list)
    ends: list[list[str]] = field(default_factory=list)  # per iteration: each pipeline's last computation

    @property
    def iterations(self) -> int:
        return max(len(self.ends), 1)

    @property
    def flows(self) -> int:
        return sum(len(c.flows) for c in self.coflows)


DP_COLLECTIVES = ("allreduce", "zero2")
EP_FLOWS = ("gpu", "server")


def build_iteration(
    model: ModelSpec,
    layout: Layout,
    gpu: GPUSpec,
    topology: Topology,
    *,
    dp_allreduce: str = "ring",
    routing_alpha: float = 1.0,
    seed: int = 0,
    iterations: int = 1,
    dp_collective: str = "allreduce",
    ep_flows: str = "gpu",
    barrier: bool = False,
    grad_bytes: float = GRAD_BYTES,
) -> Iteration:
    """The DAG of ``iterations`` iterations of ``model`` split by ``layout`` over ``topology``'s
    first GPUs; ``dp_collective`` is ``allreduce`` (ring or tree, ``dp_allreduce``) or ``zero2``
    (ring reduce-scatter then all-gather); ``ep_flows`` is ``gpu`` (an all-to-all per EP group, GPU
    to GPU) or ``server`` (per set of servers, leader to leader: module docstring). ``barrier``
    adds clip-by-norm's barrier (the thesis's l.1494): the global gradient norm needs every
    layer's gradients reduced, so no parameter update (ZeRO-2's all-gathers, or with all-reduces
    the next iteration's forward passes) starts before every reduce-scatter (all-reduce) of the
    iteration has ended. ``grad_bytes`` is the bytes per reduced gradient (2: bf16; 4: fp32, as
    Megatron-LM reduces bf16 models' gradients by default); all-gathers send bf16 parameters."""
    layout.check(model)
    if dp_allreduce not in ALLREDUCE:
        raise SimulationError(f"dp all-reduce must be one of {sorted(ALLREDUCE)}, got {dp_allreduce!r}")
    if dp_collective not in DP_COLLECTIVES:
        raise SimulationError(f"dp collective must be one of {DP_COLLECTIVES}, got {dp_collective!r}")
    if ep_flows not in EP_FLOWS:
        raise SimulationError(f"ep flows must be one of {EP_FLOWS}, got {ep_flows!r}")
    if iterations < 1:
        raise SimulationError(f"iterations must be >= 1, got {iterations}")
    if not routing_alpha > 0:
        raise SimulationError(f"routing skew alpha must be > 0, got {routing_alpha}")
    if not grad_bytes > 0:
        raise SimulationError(f"gradient bytes must be > 0, got {grad_bytes}")
    gpus = [d.id for d in topology.gpus]
    if len(gpus) < layout.gpus:
        raise SimulationError(f"the layout needs {layout.gpus} GPUs, topology {topology.name!r} has {len(gpus)}")
    builder = _Builder(model, layout, gpu, topology, gpus[: layout.gpus], dp_allreduce, routing_alpha, seed)
    builder.zero2 = dp_collective == "zero2"
    builder.ep_flows = ep_flows
    builder.barrier, builder.grad_bytes = barrier, grad_bytes
    builder.exchanges, builder.place = builder.ep_exchanges()
    with paused_collection():
        return builder.build(iterations)


def compute_id(prefix: str, stage: int, replica: int, op: Op, layer: int, part: str = "") -> str:
    """The id of a stage's computation of ``op`` on ``layer`` (``part``: ``.a`` attention, ``.e``
    experts of a MoE layer); ``prefix`` is ``i{k}.`` for iteration ``k > 0``."""
    return f"{prefix}c{stage}.{replica}.{'B' if op.backward else 'F'}{op.microbatch}.L{layer}{part}"


@dataclass(frozen=True)
class _Exchange:
    """One all-to-all of a stage: its members as (replica, tp rank) and the EP groups it carries."""

    members: list[tuple[int, int]]
    groups: tuple[int, ...]


class _Builder:
    def __init__(self, model, layout: Layout, gpu: GPUSpec, topology, gpus, dp_allreduce, alpha, seed):
        self.model, self.layout, self.gpu, self.topology, self.gpus = model, layout, gpu, topology, gpus
        self.dp_allreduce, self.alpha, self.seed = dp_allreduce, alpha, seed
        self.tasks: list[Task] = []
        self.latencies: dict[tuple[str, str], float] = {}
        self.coflows: list[Coflow] = []
        self.vstages = layout.pp * layout.chunks
        self.per_vstage = model.layers // self.vstages
        self.tp_seconds = self._tp_allreduce_seconds(model.activation_bytes())
        self.dense_seconds, self.attention_seconds = self._layer_seconds()
        self.counts: dict[tuple[int, int, int, int], np.ndarray] = {}
        self.zero2 = False
        self.iteration = 0
        self.prefix = ""
        self.gates: dict[tuple[int, int, int], list[str]] = {}  # (stage, replica, layer): DP flows in
        self.ep_flows = "gpu"
        self.barrier = False
        self.grad_bytes = GRAD_BYTES
        self.exchanges: list[_Exchange] = []
        self.place: dict[tuple[int, int], tuple[int, int]] = {}  # (replica, tp rank): (exchange, position)

    # -- names ------------------------------------------------------------------------------------

    def gpu_of(self, stage: int, replica: int, tp_rank: int) -> str:
        return self.gpus[self.layout.rank(stage, replica, tp_rank)]

    def group(self, stage: int, replica: int) -> list[str]:
        """The GPUs of a stage's tensor-parallel group, by tp rank."""
        first = self.layout.rank(stage, replica, 0)
        return self.gpus[first : first + self.layout.tp]

    def replicas(self, stage: int, tp_rank: int) -> list[str]:
        """The GPUs of one tp rank of a stage across the replicas, by replica."""
        first, L = self.layout.rank(stage, 0, tp_rank), self.layout
        return self.gpus[first : first + L.tp * L.dp : L.tp]

    def compute_id(self, stage: int, replica: int, op: Op, layer: int, part: str = "") -> str:
        return compute_id(self.prefix, stage, replica, op, layer, part)

    def pp_id(self, op: Op, vstage: int, replica: int) -> str:
        return f"{self.prefix}pp.{'B' if op.backward else 'F'}{op.microbatch}.v{vstage}.d{replica}"

    # -- building -----------------------------------------------------------------------------------

    def build(self, iterations: int) -> Iteration:
        L = self.layout
        tails: dict[tuple[int, int], str | None] = {}
        ends = []
        for k in range(iterations):
            self.iteration, self.prefix = k, (f"i{k}." if k else "")
            for stage in range(L.pp):
                ops = L.stage_ops(stage)
                for replica in range(L.dp):
                    last = tails.get((stage, replica))
                    for op in ops:
                        last = self._op(stage, replica, op, last)
                    tails[(stage, replica)] = last
            ends.append(list(tails.values()))
            self.gates = {}
            self._dp_coflows()
        tokens = L.microbatches * self.model.tokens * L.dp
        leaders = [self.gpu_of(s, d, 0) for s in range(L.pp) for d in range(L.dp)]
        return Iteration(self.model, L, self.gpu, self.topology, self.tasks, self.coflows, tokens, leaders, ends)

    def _compute(self, task_id: str, device: str, seconds: float, deps: list[str]) -> str:
        self.tasks.append(Compute(task_id, device, seconds, tuple(deps)))
        return task_id

    def _coflow(
        self,
        cid: str,
        kind: str,
        microbatch: int,
        layer: int,
        flows: FlowSet,
        members: list[str],
        deps: list[tuple[str, ...]],
        names: list[str] | None = None,
    ) -> list[str]:
        """Add a coflow of ``flows`` between ``members``; flow k depends on ``deps[src[k]]``."""
        first = len(self.tasks)
        ids = names or [f"{cid}.{k}" for k in range(flows.src.shape[0])]
        srcs = [members[a] for a in flows.src.tolist()]
        dsts = [members[b] for b in flows.dst.tolist()]
        hops = flows.overhead_hops
        overheads = [hops * self._latency(a, b) for a, b in zip(srcs, dsts)] if hops else [0.0] * len(ids)
        waits = [deps[a] for a in flows.src.tolist()]
        self.tasks += map(
            Transfer, ids, srcs, dsts, flows.bytes.tolist(), [0] * len(ids), [None] * len(ids), waits, overheads
        )
        if len(self.tasks) > first:
            self.coflows.append(
                Coflow(cid, kind, microbatch, layer, tuple(range(first, len(self.tasks))), self.iteration)
            )
        return ids

    def _latency(self, a: str, b: str) -> float:
        """:func:`path_latency` from ``a`` to ``b``, once per pair."""
        key = (a, b)
        if key not in self.latencies:
            self.latencies[key] = path_latency(self.topology, a, b)
        return self.latencies[key]

    def _op(self, stage: int, replica: int, op: Op, last: str | None) -> str:
        L, M = self.layout, self.model
        vstage = op.chunk * L.pp + stage
        layers = range(vstage * self.per_vstage, (vstage + 1) * self.per_vstage)
        deps = [last] if last else []
        if not op.backward and vstage > 0:
            deps += [f"{self.pp_id(op, vstage - 1, replica)}.t{t}" for t in range(L.tp)]
        if op.backward and vstage < self.vstages - 1:
            deps += [f"{self.pp_id(op, vstage + 1, replica)}.t{t}" for t in range(L.tp)]
        leader = self.gpu_of(stage, replica, 0)
        scale = 2.0 if op.backward else 1.0
        if M.moe and op.backward:  # one task the first all-to-all's flows can wait for
            deps = [self._compute(self.compute_id(stage, replica, op, layers[-1], ".in"), leader, 0.0, deps)]
        for layer in reversed(layers) if op.backward else layers:
            if not op.backward and op.microbatch == 0:  # the layer's parameters, from the last iteration
                deps = deps + self.gates.get((stage, replica, layer), [])
            if not M.moe:
                seconds = scale * self.dense_seconds[layer]
                deps = [self._compute(self.compute_id(stage, replica, op, layer), leader, seconds, deps)]
                continue
            attention = scale * self.attention_seconds[layer]
            if not op.backward:
                deps = [self._compute(self.compute_id(stage, replica, op, layer, ".a"), leader, attention, deps)]
            deps = self._experts(stage, replica, op, layer, deps, first=True)
            experts = scale * self.gpu.seconds(6.0 * M.hidden * M.ffn * self._busiest(stage, replica, op, layer))
            deps = [self._compute(self.compute_id(stage, replica, op, layer, ".e"), leader, experts, deps)]
            deps = self._experts(stage, replica, op, layer, deps, first=False)
            if op.backward:
                deps = [self._compute(self.compute_id(stage, replica, op, layer, ".a"), leader, attention, deps)]
        done = deps[0]
        target = vstage + (-1 if op.backward else 1)
        if 0 <= target < self.vstages:
            to_stage = target % L.pp
            members = self.group(stage, replica) + self.group(to_stage, replica)
            src = np.arange(L.tp)
            flows = FlowSet(src, src + L.tp, np.full(L.tp, M.activation_bytes() / L.tp))
            cid = self.pp_id(op, vstage, replica)
            boundary = layers[0] if op.backward else layers[-1]
            self._coflow(
                cid,
                "pp",
                op.microbatch,
                boundary,
                flows,
                members,
                [(done,)] * L.tp,
                [f"{cid}.t{t}" for t in range(L.tp)],
            )
        return done

    # -- expert parallelism -----------------------------------------------------------------------

    def _routing(self, stage: int, microbatch: int, layer: int, group: int) -> np.ndarray:
        key = (stage, microbatch, layer, group)
        if key not in self.counts:
            rng = np.random.default_rng([self.seed, stage, microbatch, layer, group])
            M = self.model
            self.counts[key] = token_counts(
                rng, self.layout.ep, M.experts, M.tokens // self.layout.tp, M.top_k, self.alpha
            )
        return self.counts[key]

    def _busiest(self, stage: int, replica: int, op: Op, layer: int) -> float:
        """Tokens the busiest EP rank of this server's tensor-parallel group processes."""
        busiest = 0
        for t in range(self.layout.tp):
            group, position = self.layout.ep_member(replica, t)
            busiest = max(busiest, int(self._routing(stage, op.microbatch, layer, group)[:, position].sum()))
        return float(busiest)

    def _ep_id(self, stage: int, op: Op, layer: int, which: int, group: int) -> str:
        return f"{self.prefix}ep.{'B' if op.backward else 'F'}{op.microbatch}.L{layer}.{which}.s{stage}.g{group}"

    def ep_exchanges(self) -> tuple[list[_Exchange], dict[tuple[int, int], tuple[int, int]]]:
        """The all-to-alls of a stage, one per EP group (``gpu``) or one per set of servers that EP
        groups join, members the servers' leaders (``server``); and where each rank sends from."""
        L = self.layout
        groups = range(L.tp * L.dp // L.ep)
        ranks = {g: [L.ep_rank(g, i) for i in range(L.ep)] for g in groups}
        if self.ep_flows == "gpu":
            return [_Exchange(ranks[g], (g,)) for g in groups], {
                (d, t): L.ep_member(d, t) for d in range(L.dp) for t in range(L.tp)
            }
        root = list(range(L.dp))  # union-find over the replicas (servers) an EP group joins

        def find(d: int) -> int:
            while root[d] != d:
                d = root[d]
            return d

        for g in groups:
            for d, _ in ranks[g][1:]:
                root[find(d)] = find(ranks[g][0][0])
        servers: dict[int, list[int]] = {}
        for d in range(L.dp):
            servers.setdefault(find(d), []).append(d)
        exchanges = [
            _Exchange([(d, 0) for d in members], tuple(g for g in groups if find(ranks[g][0][0]) == r))
            for r, members in servers.items()
        ]
        place = {
            (d, t): (e, x.members.index((d, 0)))
            for e, x in enumerate(exchanges)
            for d, _ in x.members
            for t in range(L.tp)
        }
        return exchanges, place

    def _exchange_counts(self, stage: int, microbatch: int, layer: int, e: int) -> np.ndarray:
        """Tokens each member of exchange ``e`` sends to each: its EP group's routing, or with
        server members its groups' routings summed per pair of servers."""
        exchange = self.exchanges[e]
        if self.ep_flows == "gpu":
            return self._routing(stage, microbatch, layer, exchange.groups[0])
        counts = np.zeros((len(exchange.members),) * 2, dtype=np.int64)
        for g in exchange.groups:
            at = np.array([self.place[self.layout.ep_rank(g, i)][1] for i in range(self.layout.ep)])
            np.add.at(counts, (at[:, None], at[None, :]), self._routing(stage, microbatch, layer, g))
        return counts

    def _experts(self, stage: int, replica: int, op: Op, layer: int, deps: list[str], *, first: bool) -> list[str]:
        """The all-to-all before (``first``) or after the experts: the stage's coflows are added once,
        by replica 0; returns the flows into this server's ranks, which its next computation waits for."""
        which = 0 if first else 1
        if replica == 0:
            for e in range(len(self.exchanges)):
                self._all_to_all(stage, op, layer, which, e)
        incoming = []
        for e, j in dict.fromkeys(self.place[(replica, t)] for t in range(self.layout.tp)):
            cid = self._ep_id(stage, op, layer, which, e)
            incoming += [f"{cid}.{i}-{j}" for i in range(len(self.exchanges[e].members)) if i != j]
        return deps + incoming

    def _all_to_all(self, stage: int, op: Op, layer: int, which: int, e: int) -> None:
        counts = self._exchange_counts(stage, op.microbatch, layer, e)
        flows = all_to_all(counts if which == 0 else counts.T, 2.0 * self.model.hidden)
        ranks = self.exchanges[e].members
        members = [self.gpu_of(stage, d, t) for d, t in ranks]
        if op.backward and which == 0:
            before = [self._previous(stage, d, op, layer) for d, _ in ranks]
        else:
            part = ".e" if (which == 1) else ".a"
            before = [self.compute_id(stage, d, op, layer, part) for d, _ in ranks]
        cid = self._ep_id(stage, op, layer, which, e)
        names = [f"{cid}.{i}-{j}" for i, j in zip(flows.src.tolist(), flows.dst.tolist())]
        self._coflow(cid, "ep", op.microbatch, layer, flows, members, [(b,) for b in before], names)

    def _previous(self, stage: int, replica: int, op: Op, layer: int) -> str:
        """The computation a backward pass of ``layer`` starts after: the layer above's attention, or
        the op's entry (the device's previous op and the gradients the next stage sent)."""
        vstage = op.chunk * self.layout.pp + stage
        if layer + 1 < (vstage + 1) * self.per_vstage:
            return self.compute_id(stage, replica, op, layer + 1, ".a")
        return self.compute_id(stage, replica, op, layer, ".in")

    # -- data parallelism -------------------------------------------------------------------------

    def _dp_coflows(self) -> None:
        """Every layer's DP coflows, in the order a rank issues them: reduce-scatters (or
        all-reduces) from the last layer down, as backward passes finish, then all-gathers from the
        first layer up; records the flows into each server that the next forward pass waits for."""
        L, M = self.layout, self.model
        if L.dp == 1:
            return
        params = 4.0 * M.hidden**2 / L.tp + (
            3.0 * M.hidden * M.ffn * M.experts / L.ep if M.moe else 8.0 * M.hidden**2 / L.tp
        )
        nbytes = params * self.grad_bytes
        first = ring_half(L.dp, nbytes) if self.zero2 else ALLREDUCE[self.dp_allreduce](L.dp, nbytes)
        last = L.microbatches - 1
        arrived: dict[tuple[int, int, int], list[str]] = {}  # (layer, tp rank, replica): flows into it
        for layer in reversed(range(M.layers)):
            stage, chunk = self._stage_of(layer)
            op = Op(True, chunk, last)
            part = ".a" if M.moe else ""
            ready = [self.compute_id(stage, d, op, layer, part) for d in range(L.dp)]
            for t in range(L.tp):
                members = self.replicas(stage, t)
                name = "dp.rs" if self.zero2 else "dp"
                ids = self._coflow(
                    f"{self.prefix}{name}.L{layer}.s{stage}.t{t}",
                    "dp",
                    last,
                    layer,
                    first,
                    members,
                    [(r,) for r in ready],
                )
                for d, into in enumerate(_by_destination(ids, first.dst, L.dp)):
                    arrived[(layer, t, d)] = into
        if self.barrier:  # the global norm: a zero-time step that waits for every reduction
            norm = f"{self.prefix}norm"
            reduced = tuple(i for ids in arrived.values() for i in ids)
            self.tasks.append(Transfer(norm, self.gpus[0], self.gpus[0], 0.0, deps=reduced))
            arrived = {key: [norm] for key in arrived}
        if self.zero2:
            gather = ring_half(L.dp, params * PARAM_BYTES)
            for layer in range(M.layers):
                stage, _ = self._stage_of(layer)
                for t in range(L.tp):
                    members = self.replicas(stage, t)
                    ids = self._coflow(
                        f"{self.prefix}dp.ag.L{layer}.s{stage}.t{t}",
                        "dp",
                        last,
                        layer,
                        gather,
                        members,
                        [tuple(arrived[(layer, t, d)]) for d in range(L.dp)],
                    )
                    for d, into in enumerate(_by_destination(ids, gather.dst, L.dp)):
                        arrived[(layer, t, d)] = into
        for (layer, _t, d), ids in arrived.items():
            self.gates.setdefault((self._stage_of(layer)[0], d, layer), []).extend(ids)

    def _layer_seconds(self) -> tuple[list[float], list[float]]:
        """Per layer, a forward pass's seconds on a dense model (attention, MLP, the head on the
        last layer, and two tensor-parallel all-reduces) and its attention's alone (with one)."""
        M, L = self.model, self.layout
        heads = [M.head_flops() if layer == M.layers - 1 else 0.0 for layer in range(M.layers)]
        dense = [
            self.gpu.seconds((M.attention_flops() + M.mlp_flops() + h) / L.tp) + 2 * self.tp_seconds for h in heads
        ]
        attention = [self.gpu.seconds((M.attention_flops() + h) / L.tp) + self.tp_seconds for h in heads]
        return dense, attention

    def _stage_of(self, layer: int) -> tuple[int, int]:
        """(pipeline stage, model chunk) holding ``layer``."""
        vstage = layer // self.per_vstage
        return vstage % self.layout.pp, vstage // self.layout.pp

    def _tp_allreduce_seconds(self, nbytes: float) -> float:
        """One tensor-parallel all-reduce of ``nbytes``, simulated alone on the first server's GPUs,
        every ring flow split over the NVSwitch planes its two GPUs share in proportion to their
        port bandwidth (NCCL's channels span every plane), or routed as usual without NVSwitches."""
        if self.layout.tp == 1:
            return 0.0
        members = [self.gpus[t] for t in range(self.layout.tp)]
        flows = ring_allreduce(self.layout.tp, nbytes)
        tasks = []
        for k, (a, b, size) in enumerate(zip(flows.src.tolist(), flows.dst.tolist(), flows.bytes.tolist())):
            src, dst = members[a], members[b]
            overhead = flows.overhead_hops * path_latency(self.topology, src, dst)
            planes = _shared_planes(self.topology, src, dst)
            total = sum(planes.values())
            tasks += [
                Transfer(f"tp{k}.{p}", src, dst, size * share / total, overhead_s=overhead, route=(src, p, dst))
                for p, share in planes.items()
            ] or [Transfer(f"tp{k}", src, dst, size, overhead_s=overhead)]
        return simulate(self.topology, tasks, timeline=False).makespan


def _by_destination(ids: list[str], dst: np.ndarray, members: int) -> list[list[str]]:
    """Per member, the ids of the flows into it."""
    into: list[list[str]] = [[] for _ in range(members)]
    for i, d in zip(ids, dst.tolist()):
        into[d].append(i)
    return into


def _shared_planes(topology: Topology, a: str, b: str) -> dict[str, float]:
    """NVSwitches both GPUs plug into, with ``a``'s port bandwidth to each (GB/s)."""
    planes = {}
    for device in topology.devices:
        if device.kind == "nvswitch" and topology.links_between(b, device.id):
            ports = topology.links_between(a, device.id)
            if ports:
                planes[device.id] = sum(topology.links[k].bandwidth_gbps for k in ports)
    return planes
