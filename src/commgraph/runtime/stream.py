"""Executing an ``Exchange``, forward and backward, layer-wise or streamed bin by bin (G3).

Forward (``HaloStream``): receives are posted up front. The caller reports each computed bin of
owned rows (``bin_done``); a send leaves as soon as every bin its rows come from is done and every
receive it relays has landed. Received rows land in the halo rows of the next layer's table once
the caller attaches it (``attach``); until then they wait in their buffers. Layer-wise execution is
the same with one bin holding every owned row.

Backward (``GradientReturn``): when the table's gradient is complete (``start``) each received
message's rows' gradients go back to the rank that sent them, in reverse plan order, a relay first
adding what came back from the ranks it forwarded to; the gradients of the rows this rank sent come
back and are added bin by bin (``add_to_bin``), just before autograd runs that bin's backward.

In ``ordered`` mode a send also waits for every earlier message to the same peer, and receives are
posted in plan order, so both sides issue a pair's messages in one order (NCCL's matching rule).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch

from commgraph.plan.exchange import Exchange, Message, MessageId
from commgraph.runtime.comm import Communicator


@dataclass
class _Piece:
    """Rows ``rows`` of a message (its positions in the plan's row order) read from ``source``'s
    rows ``at``: an owned bin's output (``kind`` "bin") or a receive buffer ("recv")."""

    kind: str
    source: int
    rows: torch.Tensor
    at: torch.Tensor


class _Sources:
    """Where a send's rows are read from: owned rows from the bins' outputs, relayed rows from the
    receive buffers; ``perm`` restores the plan's row order."""

    def __init__(
        self, message: Message, exchange: Exchange, edges: np.ndarray, recv_rows: dict[str, np.ndarray], device
    ):
        index, n = message.index, exchange.num_owned
        owned = np.flatnonzero(index < n)
        relayed = np.flatnonzero(index >= n)
        bins = np.searchsorted(edges, index[owned], side="right") - 1
        received = recv_rows["j"][index[relayed] - n]
        pieces = [("bin", int(b), owned[bins == b], index[owned[bins == b]] - edges[b]) for b in np.unique(bins)]
        pieces += [
            ("recv", int(j), relayed[received == j], recv_rows["k"][index[relayed[received == j]] - n])
            for j in np.unique(received)
        ]
        self.pieces = [
            _Piece(kind, source, torch.from_numpy(rows).to(device), torch.from_numpy(at).to(device))
            for kind, source, rows, at in pieces
        ]
        self.bins = [p.source for p in self.pieces if p.kind == "bin"]
        order = np.concatenate([rows for _, _, rows, _ in pieces])
        self.perm = (
            None
            if np.array_equal(order, np.arange(index.size))
            else torch.from_numpy(np.argsort(order, kind="stable")).to(device)
        )


def _span(index: np.ndarray, end: int) -> int | None:
    """The first exchange row of a receive whose rows ``index`` are consecutive rows below ``end``
    (halo rows, none relay-only) in ascending order; None otherwise."""
    if index.size == 0 or index[-1] >= end or index[-1] - index[0] != index.size - 1:
        return None
    return int(index[0]) if np.array_equal(index, np.arange(index[0], index[0] + index.size)) else None


def _recv_rows(exchange: Exchange) -> dict[str, np.ndarray]:
    """For each non-owned table row: the receive that delivered it and its row in that buffer."""
    j_of = np.full(exchange.num_halo + exchange.num_extra, -1, dtype=np.int64)
    k_of = np.zeros_like(j_of)
    for j, m in enumerate(exchange.recvs):
        j_of[m.index - exchange.num_owned] = j
        k_of[m.index - exchange.num_owned] = np.arange(m.index.size)
    return {"j": j_of, "k": k_of}


class ExchangeRunner:
    """An exchange ready to run on a device with bins ``edges`` (bin ``b`` is owned rows
    ``[edges[b], edges[b + 1])``); the per-message index work is done once, here."""

    def __init__(self, comm: Communicator, exchange: Exchange, edges: np.ndarray, device, ordering: str):
        self.comm, self.exchange, self.edges, self.device, self.ordering = comm, exchange, edges, device, ordering
        recv_rows = _recv_rows(exchange)
        self.sources = [_Sources(m, exchange, edges, recv_rows, device) for m in exchange.sends]
        n = exchange.num_owned
        self.land = []  # per receive: (buffer rows, table rows) of the rows that are halo, not relay-only
        for m in exchange.recvs:
            keep = m.index < n + exchange.num_halo
            self.land.append(
                (
                    None if keep.all() else torch.from_numpy(np.flatnonzero(keep)).to(device),
                    torch.from_numpy(m.index[keep]).to(device),
                )
            )
        self.spans = [_span(m.index, n + exchange.num_halo) for m in exchange.recvs]  # receivable in place
        self.recv_index = [torch.from_numpy(m.index - n).to(device) for m in exchange.recvs]  # into halo+extra
        self.dependents: dict[int, list[int]] = defaultdict(list)  # receive -> sends relaying its rows
        self.sends_of_bin: dict[int, list[int]] = defaultdict(list)  # bin -> sends reading its rows
        self.send_at: dict[tuple[int, int], int] = {}  # (peer, order) -> send
        for i, m in enumerate(exchange.sends):
            for j in m.relays:
                self.dependents[j].append(i)
            for b in self.sources[i].bins:
                self.sends_of_bin[b].append(i)
            self.send_at[(m.peer, m.order)] = i
        self.unmet = np.array(
            [len(self.sources[i].bins) + len(m.relays) for i, m in enumerate(exchange.sends)], dtype=np.int64
        )  # what each send waits for before it may leave
        stages = np.array([m.stage for m in exchange.recvs], dtype=np.int64)  # nondecreasing: plan order
        self.stage_start = np.searchsorted(stages, stages, side="left")  # receives before j's stage
        # backward: each send's returning gradient, its owned rows added bin by bin, its relayed rows at once
        self.back_owned: dict[int, list[tuple[int, _Piece]]] = defaultdict(list)
        self.back_relayed: list[tuple[torch.Tensor, torch.Tensor] | None] = []
        for i, m in enumerate(exchange.sends):
            for piece in self.sources[i].pieces:
                if piece.kind == "bin":
                    self.back_owned[piece.source].append((i, piece))
            relayed = np.flatnonzero(m.index >= n)
            self.back_relayed.append(
                None
                if relayed.size == 0
                else (torch.from_numpy(relayed).to(device), torch.from_numpy(m.index[relayed] - n).to(device))
            )

    @property
    def num_bins(self) -> int:
        return len(self.edges) - 1

    def forward(
        self,
        layer: int,
        width: int,
        dtype=torch.float32,
        columns=None,
        label: str | None = None,
        into: tuple[torch.Tensor, int] | None = None,
        serial: bool = False,
    ) -> HaloStream:
        return HaloStream(self, layer, width, dtype, columns, label, into, serial)

    def tag(self, layer: int, direction: str, m: Message) -> int:
        return MessageId(layer, direction, m.bin).tag(m.order, self.ordering)


class HaloStream:
    """One forward execution of the exchange for ``layer``. Received rows are ``width`` wide.
    ``columns[peer]``, where given, are the columns of each row sent to ``peer`` (a mini-batch's
    remote rows cut to the columns their reader asked for); the others send whole rows. The bytes
    sent count as ``label`` (default: ``features`` for layer 0, else ``halo_forward:<layer>``).

    ``into`` (a table that exists before the exchange starts, and the exchange row of its first
    row) is attached at once, and a receive whose rows are consecutive halo rows of it is received
    straight into them: no receive buffer beside the table. ``serial`` (tagged ordering only)
    waits for each send to leave before the next one's payload is built, so a layer-wise fetch
    holds one message's payload at a time instead of every peer's (every receive is posted when
    the stream starts, so no send waits on a receive its peer has not posted)."""

    def __init__(
        self,
        runner: ExchangeRunner,
        layer: int,
        width: int,
        dtype,
        columns=None,
        label: str | None = None,
        into: tuple[torch.Tensor, int] | None = None,
        serial: bool = False,
    ):
        self.runner, self.layer, self.width, self.dtype = runner, layer, width, dtype
        self.columns = columns
        self.serial = serial and runner.ordering == "tagged"
        comm, exchange = runner.comm, runner.exchange
        self.label = label or ("features" if layer == 0 else f"halo_forward:{layer}")
        comm.bytes[self.label] += exchange.staged_rows * width * torch.tensor([], dtype=dtype).element_size()
        self.target, self.shift = into if into is not None else (None, 0)  # shift: exchange row of target row 0
        self.landed = [self.target is not None and span is not None for span in runner.spans]
        self.buffers = [self._buffer(j, m) for j, m in enumerate(exchange.recvs)]
        self.works = [
            comm.irecv(buf, m.peer, runner.tag(layer, "forward", m)) for buf, m in zip(self.buffers, exchange.recvs)
        ]
        self.arrived = [False] * len(exchange.recvs)
        self.outs: list[torch.Tensor | None] = [None] * runner.num_bins
        self.unmet = runner.unmet.copy()
        self.next_to: dict[int, int] = defaultdict(int)  # ordered mode: next order to issue, per peer
        self.sent: list[tuple] = []

    def _buffer(self, j: int, m: Message) -> torch.Tensor:
        """Receive ``j``'s buffer: its rows of the target when it lands in place, else its own."""
        if self.landed[j]:
            start = self.runner.spans[j] - self.shift
            return self.target.data[start : start + m.index.size]
        return torch.empty((m.index.size, self.width), dtype=self.dtype, device=self.runner.device)

    # -- the caller's side ---------------------------------------------------------------------

    def bin_done(self, b: int, rows: torch.Tensor) -> None:
        """Owned rows ``[edges[b], edges[b + 1])`` are computed; sends that waited for them leave."""
        self.outs[b] = rows.detach()
        self._met(self.runner.sends_of_bin.get(b, ()))

    def ready(self, needs: list[int]) -> bool:
        return all(self.arrived[j] for j in needs)

    def wait_for(self, needs: list[int]) -> None:
        """Block until one more of ``needs`` has arrived. Receives of earlier stages are taken in
        first: what this rank relays must leave before it blocks on what others relay."""
        j = next(j for j in needs if not self.arrived[j])
        for k in range(int(self.runner.stage_start[j])):
            if not self.arrived[k]:
                self._arrive(k)
        self._arrive(j)

    def poll(self) -> None:
        """Take in every receive that has completed, without blocking."""
        for j, work in enumerate(self.works):
            if not self.arrived[j] and work.is_completed():
                self._arrive(j)

    def attach(self, table: torch.Tensor) -> None:
        """The next layer's table exists (owned rows, then halo rows): land what has arrived and
        everything that arrives from now on. Rows land through ``.data``: autograd must not see the
        fill as a change to a tensor that bins already computed have read."""
        self.target = table
        for j in range(len(self.works)):
            if self.arrived[j]:
                self._land(j)

    def finish(self) -> None:
        """Wait for every receive and issue every send."""
        for j in range(len(self.works)):  # in plan order, so in stage order
            if not self.arrived[j]:
                self._arrive(j)

    def close(self) -> None:
        """Wait until this rank's sends have left (their payloads may then be freed)."""
        for work, peer, m, _payload in self.sent:
            self.runner.comm.wait(work, peer, MessageId(self.layer, "forward", m.bin))
        self.sent = []

    def backward(self) -> GradientReturn:
        return GradientReturn(self.runner, self.layer)

    # -- internals -----------------------------------------------------------------------------

    def _arrive(self, j: int) -> None:
        m = self.runner.exchange.recvs[j]
        self.runner.comm.wait(self.works[j], m.peer, MessageId(self.layer, "forward", m.bin))
        self.arrived[j] = True
        if self.target is not None:
            self._land(j)
        self._met(self.runner.dependents.get(j, ()))

    def _land(self, j: int) -> None:
        if self.landed[j]:
            return
        rows, at = self.runner.land[j]
        buf = self.buffers[j] if rows is None else self.buffers[j].index_select(0, rows)
        self.target.data.index_copy_(0, at - self.shift if self.shift else at, buf)
        self.landed[j] = True

    def _met(self, sends) -> None:
        """One more thing each of ``sends`` waited for is here."""
        for i in sends:
            self.unmet[i] -= 1
            if self.unmet[i] == 0:
                self._ready(i)

    def _ready(self, i: int) -> None:
        """Send ``i`` may leave: at once when tagged; in ordered mode, with every send to the same
        peer that it unblocks, in plan order."""
        runner = self.runner
        if runner.ordering == "tagged":
            self._send(i, runner.exchange.sends[i])
            return
        peer = runner.exchange.sends[i].peer
        while (at := runner.send_at.get((peer, self.next_to[peer]))) is not None and self.unmet[at] == 0:
            self._send(at, runner.exchange.sends[at])

    def _send(self, i: int, m: Message) -> None:
        source = self.runner.sources[i]
        parts = [
            (self.outs[p.source] if p.kind == "bin" else self.buffers[p.source]).index_select(0, p.at)
            for p in source.pieces
        ]
        payload = parts[0] if len(parts) == 1 else torch.cat(parts)
        if source.perm is not None:
            payload = payload.index_select(0, source.perm)
        if self.columns is not None and self.columns[m.peer] is not None:
            payload = payload.index_select(1, self.columns[m.peer])
        if m.staged and payload.device.type != "cpu":  # through host memory, as the plan stages it
            payload = payload.cpu().to(payload.device)
        comm = self.runner.comm
        comm.count_as(self.label)
        work = comm.isend(payload, m.peer, self.runner.tag(self.layer, "forward", m))
        if self.serial:
            comm.wait(work, m.peer, MessageId(self.layer, "forward", m.bin))
        else:
            self.sent.append((work, m.peer, m, payload))
        self.next_to[m.peer] = m.order + 1


class GradientReturn:
    """The backward exchange of ``layer``: halo gradients back to their senders, and the
    gradients of this rank's sent rows in, added bin by bin. The bytes sent count as ``label``."""

    def __init__(self, runner: ExchangeRunner, layer: int, label: str = "halo_backward"):
        self.runner, self.layer, self.label = runner, layer, label
        self.buffers: list[torch.Tensor] = []
        self.works: list = []
        self.arrived: list[bool] = []
        self.sent: list[tuple] = []

    def start(self, grad_halo: torch.Tensor) -> None:
        """The gradient of the table's halo rows is complete: post the receives for the rows this
        rank sent, and send back the gradient of every row it received."""
        runner, comm, layer = self.runner, self.runner.comm, self.layer
        exchange = runner.exchange
        sends = exchange.sends
        self.buffers = [grad_halo.new_empty((m.index.size, grad_halo.shape[1])) for m in sends]
        self.works = [None] * len(sends)
        for i in reversed(range(len(sends))):  # the peers send them back in reverse plan order
            self.works[i] = comm.irecv(self.buffers[i], sends[i].peer, runner.tag(layer, "backward", sends[i]))
        self.arrived = [False] * len(sends)
        rows = grad_halo
        if exchange.num_extra or any(runner.dependents.values()):
            rows = grad_halo.new_zeros((exchange.num_halo + exchange.num_extra, grad_halo.shape[1]))
            rows[: exchange.num_halo] = grad_halo
        comm.count_as(self.label)
        for j in reversed(range(len(exchange.recvs))):
            for i in runner.dependents.get(j, ()):  # what the ranks this one forwarded to sent back
                if not self.arrived[i]:
                    self._arrive(i)
                    at, into = runner.back_relayed[i]
                    rows.index_add_(0, into, self.buffers[i].index_select(0, at))
            m = exchange.recvs[j]
            payload = rows.index_select(0, runner.recv_index[j])
            self.sent.append((comm.isend(payload, m.peer, runner.tag(layer, "backward", m)), m.peer, m, payload))

    def add_to_bin(self, b: int, grad: torch.Tensor) -> torch.Tensor:
        """Bin ``b``'s output gradient plus what the readers of its rows sent back."""
        for i, piece in self.runner.back_owned.get(b, ()):
            if not self.arrived[i]:
                self._arrive(i)
            whole = piece.rows.numel() == self.buffers[i].shape[0]
            grad = grad.index_add(
                0, piece.at, self.buffers[i] if whole else self.buffers[i].index_select(0, piece.rows)
            )
        return grad

    def finish(self) -> None:
        """Wait for every backward message, in and out."""
        for i in range(len(self.works)):
            if not self.arrived[i]:
                self._arrive(i)
        for work, peer, m, _payload in self.sent:
            self.runner.comm.wait(work, peer, MessageId(self.layer, "backward", m.bin))
        self.sent = []

    def _arrive(self, i: int) -> None:
        m = self.runner.exchange.sends[i]
        self.runner.comm.wait(self.works[i], m.peer, MessageId(self.layer, "backward", m.bin))
        self.arrived[i] = True
