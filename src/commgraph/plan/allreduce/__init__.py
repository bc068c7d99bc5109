"""All-reduce planners: ``ring`` and ``tree``, NCCL's algorithms with as many channels as the
topology has routes, ``ring1`` and ``tree1``, the same on one route each, ``ps`` (sharded parameter
server) and ``lp``, the optimal schedule of Wang, Li, Liberty and Smola (SysML'18): a convex
combination of spanning trees minimising max_e P_e c_e over the spanning-tree polytope, where P_e is
the share of the data crossing link e and c_e the time to send all the data over e.

Costs are normalised to "all the data once over one single link": on an NVLink graph c_e = 1/count
(1 for NV1, 1/2 for NV2, as in the paper), otherwise c_e = (slowest per-link bandwidth) / bandwidth.

The LP runs over the GPUs' direct links when those connect all GPUs (section 2: GPUs aggregate, so
any spanning tree of them is a schedule). Otherwise (switches: NVSwitch planes, PCIe trees, NICs,
clusters) a tree edge between two GPUs is a multi-commodity flow: its bytes may split over every
route the hardware has (every NVSwitch plane, every NIC, a neighbour GPU's NIC through NVLink
where the topology lets GPUs forward). Both are solved exactly by column generation with HiGHS
(:func:`commgraph.plan.packing.pack`): the restricted master gives link prices, and a minimum
spanning tree under those prices (over direct links, or over the cheapest routed path between every
two GPUs) is the column with the most negative reduced cost; none left means optimal, and the
least-priced tree at the last prices is the certificate (a lower bound equal to the value). No tree
is enumerated.

Every plan reports its algorithm bandwidth (bytes / steady-state time, the busiest link direction
setting it) against the partition bound of :mod:`commgraph.plan.packing` (per-GPU bandwidth over
2(n-1)/n, or per-host), the most any of these schedules reaches.

``ring`` runs as NCCL's rings: one ring order per GPU position of a server across several servers
(channel c enters every server at its GPU c, so the channels leave by different NICs), one order on
one server, and every ring hop's bytes split over the routes by a min-max multi-commodity flow LP
(:func:`commgraph.plan.packing.route_demands`), which spreads them over NVSwitch planes and NICs
as NCCL's channels and the NVSwitch's striping do. ``tree`` routes NCCL's trees the same way:
across servers, per channel a chain through each server joined by a double binary tree over the
servers; on one server, the double binary tree over the GPUs. On an NVLink mesh without switches
(DGX-1) ``ring`` runs NCCL's several rings: as many Hamiltonian cycles as share no NVLink (three on
a DGX-1), each in both directions.

Every all-reduce plan is one stage: its sends stream concurrently (chunks pipelined through the
trees or the rings, every tree and ring advancing at its share), and each carries its total bytes,
so pricing it in the simulator (which paces such a stage's sends together, ``plan.price``) gives the
steady-state time plus the routes' latencies.

Each plan also keeps the schedule its sends come from, as data the runtime executes
(:mod:`commgraph.runtime.allreduce`): rings (reduce-scatter then all-gather), each with its share of
the data, and weighted rooted spanning trees for the others: ``tree``'s two binary trees of weight
1/2, ``ps`` as n stars of weight 1/n (worker b serves 1/n of the data), ``lp``'s packing with each
tree rooted at its centre. A tree's share of the data is reduced along its edges towards the root
and broadcast back down the same edges. A ring hop or tree edge may carry ``routes``: the paths its
bytes split over, with their shares (empty: the topology's one route).
"""

from __future__ import annotations

from commgraph.errors import PlanError
from commgraph.plan.allreduce.graph import CostGraph
from commgraph.plan.allreduce.lp import packed_trees, packing_notes, routed_trees, solve_tree_packing
from commgraph.plan.allreduce.nccl import double_binary_trees, nccl_rings, nccl_trees, routed, sharded_servers
from commgraph.plan.allreduce.schedule import COLLECTIVES, AllReduceSchedule, Ring, Route, Tree
from commgraph.plan.model import CommPlan, Send
from commgraph.plan.packing import partition_bound
from commgraph.plan.price import price, steady_seconds
from commgraph.topology import Topology

PLANNERS = ("ring", "ring1", "tree", "tree1", "ps", "lp")
CHOICES = ("auto", "native", *PLANNERS)  # what a trainer may run: planned schedules, torch's own, or the cheapest

