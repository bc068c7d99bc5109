"""All-reduce schedules as data: rings and weighted rooted spanning trees, each hop optionally
split over routes (:mod:`commgraph.plan.allreduce` makes them, :mod:`commgraph.runtime.allreduce`
executes them)."""

from __future__ import annotations

from dataclasses import dataclass

from commgraph.errors import PlanError

_WEIGHT_TOL = 1e-6  # a schedule's tree weights (and a hop's route shares) sum to 1 within this
COLLECTIVES = ("allreduce", "allgather", "reducescatter")


@dataclass(frozen=True)
class Route:
    """A share of one hop's bytes and the devices it crosses, from the hop's sender to its receiver."""

    share: float
    path: tuple[str, ...]


@dataclass(frozen=True)
class Tree:
    """A spanning tree of the workers carrying ``weight`` of the data: reduced along ``edges``
    (child, parent) towards ``root``, then broadcast back down the same edges. ``routes[i]``, when
    given, splits edge i's bytes over paths from the child to the parent (back down reversed)."""

    weight: float
    root: str
    edges: tuple[tuple[str, str], ...]
    routes: tuple[tuple[Route, ...], ...] = ()

    def children(self) -> dict[str, list[str]]:
        """Every node's children, in edge order (leaves have none)."""
        result: dict[str, list[str]] = {self.root: []}
        for child, _ in self.edges:
            result[child] = []
        for child, parent in self.edges:
            result[parent].append(child)
        return result

    def depths(self) -> dict[str, int]:
        """Hops from the root (0 at the root), in breadth-first order."""
        children, depth, queue = self.children(), {self.root: 0}, [self.root]
        for node in queue:  # grows while it is walked: breadth-first
            for child in children[node]:
                depth[child] = depth[node] + 1
                queue.append(child)
        return depth

    def heights(self) -> dict[str, int]:
        """Hops to the deepest node below (0 at a leaf)."""
        children, height = self.children(), {}
        for node in reversed(list(self.depths())):
            height[node] = 1 + max((height[c] for c in children[node]), default=-1)
        return height


@dataclass(frozen=True)
class Ring:
    """A ring ``order`` carrying ``weight`` of the data (reduce-scatter, then all-gather, around it).
    ``routes[i]``, when given, splits the bytes of hop ``order[i] -> order[i + 1]`` over paths."""

    weight: float
    order: tuple[str, ...]
    routes: tuple[tuple[Route, ...], ...] = ()


@dataclass(frozen=True)
class AllReduceSchedule:
    """How an all-reduce of ``planner`` runs over ``devices`` (the workers, in topology order):
    around ``rings`` or over ``trees``, the data cut into one contiguous share per ring or tree by
    weight. Exactly one of the two is given; both are checked when the schedule is made: every ring
    visits every device once, every tree spans the devices with the root at its top, weights are
    positive and sum to 1, every hop's routes join its two ends and their shares sum to 1. A schedule
    that breaks this raises PlanError.

    ``collective`` ``allgather`` or ``reducescatter`` (:mod:`commgraph.plan.gather`): trees only,
    each rooted at the worker whose shard it carries, grouped by root in device order, every root's
    weights summing to 1/n; an all-gather runs only their broadcast down, a reduce-scatter only their
    reduction up. Worker k's shard is then the trees of the k-th root, contiguous."""

    planner: str
    devices: tuple[str, ...]
    rings: tuple[Ring, ...] = ()
    trees: tuple[Tree, ...] = ()
    collective: str = "allreduce"

    def __post_init__(self) -> None:
        where = f"{self.collective} schedule {self.planner!r}"
        if self.collective not in COLLECTIVES:
            raise PlanError(f"{where}: unknown collective; choose one of {', '.join(COLLECTIVES)}")
        if self.collective != "allreduce":
            _check_shards(self, where)
        if len(self.devices) < 2 or len(set(self.devices)) != len(self.devices):
            raise PlanError(f"{where}: needs 2 or more distinct devices, got {list(self.devices)}")
        if bool(self.rings) == bool(self.trees):
            raise PlanError(f"{where}: needs rings or trees (exactly one of them)")
        for k, ring in enumerate(self.rings):
            if sorted(ring.order) != sorted(self.devices):
                raise PlanError(
                    f"{where}: ring {k} {list(ring.order)} does not visit each of {list(self.devices)} once"
                )
            hops = [(a, ring.order[(i + 1) % len(ring.order)]) for i, a in enumerate(ring.order)]
            _check_routes(ring.routes, hops, f"{where}, ring {k}")
        for k, tree in enumerate(self.trees):
            _check_tree(tree, self.devices, f"{where}, tree {k}")
            _check_routes(tree.routes, list(tree.edges), f"{where}, tree {k}")
        for kind, parts in (("tree", self.trees), ("ring", self.rings)):
            total = sum(part.weight for part in parts)
            if parts and abs(total - 1.0) > _WEIGHT_TOL:
                raise PlanError(f"{where}: {kind} weights sum to {total}, not 1")
            if any(not part.weight > 0 for part in parts):
                raise PlanError(f"{where}: a {kind} weight is not positive")

    @property
    def fan_out(self) -> int:
        """The most routes any hop splits over (1 when none splits)."""
        return max((len(r) for part in (*self.rings, *self.trees) for r in part.routes), default=1)

    def to_json(self) -> dict:
        """The schedule as JSON-ready data (a plan's ``notes["schedule"]``)."""

        def routes(part) -> dict:
            return (
                {"routes": [[{"share": r.share, "path": list(r.path)} for r in hop] for hop in part.routes]}
                if part.routes
                else {}
            )

        which = {} if self.collective == "allreduce" else {"collective": self.collective}
        if self.rings:
            return {
                "devices": list(self.devices),
                **which,
                "rings": [{"weight": r.weight, "order": list(r.order), **routes(r)} for r in self.rings],
            }
        return {
            "devices": list(self.devices),
            **which,
            "trees": [
                {"weight": t.weight, "root": t.root, "edges": [list(e) for e in t.edges], **routes(t)}
                for t in self.trees
            ],
        }

    @classmethod
    def from_json(cls, planner: str, data: dict) -> AllReduceSchedule:
        """The schedule ``planner`` made, from :meth:`to_json`'s data, checked."""

        def routes(part: dict) -> tuple:
            return tuple(
                tuple(Route(float(r["share"]), tuple(map(str, r["path"]))) for r in hop)
                for hop in part.get("routes", ())
            )

        try:
            trees = tuple(
                Tree(float(t["weight"]), str(t["root"]), tuple((str(c), str(p)) for c, p in t["edges"]), routes(t))
                for t in data.get("trees", ())
            )
            rings = tuple(
                Ring(float(r["weight"]), tuple(map(str, r["order"])), routes(r)) for r in data.get("rings", ())
            )
            if "ring" in data:  # one ring on the topology's routes, as plans before rings had channels
                rings += (Ring(1.0, tuple(map(str, data["ring"]))),)
            collective = str(data.get("collective", "allreduce"))
            return cls(planner, tuple(map(str, data["devices"])), rings, trees, collective)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PlanError(f"all-reduce schedule {planner!r} is malformed ({type(exc).__name__}: {exc})") from None


