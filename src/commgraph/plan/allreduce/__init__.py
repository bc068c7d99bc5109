"""All-reduce planners: ``ring`` and ``tree`` (NCCL's algorithms with as many channels as the
topology has routes), ``ring1`` and ``tree1`` (the same on one route each), ``ps`` (sharded parameter
server) and ``lp`` (the optimal spanning-tree packing of Wang, Li, Liberty and Smola, SysML'18,
solved by column generation). Every plan is one stage of aggregated sends priced by the simulator,
and keeps the schedule the runtime executes. How each is built, the cost normalisation and the bound:
``docs/planning.md`` ("All-reduce").
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

__all__ = [
    "CHOICES",
    "PLANNERS",
    "AllReduceSchedule",
    "CostGraph",
    "Ring",
    "Route",
    "Tree",
    "allreduce_schedule",
    "choose_allreduce",
    "make_allreduce",
    "native_seconds",
    "normalized_time",
    "plan_allreduce",
    "solve_tree_packing",
]


def plan_allreduce(planner: str, topology: Topology, nbytes: float) -> CommPlan:
    """The all-reduce of ``nbytes`` on ``topology`` by ``planner``.

    Args:
        planner: one of :data:`PLANNERS`.
        topology: the hardware; its worker devices take part.
        nbytes: the bytes each worker reduces (> 0).

    Returns:
        One stage of aggregated sends (what the simulator prices). ``notes["schedule"]`` holds the
        schedule they come from (what the runtime executes; read it back with
        :func:`allreduce_schedule`), ``notes["bandwidth"]`` the plan's algorithm bandwidth against
        the partition bound of :mod:`commgraph.plan.packing`.

    Raises:
        PlanError: an unknown planner or ``nbytes <= 0``.
    """
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
    """The schedule a plan was made from.

    Args:
        plan: an all-reduce plan, or an all-gather or reduce-scatter across the workers
            (:mod:`commgraph.plan.gather`).

    Returns:
        The schedule, checked (see :class:`AllReduceSchedule`).

    Raises:
        PlanError: a plan of another kind, or one that carries no schedule.
    """
    if plan.kind not in COLLECTIVES or (plan.kind != "allreduce" and "schedule" not in plan.notes):
        raise PlanError(
            f"an all-reduce schedule comes from an all-reduce plan (or an all-gather or reduce-scatter "
            f"across the workers), not the {plan.planner!r} {plan.kind} plan"
        )
    if "schedule" not in plan.notes:
        raise PlanError(
            f"the {plan.planner!r} {plan.kind} plan for {plan.topology!r} carries no schedule; "
            "plan it again with this version of commgraph"
        )
    return AllReduceSchedule.from_json(plan.planner, plan.notes["schedule"])


def native_seconds(topology: Topology, nbytes: float) -> float:
    """torch's own all_reduce of ``nbytes`` across the topology's workers.

    Args:
        topology: the hardware.
        nbytes: the bytes each worker reduces.

    Returns:
        Seconds: as measured when the topology was calibrated with it (``calibrated.allreduce``),
        else priced as our ``ring``, the algorithm Gloo and NCCL use for large tensors, with
        NCCL's channels over every route.
    """
    measured = None if topology.calibrated is None else topology.calibrated.allreduce_seconds(nbytes)
    if measured is not None:
        return measured
    return price(plan_allreduce("ring", topology, nbytes), topology)["modeled_seconds"]


def choose_allreduce(topology: Topology, nbytes: float) -> str:
    """What ``auto`` runs: the all-reduce priced fastest, torch's own (:func:`native_seconds`) or a
    planned schedule (the simulator's price).

    Args:
        topology: the hardware.
        nbytes: the bytes each worker reduces.

    Returns:
        ``native``, ``lp``, ``tree`` or ``ps``; ties (within 1e-9 relative) go to the earlier.
    """
    seconds = {"native": native_seconds(topology, nbytes)}
    seconds |= {
        name: price(plan_allreduce(name, topology, nbytes), topology)["modeled_seconds"] for name in AUTO_CANDIDATES[1:]
    }
    return fastest_allreduce(seconds)


AUTO_CANDIDATES = ("native", "lp", "tree", "ps")  # what ``auto`` compares, ties to the earlier


def fastest_allreduce(seconds: dict[str, float]) -> str:
    """The name ``auto`` takes from ``seconds`` (each of :data:`AUTO_CANDIDATES`' modeled seconds):
    the fastest, ties (within 1e-9 relative) to the earlier."""
    fastest = min(seconds.values())
    return next(name for name, time in seconds.items() if time <= fastest * (1 + 1e-9))


def make_allreduce(name: str, topology: Topology, nbytes: float) -> AllReduceSchedule | None:
    """The schedule ``--allreduce NAME`` runs for a gradient.

    Args:
        name: one of :data:`CHOICES`.
        topology: the hardware.
        nbytes: the gradient's bytes.

    Returns:
        The schedule, or None for torch's own all_reduce (``native``, or what ``auto`` chose).

    Raises:
        PlanError: an unknown name.
    """
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
    return {
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * 2 * (graph.n - 1) / graph.n,
        "bound": {**bound.to_json(), "links": "gpu-to-gpu" if gpu_links_only else "all"},
        "of_bound": algbw / bound.algbw_gbps,
    }


def _route(graph: CostGraph, a: str, b: str) -> tuple[str, ...]:
    """Direct-link graphs: the tree edge itself; otherwise the topology's route (left empty)."""
    return (a, b) if graph.direct and graph.topology.links_between(a, b) else ()


def normalized_time(plan: CommPlan, graph: CostGraph, nbytes: float) -> float:
    """max over link directions of (bytes / all the data) x c_e, for the plan's routes."""
    column = {k: i for i, k in enumerate(graph.links)}
    load = {}
    topology = graph.topology
    for send in plan.stages[0]:
        hops = (
            topology.route(send.src, send.dst)
            if not send.route
            else [h for x, y in zip(send.route, send.route[1:]) for h in topology.route(x, y)]
        )
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