__all__ = ["CHOICES", "PLANNERS", "AllReduceSchedule", "CostGraph", "Ring", "Route", "Tree", "allreduce_schedule",
           "choose_allreduce", "make_allreduce", "native_seconds", "normalized_time", "plan_allreduce",
           "solve_tree_packing"]


def plan_allreduce(planner: str, topology: Topology, nbytes: float) -> CommPlan:
    """The all-reduce of ``nbytes`` on ``topology`` by ``planner``: one stage of aggregated sends
    (what the simulator prices) and, in ``notes["schedule"]``, the schedule they come from (what
    the runtime executes; read it back with :func:`allreduce_schedule`). ``notes["bandwidth"]``:
    the plan's algorithm bandwidth against the partition bound (module docstring)."""
    if planner not in PLANNERS:
        raise PlanError(f"unknown all-reduce planner {planner!r}; choose one of {', '.join(PLANNERS)}")
    if not nbytes > 0:
        raise PlanError(f"--bytes must be > 0, got {nbytes}")
    graph = CostGraph(topology)
    plan = CommPlan("allreduce", planner, topology.name)
    if planner == "lp" and graph.direct:
        value, trees = solve_tree_packing(graph)
        schedule = packed_trees(graph, trees)
        plan.notes.update(packing_notes(graph, value, trees))
    elif planner == "lp":
        schedule, notes = routed_trees(graph)
        plan.notes.update(notes)
    elif planner in ("ring", "tree"):
        schedule = routed(graph, nccl_rings(graph, channels=True) if planner == "ring" else nccl_trees(graph))
    else:
        schedule = {"ring1": nccl_rings, "tree1": double_binary_trees, "ps": sharded_servers}[planner](graph)
    plan.stages.append(_sends(graph, schedule, nbytes))
    plan.notes["schedule"] = schedule.to_json()
    plan.notes["normalized_time"] = normalized_time(plan, graph, nbytes)
    plan.notes["lower_bound"] = graph.lower_bound()
    gpu_links = graph.direct and all(len(send.route) == 2 for send in plan.stages[0])
    plan.notes["bandwidth"] = _bandwidth(plan, graph, nbytes, gpu_links_only=gpu_links)
    return plan


def allreduce_schedule(plan: CommPlan) -> AllReduceSchedule:
    """The schedule an all-reduce plan was made from (checked: see :class:`AllReduceSchedule`), or
    an all-gather's or reduce-scatter's across the workers (:mod:`commgraph.plan.gather`)."""
    if plan.kind not in COLLECTIVES or (plan.kind != "allreduce" and "schedule" not in plan.notes):
        raise PlanError(f"an all-reduce schedule comes from an all-reduce plan (or an all-gather or reduce-scatter "
                        f"across the workers), not the {plan.planner!r} {plan.kind} plan")
    if "schedule" not in plan.notes:
        raise PlanError(f"the {plan.planner!r} {plan.kind} plan for {plan.topology!r} carries no schedule; "
                        "plan it again with this version of commgraph")
    return AllReduceSchedule.from_json(plan.planner, plan.notes["schedule"])


def native_seconds(topology: Topology, nbytes: float) -> float:
    """torch's own all_reduce of ``nbytes`` across the topology's workers: as measured when the
    topology was calibrated with it (``calibrated.allreduce``), else priced as our ``ring``, the
    algorithm Gloo and NCCL use for large tensors, with NCCL's channels over every route."""
    measured = None if topology.calibrated is None else topology.calibrated.allreduce_seconds(nbytes)
    if measured is not None:
        return measured
    return price(plan_allreduce("ring", topology, nbytes), topology)["modeled_seconds"]


def choose_allreduce(topology: Topology, nbytes: float) -> str:
    """What ``auto`` runs: the all-reduce priced fastest for ``nbytes`` on ``topology``, torch's
    own (``native_seconds``) or a planned schedule (the simulator's price). Ties (within 1e-9
    relative) go to the earlier of ``native``, ``lp``, ``tree``, ``ps``."""
    seconds = {"native": native_seconds(topology, nbytes)}
    seconds |= {name: price(plan_allreduce(name, topology, nbytes), topology)["modeled_seconds"]
                for name in ("lp", "tree", "ps")}
    fastest = min(seconds.values())
    return next(name for name, time in seconds.items() if time <= fastest * (1 + 1e-9))


