"""Graph all-gather planners (the graphAllgather of Cai et al., "DGCL: An Efficient Communication
Library for Distributed GNN Training", EuroSys 2021): every layer, each part needs the embeddings of
its halo nodes from their owners.

- ``p2p``: each part fetches every remote row straight from its owner, all at once (the baseline).
- ``replicate``: no per-layer exchange; each part keeps an L-hop halo up front (DGL style). The plan
  has no stages; its notes give the duplicated nodes and the memory they cost.
- ``swap``: staged through host memory: owners copy boundary rows to their CPU, then parts read
  their halos from there (GPU -> host -> GPU).
- ``spst``: DGCL's shortest-path spanning trees. Vertices that share an owner and a set of
  requesters travel together (split into a few chunks so load can spread); for each chunk a tree
  grows from the owner, each time adding the cheapest path from the tree to a part not yet reached,
  relaying through other GPUs (at most ``MAX_DEPTH`` hops deep). A hop's depth in its tree is its
  stage. The price of a path is the increase of the modelled cost given the load already placed in
  each stage: cost = sum over stages of (slowest route latency)^2 + sum over link directions of
  (seconds of traffic)^2, a smooth stand-in for each stage's time (latency plus bottleneck link)
  that, unlike the max, also sees links below the bottleneck.
- ``hybrid``: ChattyGraph's (Jiang et al., "ChattyGraph: Highly Scalable Graph Computing System for
  Heterogeneous Multi Accelerators") per-message choice of transfer method (zero-copy or peer copy) by the
  cost model of :mod:`commgraph.plan.methods`; otherwise the p2p pattern. Its sends carry the
  methods' measured per-message costs, which the other planners' sends (batched into one
  collective per stage) do not, so it is compared with the same messages sent all by zero-copy
  and all by copy, and takes whichever of the three prices fastest (per-message estimates cannot
  see which messages end up on the critical path). Because of those per-message costs its price is
  not comparable with ``p2p``'s, which has none, and it is not replaced by ``p2p`` when it prices higher.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import replace

import numpy as np

from commgraph.errors import PlanError
from commgraph.partition import PartitionSet
from commgraph.plan.methods import METHODS
from commgraph.plan.model import CommPlan, Send
from commgraph.plan.price import price
from commgraph.topology import Topology

CHUNKS_PER_GROUP = 8
MAX_DEPTH = 2  # stages of a tree: one relay at most (an NVLink DGX-1 has diameter 2)
PLANNERS = ("p2p", "replicate", "swap", "spst", "hybrid")


def placement(pset: PartitionSet, topology: Topology, devices: list[str] | None = None) -> list[str]:
    """The device each part runs on: the topology's workers in order unless ``devices`` are given.

    Raises:
        PlanError: more parts than worker devices; ``devices`` of the wrong length or with repeats.
        TopologyError: a device the topology does not have.
    """
    workers = [d.id for d in topology.workers]
    parts = pset.num_parts
    if devices is None:
        if parts > len(workers):
            raise PlanError(
                f"{parts} parts but topology {topology.name!r} has only {len(workers)} "
                f"worker devices; re-partition into at most {len(workers)} parts"
            )
        return workers[:parts]
    if len(devices) != parts:
        raise PlanError(f"--placement lists {len(devices)} devices for {parts} parts")
    if len(set(devices)) != parts:
        raise PlanError("--placement lists a device twice")
    for device in devices:
        topology.device(device)
    return list(devices)


def demands(pset: PartitionSet) -> dict[tuple[int, int], np.ndarray]:
    """Global ids part k sends to part q every layer, for every pair that exchanges anything."""
    parts = [pset.part(k) for k in range(pset.num_parts)]
    result = {}
    for k, part in enumerate(parts):
        for q in range(pset.num_parts):
            ids = np.asarray(part.owned[part.send_to(q)])
            if ids.size:
                result[(k, q)] = ids
    return result


def plan_allgather(
    planner: str,
    pset: PartitionSet,
    topology: Topology,
    row_bytes: int,
    devices: list[str] | None = None,
    layers: int = 2,
) -> CommPlan:
    """The graph all-gather plan of ``planner`` (the module's description) for a partition set on
    a topology: one plan that every layer's exchange follows.

    ``spst`` is priced against ``p2p`` on the simulator and the ``p2p`` plan is returned, named
    ``spst`` with a ``fallback`` note, when the trees price slower.

    Args:
        planner: one of :data:`PLANNERS`.
        pset: the partition set; part ``k`` runs on ``devices[k]``.
        topology: the hardware.
        row_bytes: bytes of one embedding row (``width * 4`` for float32).
        devices: the device of each part (default: :func:`placement`'s).
        layers: message-passing layers (``replicate`` keeps an L-hop halo).

    Returns:
        CommPlan: ``kind="allgather"``; sends carry the global ids of the rows they move.

    Raises:
        PlanError: an unknown planner or a bad placement.
        TopologyError: two placed devices without a route between them.
    """
    if planner not in PLANNERS:
        raise PlanError(f"unknown all-gather planner {planner!r}; choose one of {', '.join(PLANNERS)}")
    devs = placement(pset, topology, devices)
    _check_connected(topology, devs)
    wanted = demands(pset)
    if planner == "p2p":
        return _p2p(wanted, devs, topology, row_bytes)
    if planner == "replicate":
        return _replicate(pset, topology, row_bytes, layers)
    if planner == "swap":
        return _swap(wanted, devs, topology, row_bytes)
    if planner == "hybrid":
        return _hybrid(wanted, devs, topology, row_bytes)
    plan = _spst(wanted, devs, topology, row_bytes)
    baseline = _p2p(wanted, devs, topology, row_bytes)
    if price(plan, topology)["modeled_seconds"] > price(baseline, topology)["modeled_seconds"]:
        baseline.planner = "spst"
        baseline.notes["fallback"] = "p2p priced faster than the spanning trees on this topology"
        return baseline
    return plan


def plan_fetch(
    wanted: dict[tuple[int, int], np.ndarray], devices: list[str], topology: Topology, row_bytes: int
) -> CommPlan:
    """A mini-batch's feature fetch: ``wanted[(owner, reader)]`` are the global ids ``reader``
    asked ``owner`` for this batch, and each goes straight from its owner to its reader in one
    stage (``p2p``). Requests change every batch, so there is nothing to amortise a relaying plan
    over; and a reader may ask for only some columns, which a relay could not cut for the readers
    behind it."""
    return _p2p({pair: ids for pair, ids in wanted.items() if ids.size}, devices, topology, row_bytes)


def _check_connected(topology: Topology, devs: list[str]) -> None:
    for a in devs:
        for b in devs:
            topology.route(a, b)  # raises TopologyError naming the pair


def _p2p(wanted, devs, topology, row_bytes) -> CommPlan:
    plan = CommPlan("allgather", "p2p", topology.name, row_bytes=row_bytes)
    plan.stages.append(
        [Send(devs[k], devs[q], float(ids.size * row_bytes), ids) for (k, q), ids in sorted(wanted.items())]
    )
    return plan


def _hybrid(wanted, devs, topology, row_bytes) -> CommPlan:
    """ChattyGraph's per-message choice: each message goes by the transfer method the cost model
    prices cheapest for its size on its route (zero-copy for small ones, a peer copy for large)."""
    plan = CommPlan("allgather", "hybrid", topology.name, row_bytes=row_bytes)
    sends, chosen = [], {name: 0 for name in METHODS}
    sharing: dict[int, int] = defaultdict(int)  # messages crossing each link direction at once
    for k, q in wanted:
        for hop in topology.route(devs[k], devs[q]):
            sharing[hop.resource] += 1
    for (k, q), ids in sorted(wanted.items()):
        hops = topology.route(devs[k], devs[q])
        # the bandwidth this message can expect: its fair share of its most shared link
        gbps = min(topology.links[h.link].bandwidth_gbps / sharing[h.resource] for h in hops)
        latency = sum(topology.links[h.link].latency_us for h in hops) * 1e-6
        nbytes = float(ids.size * row_bytes)
        method = min(METHODS.values(), key=lambda m: (m.seconds(nbytes, gbps, latency), m.name))
        chosen[method.name] += 1
        sends.append(Send(devs[k], devs[q], nbytes, ids, method=method.name))
    plan.stages.append(sends)
    best = price(plan, topology)["modeled_seconds"]
    plan.notes["modeled_seconds_per_message_choice"] = best
    for name in METHODS:  # the same messages all sent one way: kept if that prices faster
        uniform = [replace(send, method=name) for send in sends]
        seconds = price(CommPlan("allgather", name, topology.name, [uniform], row_bytes), topology)["modeled_seconds"]
        plan.notes[f"modeled_seconds_all_{name}"] = seconds
        if seconds < best:
            best, plan.stages = seconds, [uniform]
            chosen = {m: (len(uniform) if m == name else 0) for m in METHODS}
    plan.notes["messages_by_method"] = chosen
    return plan


def _host_of(topology: Topology, device: str) -> str:
    """The CPU whose memory a device stages through: the nearest one on its host."""
    host = topology.device(device).host
    cpus = [d.id for d in topology.devices if d.kind == "cpu" and d.host == host]
    if not cpus:
        raise PlanError(f"device {device!r} has no CPU on its host to stage through")
    return device if device in cpus else min(cpus, key=lambda c: (len(topology.route(device, c)), c))


def _swap(wanted, devs, topology, row_bytes) -> CommPlan:
    plan = CommPlan("allgather", "swap", topology.name, row_bytes=row_bytes)
    out_by_owner: dict[int, list[np.ndarray]] = defaultdict(list)
    for (k, _), ids in wanted.items():
        out_by_owner[k].append(ids)
    to_host = []
    for k, chunks in sorted(out_by_owner.items()):
        ids = np.unique(np.concatenate(chunks))
        if devs[k] != _host_of(topology, devs[k]):
            to_host.append(Send(devs[k], _host_of(topology, devs[k]), float(ids.size * row_bytes), ids))
    plan.stages.append(to_host)
    plan.stages.append(
        [
            Send(_host_of(topology, devs[k]), devs[q], float(ids.size * row_bytes), ids)
            for (k, q), ids in sorted(wanted.items())
        ]
    )
    return plan


def _replicate(pset: PartitionSet, topology: Topology, row_bytes: int, layers: int) -> CommPlan:
    """No exchange; count the L-hop halo every part must hold (rebuilt from the parts' own CSRs)."""
    from scipy.sparse import csr_matrix

    n = int(pset.manifest["graph"]["num_nodes"])
    rows, cols = [], []
    parts = [pset.part(k) for k in range(pset.num_parts)]
    for part in parts:
        local_to_global = np.concatenate([part.owned, part.halo])
        rows.append(np.repeat(np.asarray(part.owned), np.diff(part.indptr)))
        cols.append(local_to_global[part.indices])
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    graph = csr_matrix((np.ones(rows.size, dtype=np.int8), (rows, cols)), shape=(n, n))
    duplicated = []
    for part in parts:
        have = np.zeros(n, dtype=bool)
        have[part.owned] = True
        frontier = have.copy()
        for _ in range(layers):
            reached = (graph[np.flatnonzero(frontier)].sum(axis=0).A1 > 0) & ~have
            have |= reached
            frontier = reached
        duplicated.append(int(have.sum()) - part.num_owned)
    plan = CommPlan("allgather", "replicate", topology.name, row_bytes=row_bytes)
    plan.notes = {
        "layers": layers,
        "duplicated_nodes": duplicated,
        "total_duplicated_nodes": int(sum(duplicated)),
        "extra_memory_bytes": int(sum(duplicated)) * row_bytes,
    }
    return plan


def _spst(wanted, devs, topology, row_bytes, max_depth: int = MAX_DEPTH) -> CommPlan:
    k_parts = len(devs)
    n_res = 2 * len(topology.links)
    seconds_per_byte = np.zeros((k_parts * k_parts, n_res))
    for a in range(k_parts):
        for b in range(k_parts):
            if a != b:
                for hop in topology.route(devs[a], devs[b]):
                    seconds_per_byte[a * k_parts + b, hop.resource] = 1.0 / (
                        topology.links[hop.link].bandwidth_gbps * 1e9
                    )
    squared = (seconds_per_byte**2).sum(axis=1)
    latency = np.array(
        [
            sum(topology.links[h.link].latency_us for h in topology.route(devs[a], devs[b])) * 1e-6 if a != b else 0.0
            for a in range(k_parts)
            for b in range(k_parts)
        ]
    )
    load = np.zeros((max_depth, n_res))  # seconds of traffic per stage and link direction
    stage_latency = np.zeros((max_depth, 1))  # the slowest route's latency in each stage
    hops: dict[tuple[int, int, int], list[np.ndarray]] = defaultdict(list)
    for owner, targets, ids in _chunks(wanted, k_parts, row_bytes):
        nbytes = ids.size * row_bytes
        depth = {owner: 0}
        left = set(targets)
        while left:
            weight = (
                2 * nbytes * (load @ seconds_per_byte.T)
                + nbytes * nbytes * squared
                + np.maximum(stage_latency, latency) ** 2
                - stage_latency**2
            )
            path = _cheapest_path(weight.reshape(max_depth, k_parts, k_parts), depth, left)
            for a, b in path:
                stage = depth[a]
                hops[(stage, a, b)].append(ids)
                depth[b] = stage + 1
                load[stage] += nbytes * seconds_per_byte[a * k_parts + b]
                stage_latency[stage] = max(stage_latency[stage, 0], latency[a * k_parts + b])
                left.discard(b)
    plan = CommPlan("allgather", "spst", topology.name, row_bytes=row_bytes)
    for (stage, a, b), chunks in sorted(hops.items()):
        while len(plan.stages) <= stage:
            plan.stages.append([])
        ids = np.sort(np.concatenate(chunks))
        plan.stages[stage].append(Send(devs[a], devs[b], float(ids.size * row_bytes), ids))
    return plan


def _chunks(wanted, k_parts, row_bytes):
    """(owner, requester parts, ids) for vertices grouped by owner and requester set, largest
    groups first, each split into up to CHUNKS_PER_GROUP chunks."""
    groups = []
    for owner in range(k_parts):
        mine = {q: ids for (k, q), ids in wanted.items() if k == owner}
        if not mine:
            continue
        ids = np.concatenate(list(mine.values()))
        bits = np.concatenate([np.full(v.size, 1 << q, dtype=np.int64) for q, v in mine.items()])
        order = np.argsort(ids, kind="stable")
        ids, bits = ids[order], bits[order]
        starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
        nodes, masks = ids[starts], np.bitwise_or.reduceat(bits, starts)
        by_mask = np.argsort(masks, kind="stable")
        nodes, masks = nodes[by_mask], masks[by_mask]
        cuts = np.flatnonzero(np.concatenate([[True], masks[1:] != masks[:-1], [True]]))
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            targets = [q for q in range(k_parts) if masks[lo] >> q & 1]
            for piece in np.array_split(nodes[lo:hi], min(CHUNKS_PER_GROUP, hi - lo)):
                groups.append((owner, targets, piece))
    groups.sort(key=lambda g: (-g[2].size * len(g[1]), g[0], g[1]))
    return groups


def _cheapest_path(weight: np.ndarray, tree: dict[int, int], left: set[int]) -> list[tuple[int, int]]:
    """Multi-source Dijkstra over (device, stage) from the tree's nodes to the nearest part still
    to reach; ``weight[s, a, b]`` prices hop a -> b in stage s. Relays may be any device outside
    the tree; no path goes deeper than ``weight.shape[0]`` stages. Returns the hops of the path."""
    stages, k, _ = weight.shape
    start = {(node, depth) for node, depth in tree.items() if depth < stages}
    dist = {state: 0.0 for state in start}
    parent: dict[tuple[int, int], tuple[int, int]] = {}
    heap = [(0.0, state) for state in sorted(start)]
    done = set()
    while heap:
        d, (node, depth) = heapq.heappop(heap)
        if (node, depth) in done:
            continue
        done.add((node, depth))
        if node in left:
            path, cur = [], (node, depth)
            while cur not in start:
                path.append((parent[cur][0], cur[0]))
                cur = parent[cur]
            return path[::-1]
        if depth >= stages:
            continue
        for nxt in range(k):
            if nxt == node or nxt in tree:
                continue
            state = (nxt, depth + 1)
            nd = d + weight[depth, node, nxt]
            if nd < dist.get(state, np.inf):
                dist[state] = nd
                parent[state] = (node, depth)
                heapq.heappush(heap, (nd, state))
    raise PlanError("no path from the tree to the remaining parts")
