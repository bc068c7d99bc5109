"""How one worker runs a model's forward pass over its part: three exchange strategies.

- ``pipelined`` (G3): bins in priority order; each finished bin's boundary rows leave at once; the
  next layer runs whichever bin has all its inputs (eager), so interior bins overlap the transfers.
- ``barrier`` (NeuGraph-style): a layer computes all its rows, then exchanges, then the next layer.
- ``replicate`` (DGL-style): the L-hop in-neighbourhood is held locally from the start and computed
  redundantly; nothing is exchanged per layer.

All three compute exactly the single-graph model. In every backward pass the gradients of halo
rows go back to their owners, which add them up: layer-wise through the halo op (barrier), bin by
bin through tensor hooks (pipelined).
"""

from __future__ import annotations

import numpy as np
import torch

from commgraph.graph.core import loop_free_in_degrees
from commgraph.nn import GNN, Block
from commgraph.partition.store import Part, PartitionSet
from commgraph.plan import plan_allgather
from commgraph.plan.model import CommPlan, Send
from commgraph.runtime import Communicator, Exchange, Message, halo_exchange
from commgraph.runtime.comm import TAG_SPAN
from commgraph.topology import load_topology
from commgraph.train import schedule

EXCHANGES = ("pipelined", "barrier", "replicate")


def row_block(indptr: np.ndarray, indices: np.ndarray, start: int, end: int, num_src: int,
              degree: torch.Tensor, device) -> Block:
    """The block of rows ``[start, end)`` of a table of ``num_src`` rows."""
    src, dst = schedule.range_edges(indptr, indices, start, end)
    return Block(num_src, end - start, torch.from_numpy(np.stack([src, dst])), degree, start).to(device)


def _devices(size: int) -> list[str]:
    return [d.id for d in load_topology(f"localhost-cpu:{max(size, 1)}").workers][:size]


class _Tables:
    """A part's input table (owned features, optionally reordered, then the halo's), with the halo
    rows fetched once up front through a point-to-point ``CommPlan``."""

    def __init__(self, part: Part, comm: Communicator, pset: PartitionSet, device, order: np.ndarray | None = None):
        self.num_owned, self.num_halo = part.num_owned, part.num_halo
        x = torch.from_numpy(np.array(part.features, dtype=np.float32)).to(device)
        plan = plan_allgather("p2p", pset, load_topology(f"localhost-cpu:{pset.num_parts}"), row_bytes=4 * x.shape[1])
        self.exchange = Exchange.from_plan(plan, part.index, _devices(pset.num_parts),
                                           np.asarray(part.owned), np.asarray(part.halo))
        comm.count_as("features")
        x_halo = comm.gather(self.exchange, x, tag_base=0)[: self.num_halo]
        degree = np.asarray(part.degree, dtype=np.float32)
        if order is not None:  # owned rows in the executor's order; halo rows as the part has them
            x = x.index_select(0, torch.from_numpy(order).to(device))
            degree = np.concatenate([degree[order], degree[self.num_owned :]])
        self.x = torch.cat([x, x_halo])
        self.degree = torch.from_numpy(degree).to(device)


class BarrierExecutor:
    """Layer-wise exchange of every boundary row through an all-gather ``CommPlan``, no overlap."""

    name = "barrier"

    def __init__(self, part: Part, pset: PartitionSet, comm: Communicator, device):
        self.comm = comm
        self.tables = _Tables(part, comm, pset, device)
        self.block = row_block(np.asarray(part.indptr), np.asarray(part.indices), 0, part.num_owned,
                               part.num_owned + part.num_halo, self.tables.degree, device)
        self.exchange = self.tables.exchange

    def forward(self, model: GNN) -> torch.Tensor:
        table, h = model.encode(self.tables.x), None
        for index in range(model.num_layers):
            h = model.layer(index, table, self.block, x_dst=h)
            if index < model.num_layers - 1 and self.exchange.idle:  # no halo: the table is h itself, no copy
                table = h
            elif index < model.num_layers - 1:
                tags = ((2 * index + 1) * TAG_SPAN, (2 * index + 2) * TAG_SPAN)
                self.comm.count_as(f"halo_forward:{index + 1}")
                table = torch.cat([h, halo_exchange(h, self.comm, self.exchange, tags)])
        return model.decode(h)