def _check_routes(routes: tuple[tuple[Route, ...], ...], hops: list[tuple[str, str]], where: str) -> None:
    if not routes:
        return
    if len(routes) != len(hops):
        raise PlanError(f"{where}: {len(routes)} route lists for {len(hops)} hops")
    for (a, b), hop in zip(hops, routes):
        if not hop or abs(sum(r.share for r in hop) - 1.0) > _WEIGHT_TOL or any(not r.share > 0 for r in hop):
            raise PlanError(f"{where}: the routes of hop {a} -> {b} need positive shares summing to 1")
        for route in hop:
            if len(route.path) < 2 or route.path[0] != a or route.path[-1] != b:
                raise PlanError(f"{where}: route {list(route.path)} does not lead from {a} to {b}")


def _check_tree(tree: Tree, devices: tuple[str, ...], where: str) -> None:
    if not tree.weight > 0:
        raise PlanError(f"{where}: weight {tree.weight} is not positive")
    children = [c for c, _ in tree.edges]
    nodes = {tree.root, *children, *(p for _, p in tree.edges)}
    if (
        nodes != set(devices)
        or len(children) != len(devices) - 1
        or len(set(children)) != len(children)
        or tree.root in children
    ):
        raise PlanError(
            f"{where}: edges {[list(e) for e in tree.edges]} rooted at {tree.root!r} are not a "
            f"spanning tree of {list(devices)} with one parent per node"
        )
    if len(tree.depths()) != len(devices):
        raise PlanError(f"{where}: not every device reaches the root {tree.root!r} (the edges hold a cycle)")


def _check_shards(schedule: AllReduceSchedule, where: str) -> None:
    """An all-gather's or reduce-scatter's trees: grouped by root in device order, 1/n per root."""
    n = len(schedule.devices)
    if schedule.rings:
        raise PlanError(f"{where}: runs over trees rooted at the shards' owners, not rings")
    roots = [t.root for t in schedule.trees]
    changes = sum(1 for a, b in zip(roots, roots[1:]) if a != b)
    if list(dict.fromkeys(roots)) != list(schedule.devices) or changes != n - 1:
        raise PlanError(f"{where}: needs trees rooted at every device, grouped by root in device order")
    for device in schedule.devices:
        total = sum(t.weight for t in schedule.trees if t.root == device)
        if abs(total * n - 1.0) > _WEIGHT_TOL:
            raise PlanError(f"{where}: the trees rooted at {device} carry {total} of the data, not 1/{n}")
