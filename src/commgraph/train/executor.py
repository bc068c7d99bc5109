"""How one worker runs a model's forward pass over its part: three exchange strategies.

- ``pipelined`` (G3): bins in priority order; each finished bin's boundary rows leave at once; the
  next layer runs whichever bin has all its inputs (eager), so interior bins overlap the transfers.
- ``barrier`` (NeuGraph-style): a layer computes all its rows, then exchanges, then the next layer.
- ``replicate`` (DGL-style): the L-hop in-neighbourhood is held locally from the start and computed
  redundantly; nothing is exchanged per layer.

All three compute exactly the single-graph model. The backward pass is autograd's; the halo op
sends gradients back to their owners.
"""

from __future__ import annotations

import numpy as np
import torch

from commgraph.nn import GNN, Block
from commgraph.partition.store import Part, PartitionSet
from commgraph.plan import plan_allgather
from commgraph.plan.model import CommPlan, Send
from commgraph.runtime import Communicator, Exchange, halo_exchange, streamed_halo
from commgraph.runtime.comm import TAG_SPAN
from commgraph.topology import load_topology
from commgraph.train import schedule

EXCHANGES = ("pipelined", "barrier", "replicate")


def _block(arrays: schedule.BlockArrays, degree: np.ndarray, device) -> Block:
    edge_index = torch.from_numpy(np.stack([arrays.edge_src, arrays.edge_dst]).astype(np.int64))
    return Block(int(arrays.src.shape[0]), int(arrays.dst.shape[0]), edge_index,
                 torch.from_numpy(degree[arrays.src].astype(np.float32))).to(device)


def _devices(size: int) -> list[str]:
    return [d.id for d in load_topology(f"localhost-cpu:{max(size, 1)}").workers][:size]


class _Tables:
    """A part's node data as tensors, with the halo's input features fetched once up front."""

    def __init__(self, part: Part, comm: Communicator, pset: PartitionSet, device):
        self.num_owned, self.num_halo = part.num_owned, part.num_halo
        self.x = torch.from_numpy(np.array(part.features, dtype=np.float32)).to(device)
        plan = plan_allgather("p2p", pset, load_topology(f"localhost-cpu:{pset.num_parts}"),
                              row_bytes=4 * self.x.shape[1])
        self.exchange = Exchange.from_plan(plan, part.index, _devices(pset.num_parts),
                                           np.asarray(part.owned), np.asarray(part.halo))
        comm.count_as("features")
        self.x_halo = comm.gather(self.exchange, self.x, tag_base=0)[: self.num_halo]


class BarrierExecutor:
    """Layer-wise exchange of every boundary row through an all-gather ``CommPlan``, no overlap."""

    name = "barrier"

    def __init__(self, part: Part, pset: PartitionSet, comm: Communicator, device):
        self.comm = comm
        self.tables = _Tables(part, comm, pset, device)
        n = part.num_owned + part.num_halo
        rows = np.repeat(np.arange(part.num_owned), np.diff(part.indptr))
        arrays = schedule.BlockArrays(np.arange(part.num_owned), np.arange(n), np.asarray(part.indices), rows)
        self.block = _block(arrays, np.asarray(part.degree), device)
        self.exchange = self.tables.exchange

    def forward(self, model: GNN) -> torch.Tensor:
        h, halo = model.encode(self.tables.x), model.encode(self.tables.x_halo)
        for index in range(model.num_layers):
            h = model.layer(index, torch.cat([h, halo]), self.block)
            if index < model.num_layers - 1:
                tags = ((2 * index + 1) * TAG_SPAN, (2 * index + 2) * TAG_SPAN)
                self.comm.count_as(f"halo_forward:{index + 1}")
                halo = halo_exchange(h, self.comm, self.exchange, tags)
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
        degree = np.diff(indptr)
        position = np.full(indptr.shape[0] - 1, -1, dtype=np.int64)
        position[nodes] = np.arange(nodes.shape[0])
        mark = np.full(nodes.shape[0], -1, dtype=np.int64)
        counts, sources = schedule.in_neighbours(indptr, indices, nodes[: sizes[-2]])
        local_indptr, local_indices = np.concatenate([[0], np.cumsum(counts)]), position[sources]
        self.blocks = []
        for index in range(layers):
            arrays = schedule.block_arrays(local_indptr, local_indices, np.arange(sizes[layers - 1 - index]), mark)
            # each hop set is exactly the previous one's in-neighbourhood, in table order
            assert np.array_equal(arrays.src, np.arange(sizes[layers - index]))
            self.blocks.append(_block(arrays, degree[nodes], device))
        self.num_owned = part.num_owned
        self.x = torch.from_numpy(pset.rows("features", nodes).astype(np.float32)).to(device)
        comm.count_as("features")

    def forward(self, model: GNN) -> torch.Tensor:
        h = model.encode(self.x)
        for index, block in enumerate(self.blocks):
            h = model.layer(index, h, block)
        return model.decode(h[: self.num_owned])