class ReplicateExecutor:
    """DGL-style: the part's L-hop in-neighbourhood (read from the partition set, as DGL's halo
    partitions store it) is computed redundantly; layer ``l`` computes hop set ``S_{L-1-l}`` from
    ``S_{L-l}``, and no embedding crosses workers."""

    name = "replicate"

    def __init__(self, part: Part, pset: PartitionSet, comm: Communicator, device, layers: int):
        self.comm = comm
        indptr, indices = pset.in_edges()
        nodes, sizes = schedule.hop_sets(indptr, indices, np.asarray(part.owned), layers)
        degree = torch.from_numpy(loop_free_in_degrees(indptr, indices)[nodes].astype(np.float32)).to(device)
        position = np.full(indptr.shape[0] - 1, -1, dtype=np.int64)
        position[nodes] = np.arange(nodes.shape[0])
        counts, sources = schedule.in_neighbours(indptr, indices, nodes[: sizes[-2]])
        local_indptr, local_indices = np.concatenate([[0], np.cumsum(counts)]), position[sources]
        self.blocks = [row_block(local_indptr, local_indices, 0, sizes[layers - 1 - index],
                                 sizes[layers - index], degree, device) for index in range(layers)]
        self.num_owned = part.num_owned
        self.x = torch.from_numpy(pset.rows("features", nodes).astype(np.float32)).to(device)
        comm.count_as("features")

    def forward(self, model: GNN) -> torch.Tensor:
        h = model.encode(self.x)
        for index, block in enumerate(self.blocks):
            h = model.layer(index, h, block)
        return model.decode(h[: self.num_owned])


class PipelinedExecutor:
    """G3's bins, priorities and eager computation (see ``schedule``), forward and backward.

    Forward: each finished bin's boundary rows leave at once; a bin of the next layer runs as soon
    as the halo rows it reads have landed. Backward mirrors it: the moment a layer's halo gradient
    is complete its rows go back to their owners, message by message, and each bin adds the
    gradients of its sent rows just before autograd runs that bin's backward. Autograd runs bins
    in reverse order of computation, so the interior bins' backward overlaps the transfers."""

    name = "pipelined"

    def __init__(self, part: Part, pset: PartitionSet, comm: Communicator, device, bin_size: int):
        self.comm, self.device = comm, device
        n_owned = part.num_owned
        order, boundary = schedule.priority_order(np.asarray(part.indptr), np.asarray(part.indices), n_owned,
                                                  np.asarray(part.send_index))
        self.tables = _Tables(part, comm, pset, device, order)
        indptr, indices = schedule.relabel(np.asarray(part.indptr), np.asarray(part.indices), n_owned, order)
        self.edges = schedule.bins(boundary, n_owned, bin_size)
        table_rows = n_owned + part.num_halo
        self.blocks = [row_block(indptr, indices, int(a), int(b), table_rows, self.tables.degree, device)
                       for a, b in zip(self.edges[:-1], self.edges[1:])]
        position = np.empty(n_owned, dtype=np.int64)
        position[order] = np.arange(n_owned)
        self.part_order = torch.from_numpy(position).to(device)  # output row of each part row
        self.recvs, self.outgoing, self.needs = self._messages(part, pset, order, position, indptr, indices)

    def _messages(self, part: Part, pset: PartitionSet, order, position, indptr, indices):
        """Which rows of which bin go to which peer, and which received message each bin waits for.
        Peers learn each other's bins once, at setup."""
        n_owned, me = part.num_owned, part.index
        owned = np.asarray(part.owned)[order]
        mine = {}
        for q in range(pset.num_parts):
            rows = np.sort(position[np.asarray(part.send_to(q))])
            if rows.size:
                cuts = np.searchsorted(rows, self.edges[1:-1])
                mine[q] = [(b, owned[r]) for b, r in enumerate(np.split(rows, cuts)) if r.size]
        everyone = self.comm.all_gather_object(mine) if self.comm.world is not None else [mine]
        devices = _devices(pset.num_parts)
        plan = CommPlan("allgather", "g3-bins", f"localhost-cpu:{pset.num_parts}")
        plan.stages.append([Send(devices[src], devices[q], float(ids.size), ids, priority=b)
                            for src, theirs in enumerate(everyone) for q, messages in sorted(theirs.items())
                            for b, ids in messages if me in (src, q)])
        exchange = Exchange.from_plan(plan, me, devices, owned, np.asarray(part.halo))
        sends, recvs = exchange.stages[0] if exchange.stages else ([], [])
        outgoing = [[] for _ in self.blocks]  # per bin: (peer, tag, rows counted from the bin's start)
        for m in sends:
            outgoing[m.tag].append((m.peer, m.tag, (m.index - int(self.edges[m.tag])).to(self.device)))
        message_of_slot = np.full(part.num_halo, -1, dtype=np.int64)
        for j, m in enumerate(recvs):
            message_of_slot[m.index.numpy() - n_owned] = j
        needs = []
        for a, b in zip(self.edges[:-1], self.edges[1:]):
            halo = indices[indptr[a] : indptr[b]]
            needs.append(np.unique(message_of_slot[halo[halo >= n_owned] - n_owned]).tolist())
        recvs = [Message(m.peer, m.tag, m.index.to(self.device)) for m in recvs]
        return recvs, outgoing, needs

    def forward(self, model: GNN) -> torch.Tensor:
        table = model.encode(self.tables.x)
        incoming = None  # layer 0's halo is the input features, already local
        sent, previous = [], [None] * len(self.blocks)
        for index in range(model.num_layers):
            last = index == model.num_layers - 1
            if not last:  # receives for the next layer's halo, posted before any computing
                following = _Incoming(self.comm, self.recvs, (2 * index + 1) * TAG_SPAN, model.widths[index + 1],
                                      table.device)
                grads = _GradientReturn(self.comm, self.recvs, self.outgoing, (2 * index + 2) * TAG_SPAN)
            outs = [None] * len(self.blocks)
            pending = list(range(len(self.blocks)))
            while pending:
                b = next((b for b in pending if incoming is None or incoming.ready(self.needs[b])), None)
                if b is None:  # nothing ready: block on a message the first pending bin needs
                    incoming.wait_for(self.needs[pending[0]])
                    continue
                pending.remove(b)
                out = model.layer(index, table, self.blocks[b], x_dst=previous[b])
                if not last and self.outgoing[b]:  # this bin's boundary rows leave now
                    self.comm.count_as(f"halo_forward:{index + 1}")
                    rows = out.detach()
                    for peer, tag, positions in self.outgoing[b]:
                        payload = rows.index_select(0, positions)
                        sent.append((self.comm.isend(payload, peer, following.tag_base + tag), peer, payload))
                    if out.requires_grad:
                        out.register_hook(grads.adder(b))
                outs[b] = out
                if incoming is not None:
                    incoming.poll()
            if last:
                h = outs[0] if len(outs) == 1 else torch.cat(outs)
            elif len(outs) == 1 and not self.recvs and not self.outgoing[0]:  # nothing to exchange
                table = outs[0]
            else:  # the next table: this layer's rows, then halo rows that land as they arrive
                table = torch.cat([*outs, outs[0].new_empty((self.tables.num_halo, outs[0].shape[1]))])
                if table.requires_grad:
                    table.register_hook(grads.start)
                following.target = table
                incoming = following
            previous = outs
        for work, peer, _payload in sent:
            self.comm.wait(work, peer)
        return model.decode(h).index_select(0, self.part_order)


