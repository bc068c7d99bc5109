"""The memory a job will hold, estimated before it starts, from its partition set and options.

What a machine holds (the peak PSS of its whole process tree, as ``benchmarks/memory.py``
measures it) is what its processes share once plus what each worker holds on its own:

- **shared once per machine**: the launcher, and the interpreter the ranks are forked from with
  everything they import (:mod:`commgraph.runtime.zygote`); the partition set's ``structure/``
  files, memory-mapped by every sampling worker; the feature files of the machine's parts where
  workers read each other's rows from them (sampled training with ``--peer-rows map``);
- **per worker**: the runtime's own pages (communicator, thread pools, the pages of the shared
  interpreter it writes); its part's feature table, read into memory for its feature store; a
  step's tables (the input rows of a batch and the activations computed on them, or the part and
  its halo in full-graph training, with the part's in-edges as its adjacency); the model with its
  gradients and Adam's two moments; the full-graph evaluation pass over its part and halo
  (without autograd, its layers computed in chunks of destinations), or, where every worker is on
  one machine and reads its peers' rows in place, the machine's shared evaluation tables: hidden
  tables only, layer 0 reading its rows from the feature files (:func:`_shared_tables`); or,
  under a budget, the sampled evaluation's batch (:mod:`commgraph.train.sampled_eval`), whose
  tables are a step's at the evaluation's fanouts, so evaluation no longer grows with the graph.

A step's input rows are the distinct nodes a batch's hops reach: with ``B`` seeds and fanouts
``f_1..f_L``, ``d = B (1 + f_1 + f_1 f_2 + ...)`` draws over ``N`` nodes reach about
``N (1 - exp(-d / N))`` of them. A GCN or GraphSAGE reads them :data:`INPUT_CHUNK_BYTES` at a
time: where its first layer narrows the rows it keeps their transform (hidden-wide), else its
first layer's destinations' aggregates at the input width (:func:`_sampled_first_layers`); other
models hold the whole input table. A batch's edges are each hop's destinations times its fanout. The
runtime's constants were measured on this project's CPU workers (``benchmarks/memory.py``,
docs/benchmarks/memory.md).

Under a memory budget (``--memory-budget``, :func:`_under_budget`), sampled training streams what
it can from disk: the ``structure/`` files and peers' feature files are mapped (their pages are
the kernel's page cache, reclaimable), and each worker's feature table stays in its file, read
through a cache of its hottest rows (:mod:`commgraph.runtime.feature_cache`). What stays resident
is everything else, plus each worker's read-ahead: a batch's input rows being read while the step
before computes, and the rows of the step computing (:data:`READ_AHEAD_STAGES`). The minimum a
job needs is that resident part; of what the budget leaves above it, :data:`CACHE_SHARE` holds hot
rows (split over the machine's workers) and the rest is left to the page cache. Full-graph
training streams nothing: its minimum is its whole estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from commgraph.errors import TrainingError
from commgraph.nn.options import HETERO_MODELS, LINEAR_FIRST
from commgraph.partition.store import STRUCTURE, PartitionSet
from commgraph.sample.options import EXPLAIN_NODES, EXPLAIN_TARGETS

GB = 1e9
# measured on Cora with 4 CPU workers (1.05-1.12 GB in all; docs/benchmarks/memory.md): while the workers
# run, the launcher and the zygote it forked share their imports and hold about 0.45 GB together
LAUNCHER_BYTES = int(0.3 * GB)  # the launcher process: its imports, the store, the plan it chose
ZYGOTE_BYTES = int(0.15 * GB)  # the warmed interpreter the ranks are forked from, beyond the launcher's pages
WORKER_RUNTIME_BYTES = int(0.15 * GB)  # a rank's own runtime pages (what it writes of the shared ones)
TABLE_COPIES = 2  # a batch's input table, and the rows in flight into it
# layer 0's output entry where it is aggregated as made: its float pre-activation, a byte each of
# dropout's mask and of what passed
OUTPUT_ENTRY_BYTES = 6
INPUT_CHUNK_BYTES = 1 << 22  # a batch's input rows are read this many bytes at a time (larger: a fragmented heap)
BLOCK_EDGE_BYTES = 12  # an edge of a block held as its adjacency: its int32 column and its float32 value
SAMPLED_EDGE_BYTES = 16 + BLOCK_EDGE_BYTES  # a sampled edge: the sampler's two int64 ends, and the block's
ACTIVATION_COPIES = 4  # per layer: output, its gradient, and the aggregation's buffers
# DGS's explainer process, a fresh interpreter with torch: 0.52 GB on its own, about 0.3 GB of the tree's PSS
# beside the workers whose library pages it shares (docs/benchmarks/memory.md)
EXPLAINER_RUNTIME_BYTES = int(0.3 * GB)
FULL_GRAPH_EDGE_BYTES = 12  # a part's in-edge in the full-graph pass: int32 adjacency, its values, relabelled columns
HGT_EDGE_COPIES = 6  # nn.hgt's per-edge tables, hidden wide (keys, values, both transformed, messages twice)
EVAL_CHUNK_BYTES = 1 << 24  # nn.model's chunk of an evaluation's destinations (kept equal by a test)
PHASES = ("tables", "evaluation")  # a step's tables and the evaluation pass: never held at once
# R-GCN's part in-edge: its relation's adjacency and its transpose (int32 column, float32 value each), its
# edge type (int16) and its column in the part's mapped indices.npy (int32)
TYPED_EDGE_BYTES = 22
LOSS_CHUNKS = 2  # R-GCN's loss, a chunk of its logits at a time: the chunk's logits and their (log-)softmax
SHARED_EVAL_CHUNKS = 3  # a shared evaluation's chunk: its block (layer 0: its rows), its output, its aggregation
READ_AHEAD_STAGES = 2  # under a budget: the batch a step reads, and the next one its reader thread fills
CACHE_SHARE = 0.5  # under a budget: of the room above the resident parts, the hot rows' share (the rest: page cache)
STREAMED = ("structure", "features")  # what a budget leaves on disk: mapped, or read through the feature cache


@dataclass(frozen=True)
class JobShape:
    """What the estimate needs of a training or inference job's options.

    Args:
        workers: workers of the job; ``machine_workers`` of them on one machine.
        hidden, layers: the model's width and depth.
        sampler: the sampler (None: full-graph).
        batch_size, fanouts: a sampled batch's seeds and neighbours per hop.
        peer_rows: ``map`` (peers' rows read from their shared files) or ``network``.
        structure: ``replicated`` (the set's whole-graph ``structure/`` files) or ``partitioned``
            (the machine's parts' in-edges, and the owner and degree maps).
        train: whether the job trains (the model's gradients and optimiser state, a step's tables).
        features: whether the job reads the node features (analytics does not).
        model: the GNN kind (:data:`~commgraph.nn.options.MODELS`).
        explainer: whether each worker explains its part for DGS (an online explainer, or the
            masks written after training).
        explainer_process: whether that explainer runs in a process of its own (``--explain-in
            process``) rather than in the worker.
        first_layer: how the full-graph pass's layer 0 reads its halo rows: ``features`` (a table
            of the halo's features) or ``owner`` (their owners' hidden-wide transforms;
            :mod:`commgraph.plan.first_layer`).
        memory_budget: bytes the machine's whole job may hold, page cache included (None: no
            budget; the estimate holds every worker's features in memory).
        eval_fanouts: sampled training's evaluation by sampled inference with these fanouts
            (:mod:`commgraph.train.sampled_eval`, what a budgeted run does); None: the full-graph
            evaluation pass.
    """

    workers: int
    machine_workers: int
    hidden: int
    layers: int
    sampler: str | None = None
    batch_size: int = 1024
    fanouts: tuple[int, ...] = ()
    peer_rows: str = "map"
    structure: str = "replicated"
    train: bool = True
    features: bool = True
    model: str = "sage"
    explainer: bool = False
    explainer_process: bool = True
    first_layer: str = "features"
    memory_budget: int | None = None
    eval_fanouts: tuple[int, ...] | None = None


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes by part: ``machine`` once per machine, ``worker`` for each worker (its largest part
    when parts differ). Under a budget, ``streamed`` is what stays on disk (``structure``: the
    mapped files; ``features``: every worker's rows beyond its cache), ``minimum_bytes`` what the
    machine needs with no cache at all, and the worker's ``features`` its cache."""

    machine_workers: int
    machine: dict[str, int] = field(default_factory=dict)
    worker: dict[str, int] = field(default_factory=dict)
    budget: int | None = None
    minimum_bytes: int | None = None
    streamed: dict[str, int] = field(default_factory=dict)

    @property
    def cache_bytes(self) -> int | None:
        """Under a budget, each worker's feature cache (None: no budget, the features held whole)."""
        return None if self.budget is None else self.worker.get("features", 0)

    @property
    def worker_peak_bytes(self) -> int:
        """What one worker holds at its peak: its parts, with a step's ``tables`` and the
        ``evaluation`` pass counted at the larger of the two where a job has both (sampled
        training: the steps' memory is handed back before the evaluation pass)."""
        return self._worker_base() + max(self.worker.get(name, 0) for name in PHASES)

    @property
    def machine_peak_bytes(self) -> int:
        """What a machine holds: what it shares once, plus each of its workers' parts; the
        machine's ``evaluation`` tables (shared by its workers) and theirs in one phase, the
        steps' tables in the other, whichever is larger."""
        shared = sum(v for k, v in self.machine.items() if k not in PHASES)
        steps = self.machine_workers * self.worker.get("tables", 0)
        evaluation = self.machine.get("evaluation", 0) + self.machine_workers * self.worker.get("evaluation", 0)
        return shared + self.machine_workers * self._worker_base() + max(steps, evaluation)

    def _worker_base(self) -> int:
        return sum(v for k, v in self.worker.items() if k not in PHASES)

    def to_dict(self) -> dict:
        """The estimate as JSON-ready data."""
        budget = (
            {}
            if self.budget is None
            else {
                "budget": self.budget,
                "minimum_bytes": self.minimum_bytes,
                "streamed": dict(self.streamed),
            }
        )
        return {
            "worker_peak_bytes": self.worker_peak_bytes,
            "machine_peak_bytes": self.machine_peak_bytes,
            "machine_workers": self.machine_workers,
            "machine": dict(self.machine),
            "worker": dict(self.worker),
            **budget,
        }


def estimate_memory(pset: PartitionSet, shape: JobShape) -> MemoryEstimate:
    """The memory ``shape``'s job on ``pset`` will hold (see the module's description)."""
    if shape.model in HETERO_MODELS:
        return _typed_estimate(pset, shape)
    n = int(pset.manifest["graph"]["num_nodes"])
    num_edges = int(pset.manifest["graph"]["num_edges"])
    first = pset.part(0, check=False)
    width = 0 if first.features is None or not shape.features else int(first.features.shape[1])
    classes = label_classes(pset)
    sizes = [part_sizes(pset, k) for k in range(pset.num_parts)]
    owned = max(s[0] for s in sizes)
    local = max(s[0] + s[1] for s in sizes)
    part_structure = FULL_GRAPH_EDGE_BYTES * max(s[2] for s in sizes)  # the largest part's in-edges, full-graph
    machine = {"launcher": LAUNCHER_BYTES, "runtime": ZYGOTE_BYTES}
    worker = {"runtime": WORKER_RUNTIME_BYTES, "features": 4 * owned * width}
    if shape.sampler is None:
        worker["structure"] = part_structure
        worker["tables" if shape.train else "evaluation"] = _full_graph_pass(owned, local, width, shape)
    if shape.sampler is not None:
        machine["structure"] = _structure_bytes(pset, shape.structure, shape.machine_workers)
        if shape.peer_rows == "map" and shape.machine_workers > 1:
            machine["features"] = 4 * n * width * min(1.0, shape.machine_workers / shape.workers)
        worker["tables"] = _sampled_tables(n, num_edges, width, shape)
        if shape.eval_fanouts is not None:  # a batch's tables at the evaluation's fanouts
            worker["evaluation"] = _sampled_tables(n, num_edges, width, replace(shape, fanouts=shape.eval_fanouts))
        elif shares_evaluation(shape):
            machine["evaluation"] = _shared_tables(n, shape, classes)
            # a chunk, two node maps (table row, degree), the owned rows' logits (and root terms);
            # with partitioned structure, the part's in-edges
            part_edges = 0 if shape.structure == "replicated" else 4 * max(s[2] for s in sizes) + 4 * local
            logits = 2 * 4 * owned * classes
            worker["evaluation"] = SHARED_EVAL_CHUNKS * EVAL_CHUNK_BYTES + 8 * n + part_edges + logits
        else:
            evaluation = replace(shape, train=False)  # the full-graph pass over the part, without autograd
            worker["evaluation"] = part_structure + _full_graph_pass(owned, local, width, evaluation)
        if shape.explainer:
            worker["explainer"] = _explainer_bytes(n, num_edges, owned, width, shape)
    if shape.train:
        worker["model"] = 16 * model_parameters(width, shape.hidden, shape.layers, classes)
    estimate = MemoryEstimate(
        shape.machine_workers, {k: int(v) for k, v in machine.items()}, {k: int(v) for k, v in worker.items()}
    )
    if shape.memory_budget is None:
        return estimate
    if shape.sampler is None:  # the full-graph pass holds its part's features and in-edges whole
        return replace(estimate, budget=shape.memory_budget, minimum_bytes=estimate.machine_peak_bytes)
    read_ahead = READ_AHEAD_STAGES * 4 * width * reached_nodes(n, shape.batch_size, shape.fanouts)
    return _under_budget(estimate, shape.memory_budget, read_ahead)


def _under_budget(estimate: MemoryEstimate, budget: int, read_ahead: int) -> MemoryEstimate:
    """Sampled training's ``estimate`` fitted to ``budget`` bytes (the module's description): the
    mapped files and the features move to ``streamed``, each worker gains its ``read-ahead`` and a
    feature cache of its share of the room left (at most its whole table)."""
    workers = estimate.machine_workers
    table = estimate.worker.get("features", 0)
    machine = {k: v for k, v in estimate.machine.items() if k not in STREAMED}
    worker = {**estimate.worker, "features": 0, "read-ahead": read_ahead}
    resident = replace(estimate, machine=machine, worker=worker)
    minimum = resident.machine_peak_bytes
    cache = min(table, int(max(budget - minimum, 0) * CACHE_SHARE) // max(workers, 1))
    worker["features"] = cache
    # peers' rows mapped (machine "features") are the same files as the workers' own tables
    streamed = {"structure": estimate.machine.get("structure", 0), "features": workers * (table - cache)}
    return replace(resident, worker=worker, budget=budget, minimum_bytes=minimum, streamed=streamed)


def _typed_estimate(pset: PartitionSet, shape: JobShape) -> MemoryEstimate:
    """R-GCN's training on a typed set (:mod:`commgraph.train.rgcn`), per worker its largest
    part's: each node type's feature rows at the type's own width (``x-<t>.npy``), the embedding
    rows of its owned nodes of types without features (with their gradient and Adam's moments), its
    in-edges (:data:`TYPED_EDGE_BYTES` each) and :func:`_typed_tables` with autograd. Sampled
    (:mod:`commgraph.train.rgcn_sampled`), the tables are a batch's (:func:`_typed_batch`) and the
    full-graph pass evaluates without autograd; each worker also holds every relation's in-edges
    (its source and position, int64 each) and the sampler's node-indexed scratch."""
    typed = pset.manifest.get("typed")
    if typed is None:
        raise TrainingError(f"{pset.path} is not a typed partition set: --model {shape.model} needs one")
    widths = [int(typed["num_features"][t]) for t in typed["node_types"]]
    classes = label_classes(pset)
    worker = {"runtime": WORKER_RUNTIME_BYTES, "features": 0, "embeddings": 0, "structure": 0}
    phase = "tables" if shape.sampler is None else "evaluation"
    worker[phase] = 0
    for k in range(pset.num_parts):
        owned = typed["owned"][k]
        part = {
            "features": sum(4 * n * w for n, w in zip(owned, widths, strict=True)),
            "embeddings": sum(16 * n * shape.hidden for n, w in zip(owned, widths, strict=True) if not w),
            "structure": TYPED_EDGE_BYTES * sum(typed["relation_edges"][k]),
            phase: _typed_tables(typed, k, shape, classes, train=shape.sampler is None),
        }
        worker = {name: max(value, part.get(name, 0)) for name, value in worker.items()}
    if shape.sampler is not None:
        nodes, edges = int(typed["offsets"][-1]), int(pset.manifest["graph"]["num_edges"])
        worker["structure"] += 16 * edges + 8 * nodes + 8 * nodes  # the relations' CSRs, the scratch
        worker["tables"] = _typed_batch(typed, edges, shape)
    shared = [16 * p for p in _typed_parameters(widths, len(typed["relations"]), shape, classes)]
    worker["model"] = sum(shared)
    machine = {"launcher": LAUNCHER_BYTES, "runtime": ZYGOTE_BYTES}
    return MemoryEstimate(shape.machine_workers, machine, {k: int(v) for k, v in worker.items()})


def _typed_tables(typed: dict, k: int, shape: JobShape, classes: int, *, train: bool = True) -> int:
    """Part ``k``'s R-GCN full-graph pass, per layer: its table (owned and halo rows, hidden wide:
    the rows, the halo received and, with autograd, the table's gradient); per destination type
    the product's input (its rows' own rows and each relation's aggregate into them, hidden wide);
    and ``ACTIVATION_COPIES`` of its output rows with autograd (two without); HGT's layers also hold
    :data:`HGT_EDGE_COPIES` hidden-wide rows per in-edge of the destinations. The last layer
    computes the target type's rows alone, ``classes`` wide, a chunk of :data:`EVAL_CHUNK_BYTES` at
    a time (:data:`LOSS_CHUNKS` of them). With autograd (``train``) every layer's is held until the
    backward pass; without, the largest layer's."""
    owned, halo = typed["owned"][k], sum(typed["halo"][k])
    types = typed["node_types"]
    into = [types.index(dst) for _, _, dst in typed["relations"]]
    target = types.index(typed["target"])
    table_copies, output_copies = (3, ACTIVATION_COPIES) if train else (2, 2)
    held = []
    for index in range(shape.layers):
        last = index == shape.layers - 1
        rows, out = (owned[target], classes) if last else (sum(owned), shape.hidden)
        reached = [target] if last else sorted(set(into))
        product = sum(owned[t] * (1 + into.count(t)) for t in reached)
        if shape.model == "hgt":  # per in-edge, hidden wide: keys and values gathered and transformed, messages
            product += HGT_EDGE_COPIES * sum(
                e for e, t in zip(typed["relation_edges"][k], into, strict=True) if t in reached
            )
        outputs = LOSS_CHUNKS * min(EVAL_CHUNK_BYTES, 4 * rows * out) if last else 4 * output_copies * rows * out
        held.append(4 * shape.hidden * (table_copies * (sum(owned) + halo) + product) + outputs)
    return sum(held) if train else max(held)


def _typed_batch(typed: dict, num_edges: int, shape: JobShape) -> int:
    """A sampled R-GCN step (:mod:`commgraph.train.rgcn_sampled`) of ``batch_size`` seeds: each
    node of a hop draws ``fanout`` in-neighbours over every relation into its type, about
    ``fanout`` times the relations per node type over all the types' nodes
    (:func:`reached_nodes`, :func:`sampled_edges`). Its input rows, hidden wide (received, served
    and their gradients: four copies), each layer's destinations' activations
    (``ACTIVATION_COPIES``) and product inputs, and the edges (the sampler's ends and slot, both
    CSRs of the block: :data:`SAMPLED_EDGE_BYTES` and :data:`BLOCK_EDGE_BYTES`)."""
    nodes = int(typed["offsets"][-1])
    per_type = len(typed["relations"]) / max(len(typed["node_types"]), 1)
    fanouts = tuple(f if f < 0 else max(1, round(f * per_type)) for f in shape.fanouts)
    rows = reached_nodes(nodes, shape.batch_size, fanouts)
    edges = sampled_edges(nodes, num_edges, shape.batch_size, fanouts)
    destinations = [shape.batch_size] + [
        reached_nodes(nodes, shape.batch_size, fanouts[:hop]) for hop in range(1, len(fanouts))
    ]
    activations = sum(4 * d * shape.hidden * (ACTIVATION_COPIES + 1 + round(per_type)) for d in destinations)
    return 4 * 4 * rows * shape.hidden + activations + (SAMPLED_EDGE_BYTES + 8 + 2 * BLOCK_EDGE_BYTES) * edges


def _typed_parameters(widths: list[int], relations: int, shape: JobShape, classes: int) -> list[int]:
    """R-GCN's shared parameters by layer: the input projections, then each R-GCN layer's weights
    (a weight per relation: no bases are assumed, the most there can be), root and bias."""
    projections = sum((w + 1) * shape.hidden for w in widths if w)
    layers = [(relations + 1) * shape.hidden * out + out for out in [shape.hidden] * (shape.layers - 1) + [classes]]
    return [projections, *layers]


def shares_evaluation(shape: JobShape) -> bool:
    """Whether sampled training's evaluation holds its layer tables once per machine
    (``train.shared_eval``, on CPU): every worker on one machine, peers' rows read in place."""
    return shape.sampler is not None and shape.peer_rows == "map" and shape.machine_workers == shape.workers


def _shared_tables(num_nodes: int, shape: JobShape, classes: int) -> int:
    """The machine's evaluation tables at their largest: layer ``l``'s input and output tables
    (``N`` rows each) live together, except that layer 0 reads its rows from the parts' feature
    files in place (counted as ``features``: no input table) and the last layer's output stays
    with its workers; a GCN's or GraphSAGE's last layer that narrows its rows reads a table of
    its transformed rows, ``classes`` wide."""
    tables = [shape.hidden] * (shape.layers - 1)  # layer l's output, l < layers - 1
    if tables and shape.model in LINEAR_FIRST and classes < shape.hidden:
        tables[-1] = classes
    widths = [0, *tables, 0]
    return max(4 * num_nodes * (widths[l] + widths[l + 1]) for l in range(shape.layers))


def _sampled_tables(num_nodes: int, num_edges: int, width: int, shape: JobShape) -> int:
    """A sampled step's tables: its input rows and activations (:func:`_sampled_first_layers`),
    its edges, and the sampler's node-indexed scratch (8 bytes a node). The sampled evaluation's
    batch is priced the same at its fanouts (it holds less without autograd)."""
    edges = sampled_edges(num_nodes, num_edges, shape.batch_size, shape.fanouts)
    return _sampled_first_layers(num_nodes, width, shape) + SAMPLED_EDGE_BYTES * edges + 8 * num_nodes


def _sampled_first_layers(num_nodes: int, width: int, shape: JobShape) -> int:
    """A batch's input rows and activations with autograd (``train.fetch``'s three ways):

    - a GCN or GraphSAGE whose layer 0 narrows its rows: its input rows a chunk at a time, their
      transform (hidden-wide, with its gradient) for every input row, then the activations;
    - one whose layer 0 does not narrow them: its input rows a chunk at a time, layer 0's
      destinations' aggregates and own rows at the input width, and (with a second layer)
      layer 0's activated output never held (:data:`OUTPUT_ENTRY_BYTES` an entry), then the later
      layers' activations;
    - any other model: the whole input table (``TABLE_COPIES``), then the activations.
    """
    rows = reached_nodes(num_nodes, shape.batch_size, shape.fanouts)
    destinations = [shape.batch_size] + [
        reached_nodes(num_nodes, shape.batch_size, shape.fanouts[:hop]) for hop in range(1, len(shape.fanouts))
    ]  # layer L - 1's, ..., then layer 0's
    if shape.model not in LINEAR_FIRST:
        return 4 * rows * TABLE_COPIES * width + _activations(destinations, shape.hidden)
    if shape.hidden < width:  # narrows
        return 2 * INPUT_CHUNK_BYTES + 2 * 4 * rows * shape.hidden + _activations(destinations, shape.hidden)
    first = destinations[-1]  # layer 0's destinations: their sums and own rows at the input width
    held = 2 * INPUT_CHUNK_BYTES + 2 * 4 * first * width
    if len(destinations) == 1:
        return held + _activations(destinations, shape.hidden)
    return held + OUTPUT_ENTRY_BYTES * first * shape.hidden + _activations(destinations[:-1], shape.hidden)


def _activations(destinations: list[int], hidden: int) -> int:
    """``ACTIVATION_COPIES`` hidden-wide rows per destination of each layer listed."""
    return 4 * sum(destinations) * ACTIVATION_COPIES * hidden


def _full_graph_pass(owned: int, local: int, width: int, shape: JobShape) -> int:
    """The full-graph pass over a part of ``owned`` rows and its halo (``local`` rows in all): its
    input table (the owned rows only where the owners compute the halo's first layer); layer 0's
    aggregation of the owned rows at input width (hidden width, of the owners' transforms), kept
    for the backward pass beside its scratch (training), or one chunk of it (evaluation,
    ``EVAL_CHUNK_BYTES``); the
    hidden tables, ``ACTIVATION_COPIES`` per layer with autograd (output, gradient, buffers), two
    without (a layer's input and output)."""
    hidden_copies = ACTIVATION_COPIES * shape.layers if shape.train else 2
    if shape.first_layer == "owner":  # the owned rows' features; layer 0 aggregates hidden-wide transforms
        table, aggregated = 4 * owned * width, shape.hidden
    else:
        table, aggregated = 4 * local * width, width
    aggregation = 2 * 4 * owned * aggregated if shape.train else min(4 * owned * aggregated, EVAL_CHUNK_BYTES)
    return table + aggregation + 4 * local * shape.hidden * hidden_copies


def reached_nodes(num_nodes: int, batch_size: int, fanouts: tuple[int, ...]) -> int:
    """Expected distinct input nodes of a batch of ``batch_size`` seeds sampled with ``fanouts``
    (-1: every neighbour, taken as the whole graph)."""
    if any(f < 0 for f in fanouts):
        return num_nodes
    draws, width = float(batch_size), float(batch_size)
    for fanout in fanouts:
        width *= fanout
        draws += width
    return min(num_nodes, round(num_nodes * -math.expm1(-draws / max(num_nodes, 1))) + batch_size)


def sampled_edges(num_nodes: int, num_edges: int, batch_size: int, fanouts: tuple[int, ...]) -> int:
    """Expected edges of a batch's blocks: each hop's destinations (the seeds, then the nodes the
    earlier hops reached) times its fanout (-1: the graph's mean in-degree)."""
    total = 0
    for hop, fanout in enumerate(fanouts):
        dst = batch_size if hop == 0 else reached_nodes(num_nodes, batch_size, fanouts[:hop])
        total += dst * (fanout if fanout >= 0 else num_edges / max(num_nodes, 1))
    return round(total)


def _explainer_bytes(num_nodes: int, num_edges: int, owned: int, width: int, shape: JobShape) -> int:
    """DGS's explainer of one worker (:class:`~commgraph.sample.explain.ExplanationPlan`): its
    process's interpreter (none with ``--explain-in worker``), and the explanation graph, held once
    (the worker hands it to that process and keeps none): the star's rows, four tables of them
    while GNNExplainer runs (the rows, the masked rows, their gradient and its product with the
    rows), and the target batch's input rows twice (the table and its first layer's aggregation),
    with its edges. A part whose whole neighbourhood has at most ``EXPLAIN_NODES`` nodes is
    explained whole: the neighbourhood's rows and edges; a larger one on ``EXPLAIN_NODES`` remote
    nodes and ``EXPLAIN_TARGETS`` targets drawn with the training fanouts."""
    hops = (max(1, round(num_edges / max(num_nodes, 1))),) * shape.layers
    reached = reached_nodes(num_nodes, owned, hops)
    if reached <= EXPLAIN_NODES:
        star, targets, edges = reached, reached, sampled_edges(num_nodes, num_edges, owned, hops)
    else:
        star = EXPLAIN_NODES
        targets = reached_nodes(num_nodes, EXPLAIN_TARGETS, shape.fanouts)
        edges = sampled_edges(num_nodes, num_edges, EXPLAIN_TARGETS, shape.fanouts)
    runtime = EXPLAINER_RUNTIME_BYTES if shape.explainer_process else 0
    return runtime + 4 * width * (4 * star + 2 * targets) + BLOCK_EDGE_BYTES * edges


def part_sizes(pset: PartitionSet, k: int) -> tuple[int, int, int]:
    """Owned and halo nodes and in-edges of part ``k``, from its arrays' shapes (no data read)."""
    part = pset.part(k, check=False)
    return part.num_owned, part.num_halo, int(part.indices.shape[0])


def _structure_bytes(pset: PartitionSet, structure: str, machine_workers: int) -> int:
    """The in-edges a machine maps: the whole graph's once, or (``partitioned``) the node maps and
    its parts' CSRs (the largest parts, one per worker of the machine)."""

    def size(name: str) -> int:
        return (pset.path / name).stat().st_size

    if structure == "replicated":
        return sum(size(f"structure/{name}.npy") for name in STRUCTURE)
    parts = sorted(
        (size(f"part-{k}/indptr.npy") + size(f"part-{k}/indices.npy") for k in range(pset.num_parts)), reverse=True
    )
    return size("structure/owner.npy") + size("structure/degree.npy") + sum(parts[:machine_workers])


def label_classes(pset: PartitionSet) -> int:
    """About how many classes the set's labels have (part 0's)."""
    labels = pset.part(0, check=False).labels
    return 1 if labels is None or labels.shape[0] == 0 else int(np.max(labels)) + 1


def model_parameters(width: int, hidden: int, layers: int, classes: int) -> int:
    """About how many parameters the model has (its weights; biases are negligible)."""
    return 2 * (width * hidden + max(layers - 2, 0) * hidden * hidden + hidden * max(classes, hidden))