def make_allreduce(name: str, topology: Topology, nbytes: float) -> AllReduceSchedule | None:
    """The schedule ``--allreduce NAME`` runs for a gradient of ``nbytes`` on ``topology``, or None
    for torch's own all_reduce (``native``, or what ``auto`` chose)."""
    if name not in CHOICES:
        raise PlanError(f"unknown --allreduce {name!r}; choose one of {', '.join(CHOICES)}")
    if name == "auto":
        name = choose_allreduce(topology, nbytes)
    return None if name == "native" else allreduce_schedule(plan_allreduce(name, topology, nbytes))

def _sends(graph: CostGraph, schedule: AllReduceSchedule, nbytes: float) -> list[Send]:
    """The schedule's bytes as sends, one per ordered worker pair and route: a ring hop carries
    2(n-1)/n of its ring's share, a tree edge its tree's share each way. Hops without routes take
    the direct link on a direct-link machine, else the topology's route."""
    sends: dict[tuple[str, str, tuple[str, ...]], float] = {}

    def add(a: str, b: str, amount: float, routes: tuple[Route, ...], reverse: bool = False) -> None:
        for route in routes or (Route(1.0, _route(graph, b, a) if reverse else _route(graph, a, b)),):
            path = route.path[::-1] if reverse else route.path
            key = (a, b, path)
            sends[key] = sends.get(key, 0.0) + amount * route.share

    n = len(schedule.devices)
    for ring in schedule.rings:
        hops = list(zip(ring.order, ring.order[1:] + ring.order[:1]))
        for i, (a, b) in enumerate(hops):  # reduce-scatter then all-gather: 2(n-1) segments of 1/n
            add(a, b, 2 * (n - 1) / n * ring.weight * nbytes, ring.routes[i] if ring.routes else ())
    for tree in schedule.trees:
        for i, (child, parent) in enumerate(tree.edges):
            routes = tree.routes[i] if tree.routes else ()
            add(child, parent, tree.weight * nbytes, routes)  # reduce up
            add(parent, child, tree.weight * nbytes, routes, reverse=True)  # broadcast down, the same links back
    return [Send(a, b, amount, route=path) for (a, b, path), amount in sorted(sends.items())]


def _bandwidth(plan: CommPlan, graph: CostGraph, nbytes: float, gpu_links_only: bool) -> dict:
    """The plan's algorithm bandwidth in the steady state (bytes over the busiest link direction's
    time), its bus bandwidth (nccl-tests: x 2(n-1)/n) and the algorithm bandwidth against the
    partition bound over the links the plan may use (``gpu_links_only``: on a direct-link machine
    ``lp`` packs trees of GPU-to-GPU links only, as the paper does, and NCCL's rings run on them)."""
    topology = graph.topology
    algbw = nbytes / steady_seconds(plan.stages[0], topology) / 1e9
    workers = set(graph.workers)
    links = [k for k, l in enumerate(topology.links) if l.a in workers and l.b in workers] if gpu_links_only else None
    bound = partition_bound(topology, graph.workers, links)
    return {"algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (graph.n - 1) / graph.n,
            "bound": {**bound.to_json(), "links": "gpu-to-gpu" if gpu_links_only else "all"},
            "of_bound": algbw / bound.algbw_gbps}


def _route(graph: CostGraph, a: str, b: str) -> tuple[str, ...]:
    """Direct-link graphs: the tree edge itself; otherwise the topology's route (left empty)."""
    return (a, b) if graph.direct and graph.topology.links_between(a, b) else ()


def normalized_time(plan: CommPlan, graph: CostGraph, nbytes: float) -> float:
    """max over link directions of (bytes / all the data) x c_e, for the plan's routes."""
    column = {k: i for i, k in enumerate(graph.links)}
    load = {}
    topology = graph.topology
    for send in plan.stages[0]:
        hops = topology.route(send.src, send.dst) if not send.route else [
            h for x, y in zip(send.route, send.route[1:]) for h in topology.route(x, y)]
        for hop in hops:
            key = hop.resource
            load[key] = load.get(key, 0.0) + send.nbytes / nbytes
    worst = 0.0
    for resource, share in load.items():
        link = resource // 2
        if link in column:
            cost = graph.cost[column[link]]
        else:  # a link outside the cost graph (e.g. PCIe used by a ring on an NVLink machine)
            cost = graph.unit_gbps / topology.links[link].bandwidth_gbps
        worst = max(worst, share * cost)
    return worst