class _Incoming:
    """The receives of one layer's halo, landing (copied into the table's halo rows) as they
    complete. Rows land through ``.data``: autograd must not count the fill as a change to the
    table, which bins already computed have read (they did not read these rows)."""

    def __init__(self, comm: Communicator, recvs: list[Message], tag_base: int, width: int, device):
        self.comm, self.recvs, self.tag_base = comm, recvs, tag_base
        self.target: torch.Tensor | None = None  # the table, set once the layer's output exists
        self.buffers = [torch.empty((m.index.numel(), width), device=device) for m in recvs]
        self.works = [comm.irecv(buf, m.peer, tag_base + m.tag) for buf, m in zip(self.buffers, recvs)]
        self.arrived = [False] * len(recvs)

    def ready(self, needs: list[int]) -> bool:
        return all(self.arrived[j] for j in needs)

    def poll(self) -> None:
        for j, work in enumerate(self.works):
            if not self.arrived[j] and work.is_completed():
                self._land(j)

    def wait_for(self, needs: list[int]) -> None:
        self._land(next(j for j in needs if not self.arrived[j]))

    def _land(self, j: int) -> None:
        self.comm.wait(self.works[j], self.recvs[j].peer)
        self.target.data.index_copy_(0, self.recvs[j].index, self.buffers[j])
        self.arrived[j] = True


class _GradientReturn:
    """One layer's backward exchange, as tensor hooks. ``start`` (the table's gradient is complete)
    sends each received message's rows' gradients back to their owner and posts the receives for
    the gradients of the rows this worker sent; ``adder(b)`` adds bin ``b``'s arrivals to the bin's
    output gradient. The sends are waited for when the backward pass ends."""

    def __init__(self, comm: Communicator, recvs: list[Message], outgoing: list, tag_base: int):
        self.comm, self.recvs, self.outgoing, self.tag_base = comm, recvs, outgoing, tag_base
        self.sent: list = []
        self.arriving: dict[int, list] = {}

    def start(self, grad: torch.Tensor) -> None:
        self.comm.count_as("halo_backward")
        for m in self.recvs:
            rows = grad.index_select(0, m.index)
            self.sent.append((self.comm.isend(rows, m.peer, self.tag_base + m.tag), m.peer, rows))
        for b, messages in enumerate(self.outgoing):
            for peer, tag, positions in messages:
                buf = grad.new_empty((positions.numel(), grad.shape[1]))
                self.arriving.setdefault(b, []).append((self.comm.irecv(buf, peer, self.tag_base + tag), peer,
                                                        positions, buf))
        torch.autograd.Variable._execution_engine.queue_callback(self._finish)

    def adder(self, b: int):
        def hook(grad: torch.Tensor) -> torch.Tensor:
            for work, peer, positions, buf in self.arriving.pop(b, []):
                self.comm.wait(work, peer)
                grad = grad.index_add(0, positions, buf)
            return grad

        return hook

    def _finish(self) -> None:
        for work, peer, _rows in self.sent:
            self.comm.wait(work, peer)
        self.sent = []