class PipelinedExecutor:
    """G3's bins, priorities and eager computation (see ``schedule``)."""

    name = "pipelined"

    def __init__(self, part: Part, pset: PartitionSet, comm: Communicator, device, bin_size: int):
        self.comm, self.device = comm, device
        self.tables = _Tables(part, comm, pset, device)
        n_owned, degree = part.num_owned, np.asarray(part.degree)
        indptr, indices = np.asarray(part.indptr), np.asarray(part.indices)
        order, boundary = schedule.priority_order(indptr, indices, n_owned, np.asarray(part.send_index))
        # the order inside a bin does not matter (a bin is computed as a whole): ascending rows
        # gather memory sequentially, and a bin of every row, with no halo, reads ``h`` as it is
        self.bin_rows = [np.sort(rows) for rows in schedule.bins(order, boundary, bin_size)]
        mark = np.full(n_owned + part.num_halo, -1, dtype=np.int64)
        arrays = [schedule.block_arrays(indptr, indices, rows, mark) for rows in self.bin_rows]
        self.blocks = [_block(a, degree, device) for a in arrays]
        self.src_owned = [None if np.array_equal(a.src, np.arange(n_owned)) else
                          torch.from_numpy(a.src[a.src < n_owned]).to(device) for a in arrays]
        self.src_halo = [torch.from_numpy(a.src[a.src >= n_owned] - n_owned).to(device) for a in arrays]
        self.exchange, self.outgoing, self.needs = self._messages(part, pset, arrays)
        self.rows_t = [torch.from_numpy(r).to(device) for r in self.bin_rows]

    def _messages(self, part: Part, pset: PartitionSet, arrays):
        """Which rows of which bin go to which peer, and which received message each bin waits for.
        Peers learn each other's bins once, at setup."""
        n_owned, me = part.num_owned, part.index
        bin_of = np.empty(n_owned, dtype=np.int64)
        at_in_bin = np.empty(n_owned, dtype=np.int64)
        for b, rows in enumerate(self.bin_rows):
            bin_of[rows], at_in_bin[rows] = b, np.arange(rows.shape[0])
        mine = {}
        for q in range(pset.num_parts):
            rows = np.asarray(part.send_to(q))
            if rows.size:
                by_bin = np.argsort(bin_of[rows], kind="stable")
                rows = rows[by_bin]
                cuts = np.flatnonzero(np.diff(bin_of[rows])) + 1
                mine[q] = [(int(bin_of[r[0]]), np.asarray(part.owned)[r]) for r in np.split(rows, cuts)]
        everyone = self.comm.all_gather_object(mine) if self.comm.world is not None else [mine]
        devices = _devices(pset.num_parts)
        plan = CommPlan("allgather", "g3-bins", f"localhost-cpu:{pset.num_parts}")
        plan.stages.append([Send(devices[src], devices[q], float(ids.size), ids, priority=b)
                            for src, theirs in enumerate(everyone) for q, messages in sorted(theirs.items())
                            for b, ids in messages if me in (src, q)])
        exchange = Exchange.from_plan(plan, me, devices, np.asarray(part.owned), np.asarray(part.halo))
        sends, recvs = exchange.stages[0] if exchange.stages else ([], [])
        outgoing = [[] for _ in self.bin_rows]  # per bin: (peer, tag, positions in the bin's output)
        for m in sends:
            rows = m.index.numpy()
            outgoing[m.tag].append((m.peer, m.tag, torch.from_numpy(at_in_bin[rows]).to(self.device)))
        message_of_slot = np.full(part.num_halo, -1, dtype=np.int64)
        for j, m in enumerate(recvs):
            message_of_slot[m.index.numpy() - n_owned] = j
        needs = [np.unique(message_of_slot[a.src[a.src >= n_owned] - n_owned]).tolist() for a in arrays]
        return exchange, outgoing, needs

    def forward(self, model: GNN) -> torch.Tensor:
        recvs = self.exchange.stages[0][1] if self.exchange.stages else []
        h, halo = model.encode(self.tables.x), model.encode(self.tables.x_halo)
        incoming = None  # layer 0's halo is the input features, already local
        sent = []
        for index in range(model.num_layers):
            last = index == model.num_layers - 1
            tag_base = (2 * index + 1) * TAG_SPAN
            if not last:  # receives for the next layer's halo, posted before any computing
                following = _Incoming(self.comm, recvs, tag_base, model.widths[index + 1], self.tables.num_owned,
                                      h.device)
            outs, done = [], []
            pending = list(range(len(self.blocks)))
            while pending:
                b = next((b for b in pending if incoming is None or incoming.ready(self.needs[b])), None)
                if b is None:  # nothing ready: block on a message the first pending bin needs
                    incoming.wait_for(self.needs[pending[0]])
                    continue
                pending.remove(b)
                x_src = h if self.src_owned[b] is None else h.index_select(0, self.src_owned[b])
                if self.src_halo[b].numel():
                    x_src = torch.cat([x_src, halo.index_select(0, self.src_halo[b])])
                out = model.layer(index, x_src, self.blocks[b])
                if not last:  # this bin's boundary rows leave now
                    self.comm.count_as(f"halo_forward:{index + 1}")
                    rows = out.detach()
                    for peer, tag, positions in self.outgoing[b]:
                        payload = rows.index_select(0, positions)
                        sent.append((self.comm.isend(payload, peer, tag_base + tag), peer, payload))
                outs.append(out)
                done.append(self.rows_t[b])
                if incoming is not None:
                    incoming.poll()
            if len(outs) == 1:  # one bin of all rows, in order
                h = outs[0]
            else:
                order = torch.cat(done)
                inverse = torch.empty_like(order)
                inverse[order] = torch.arange(order.numel(), device=order.device)
                h = torch.cat(outs).index_select(0, inverse)
            if not last:
                halo = following.target = streamed_halo(h, self.comm, self.exchange, (2 * index + 2) * TAG_SPAN)
                incoming = following
        for work, peer, _payload in sent:
            self.comm.wait(work, peer)
        return model.decode(h)


class _Incoming:
    """The receives of one layer's halo, landing (copied into the halo table) as they complete."""

    def __init__(self, comm: Communicator, recvs, tag_base: int, width: int, num_owned: int, device):
        self.comm, self.recvs, self.num_owned = comm, recvs, num_owned
        self.target: torch.Tensor | None = None  # the halo table, set once the layer's output exists
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
        with torch.no_grad():
            self.target.index_copy_(0, self.recvs[j].index.to(self.target.device) - self.num_owned, self.buffers[j])
        self.arrived[j] = True
