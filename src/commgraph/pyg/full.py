r"""Full-graph training of any PyG model across ranks: :class:`FullGraph`, what
:func:`~commgraph.pyg.full_graph` makes of a model.

G3 (Wan et al., thesis ch. 4) and DGCL (Cai et al., `"DGCL: An Efficient Communication Library for
Distributed GNN Training" <https://doi.org/10.1145/3447786.3456233>`_, EuroSys 2021) split the
nodes across workers; before each layer a worker needs the current rows of its halo, the remote
in-neighbours of the nodes it owns. DGCL offers that as ``graphAllgather``, a primitive any GNN
calls between layers. Here it is called for the user: a forward pre-hook on every
``MessagePassing`` submodule replaces the halo rows of the layer's input ``x`` with their owners'
rows, through the job's planned all-gather (:meth:`commgraph.runtime.job.Job.wire`, chosen as
``commgraph train`` chooses it), and the backward pass returns the halo rows' gradients to their
owners. With owned rows :math:`X_O` and the exchange :math:`P` of the plan,

.. math::
    X \leftarrow \begin{bmatrix} X_O \\ P(X_O^{(1)}, \ldots, X_O^{(R)}) \end{bmatrix},
    \qquad \frac{\partial L}{\partial X_O} \mathrel{+}= P^\top \frac{\partial L}{\partial X_H}.

GCN's symmetric normalisation needs every node's whole in-degree; a ``GCNConv`` that normalises
gets its edge weights computed here with the halo nodes' degrees from their owners.

Parameter gradients are averaged over the ranks after each backward, as
``DistributedDataParallel`` averages them (rank 0's parameters are broadcast first, as DDP does),
so a loss built with :func:`~commgraph.pyg.global_mean` trains exactly as the one-process script.
"""

from __future__ import annotations

import inspect
import typing
import weakref

import numpy as np
import torch

from commgraph.errors import BridgeError
from commgraph.pyg.data import PartHandle
from commgraph.pyg.world import session
from commgraph.runtime.traffic import Traffic, global_traffic


def message_passing_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The outermost ``MessagePassing`` submodules of ``model`` by name, in registration order."""
    from torch_geometric.nn.conv import MessagePassing

    found = {}
    for name, module in model.named_modules():
        if any(name.startswith(prefix + ".") for prefix in found):
            continue
        if isinstance(module, MessagePassing):
            found[name] = module
    return found


class FullGraph(torch.nn.Module):
    """``module`` run on this rank's part with its halo rows refreshed before every
    ``MessagePassing`` (see the module description). Made by :func:`~commgraph.pyg.full_graph`.

    Attributes:
        module: the user's model.
        job: the :class:`~commgraph.runtime.job.Job` of the part (topology, plan, communicator).
    """

    def __init__(
        self,
        module: torch.nn.Module,
        handle: PartHandle,
        data,
        *,
        plan: str = "auto",
        topology: str = "detect",
        allreduce: str = "native",
        decoder: str | None = None,
    ):
        super().__init__()
        from commgraph.runtime.job import Job
        from commgraph.runtime.options import JobOptions

        layers = message_passing_layers(module)
        if not layers:
            raise BridgeError(
                f"{type(module).__name__} has no MessagePassing layer (torch_geometric.nn.conv.MessagePassing): "
                "cg.full_graph refreshes the halo before each one; a model without one needs no graph exchange "
                "(wrap it in torch.nn.parallel.DistributedDataParallel instead)"
            )
        if decoder is not None and not callable(getattr(module, decoder, None)):
            raise BridgeError(
                f"{type(module).__name__} has no method {decoder!r} (decoder={decoder!r}): name the model's "
                "method that scores node pairs, called as decode(z, edge_label_index)"
            )
        self.module = module
        self._decoder = decoder
        s = session()
        self._world = s.world
        self._handle = handle
        self._data = weakref.ref(data)
        self.job = Job(s.world, handle.pset, JobOptions(topology=topology, plan=plan))
        self._runners: dict[int, object] = {}
        self.choices: dict[int, object] = {}  # row bytes -> the plan chosen for rows of that width
        self._swaps = Swaps()
        self._adjacencies: dict[tuple, torch.Tensor] = {}
        self._layers = layers
        self._layer_of = {id(layer): i for i, layer in enumerate(layers.values())}
        for layer in layers.values():
            layer.register_forward_pre_hook(self._before_layer, with_kwargs=True)
            layer.register_forward_hook(self._after_layer)
        self._sync = None
        if s.world.size > 1:
            self._broadcast_parameters()
            params = [p for p in module.parameters() if p.requires_grad]
            self._sync = self.job.gradient_sync(params, self.job.allreduce(allreduce, _nbytes(params)))
            self._queued = False
            for param in params:
                param.register_post_accumulate_grad_hook(self._gradient_arrived)

    # -- forward -----------------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        try:
            return self._part_rows(self.module(*args, **kwargs))
        finally:  # a layer that raised leaves no GCN normalisation off
            self._swaps.undo()

    def _part_rows(self, output):
        """A model output of the owned rows only, with zero rows in the halo's place: the part's
        rows, which the part's masks index."""
        owned, halo = self._handle.num_owned, self._handle.part.num_halo
        if not (isinstance(output, torch.Tensor) and output.dim() >= 1 and output.shape[0] == owned and halo):
            return output
        return torch.cat([output, output.new_zeros((halo, *output.shape[1:]))])

    def __getattr__(self, name: str):
        """The model's own attributes and methods (``model.encode``, ``model.decode``) through the
        wrapper; its layers' hooks run whichever method calls them. The ``decoder`` method scores
        every pair on every rank (:func:`~commgraph.pyg.endpoints.pair_scores`)."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "module":
                raise
            value = getattr(self.module, name)
            if name != self.__dict__.get("_decoder"):
                return value
            from commgraph.pyg.endpoints import pair_scores

            part = self._data()
            return lambda z, edge_label_index, *args, **kwargs: pair_scores(
                value, z, edge_label_index, part, *args, **kwargs
            )

    @property
    def bytes(self) -> dict[str, int]:
        """Bytes this rank sent, by what they carried (``halo_forward:<layer>``, ``halo_backward``,
        ``allreduce``, ...), a plain dictionary by label (:attr:`traffic` as named counters)."""
        return dict(self.job.comm.bytes)

    @property
    def traffic(self) -> Traffic:
        """Bytes this rank sent as named counters (:class:`~commgraph.runtime.traffic.Traffic`:
        ``halo_forward`` by layer, ``halo_backward``, ``allreduce``, ...), which add and subtract."""
        return self.job.comm.traffic

    def global_traffic(self) -> Traffic:
        """:attr:`traffic` summed over every rank in one all-reduce (a collective: every rank calls
        it), ``halo_forward`` as long as the longest rank's."""
        traffic, comm = self.traffic, self.job.comm
        layers = max(comm.all_gather_object(len(traffic.halo_forward))) if self._world.size > 1 else None
        return global_traffic(comm, traffic, layers or len(traffic.halo_forward))

    @property
    def modeled_seconds(self) -> dict[int, float]:
        """The modelled time of one exchange of rows of each width (in bytes) the model sent."""
        return {row_bytes: choice.modeled_seconds for row_bytes, choice in self.choices.items()}

    def _runner(self, row_bytes: int):
        """The runner of the plan for rows of ``row_bytes`` (chosen on first use)."""
        if row_bytes not in self._runners:
            wiring = self.job.wire(row_bytes)
            self.choices[row_bytes] = wiring.choice
            part = self._handle.part
            exchange = self.job.exchange(wiring.plan, np.asarray(part.owned), np.asarray(part.halo))
            self._runners[row_bytes] = self.job.layerwise(exchange)
        return self._runners[row_bytes]

    def refresh(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        """The part's rows of ``x``: its owned rows, then the halo rows from their owners,
        differentiable. ``x`` holds the owned rows only, or the part's rows (its halo rows are
        not read)."""
        from commgraph.runtime.halo import halo_table

        owned = self._handle.num_owned
        rows = owned + self._handle.part.num_halo
        if x.dim() != 2 or x.shape[0] not in (owned, rows):
            raise BridgeError(
                f"a MessagePassing layer got x of shape {list(x.shape)}, but this rank's part has {rows} rows "
                f"({owned} owned, then {rows - owned} halo): give each layer the part's rows, as the Data "
                "cg.partition returned has them, or the owned rows a layer returned"
            )
        if self._world.size == 1:
            return x
        return halo_table(x, self._runner(x.shape[1] * x.element_size()), owned, layer)

    def _before_layer(self, layer: torch.nn.Module, args: tuple, kwargs: dict):
        index = self._layer_of[id(layer)]
        args, kwargs = list(args), dict(kwargs)
        x = args[0] if args else kwargs.get("x")
        data = self._data()
        rows = x
        if isinstance(x, torch.Tensor) and not (data is not None and x is getattr(data, "x", None)):
            x = self.refresh(x, index)  # the part's own x has its halo rows from the global table already
        pair = isinstance(x, torch.Tensor) and _takes_pair(layer)
        if pair:  # only the owned rows are computed, and returned alone
            owned = self._handle.num_owned
            x = (x, rows if rows.shape[0] == owned else rows[:owned])
        if args:
            args[0] = x
        else:
            kwargs["x"] = x
        if pair and _fuses(layer) and self._plain_structure(args, kwargs, data):
            # the part's own CSR (rows: owned destinations): one sparse product, no per-edge rows
            adjacency = self._adjacency(x[0])
            if len(args) > 1:
                args[1] = adjacency
            else:
                kwargs["edge_index"] = adjacency
        if _normalising_gcn(layer):
            self._gcn_weights(layer, args, kwargs, index)
        if pair and _narrowing_sage(layer):
            # mean_j(x_j) W = mean_j(x_j W): the narrower rows are aggregated (as DGL's SAGEConv does)
            x = (torch.nn.functional.linear(x[0], layer.lin_l.weight), x[1])
            if args:
                args[0] = x
            else:
                kwargs["x"] = x
            self._swaps.set(layer, "lin_l", Bias(layer.lin_l.bias))
        return tuple(args), kwargs

    @staticmethod
    def _plain_structure(args: list, kwargs: dict, data) -> bool:
        """Whether the layer was called on the part's own ``edge_index`` and nothing else per edge."""
        edge_index = args[1] if len(args) > 1 else kwargs.get("edge_index")
        rest = [*args[2:], *(v for k, v in kwargs.items() if k not in ("x", "edge_index"))]
        return data is not None and edge_index is getattr(data, "edge_index", None) and all(v is None for v in rest)

    def _adjacency(self, x: torch.Tensor) -> torch.Tensor:
        """The part's in-edges as a ``[num_owned, num_owned + num_halo]`` sparse CSR tensor of ones
        (the transposed adjacency PyG's fused layers take), its indices as the built-in layers'
        blocks hold them (:meth:`~commgraph.nn.Block.from_csr`: sorted in each row, int32 where
        they fit, which the backward's transpose sorts several times faster than int64), made
        once per dtype and device."""
        from commgraph.nn.block import Block

        key = (x.dtype, x.device)
        if key not in self._adjacencies:
            part = self._handle.part
            size = (part.num_owned, part.num_owned + part.num_halo)
            crow, col = Block.from_csr(size[1], np.asarray(part.indptr), np.asarray(part.indices), None).csr
            ones = torch.ones(col.shape[0], dtype=x.dtype)
            self._adjacencies[key] = torch.sparse_csr_tensor(crow, col, ones, size=size).to(x.device)
        return self._adjacencies[key]

    def _after_layer(self, layer: torch.nn.Module, args, output):
        self._swaps.undo()

    def _gcn_weights(self, layer, args: list, kwargs: dict, index: int) -> None:
        """GCN's normalised edge weights with every node's whole in-degree (the halo nodes' from
        their owners), passed to ``layer`` with its own normalisation off for this call."""
        from torch_geometric.utils import add_remaining_self_loops, scatter

        x = args[0] if args else kwargs["x"]
        edge_index = args[1] if len(args) > 1 else kwargs["edge_index"]
        weight = args[2] if len(args) > 2 else kwargs.get("edge_weight")
        num_nodes = x.shape[0]
        if layer.add_self_loops:
            edge_index, weight = add_remaining_self_loops(edge_index, weight, 2.0 if layer.improved else 1.0, num_nodes)
        if weight is None:
            weight = torch.ones(edge_index.shape[1], dtype=x.dtype, device=x.device)
        row, col = edge_index[0], edge_index[1]
        degree = scatter(weight, col, 0, dim_size=num_nodes, reduce="sum")
        if self._world.size > 1:
            with torch.no_grad():
                degree = self.refresh(degree.unsqueeze(1), len(self._layer_of) + index).squeeze(1)
        inverse = degree.pow(-0.5)
        inverse = inverse.masked_fill(inverse == float("inf"), 0)
        normalised = inverse[row] * weight * inverse[col]
        for position, name, value in ((1, "edge_index", edge_index), (2, "edge_weight", normalised)):
            if len(args) > position:
                args[position] = value
            else:
                kwargs[name] = value
        self._swaps.set(layer, "normalize", False)

    # -- gradients ---------------------------------------------------------------------------------

    def _broadcast_parameters(self) -> None:
        with torch.no_grad():
            for tensor in [*self.module.parameters(), *self.module.buffers()]:
                self.job.comm.broadcast_(tensor.data)

    def _gradient_arrived(self, param: torch.Tensor) -> None:
        if not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._average)

    def _average(self) -> None:
        """At the end of a backward: the summed gradients, divided by the number of ranks."""
        self._queued = False
        self._sync.finish()
        for bucket in self._sync.buckets:
            for param in bucket:
                if param.grad is not None:
                    param.grad.div_(self._world.size)


def _takes_pair(layer: torch.nn.Module) -> bool:
    """Whether ``layer``'s ``forward`` takes ``x`` as a (source rows, destination rows) pair, as
    PyG's bipartite convs declare it (``Union[Tensor, OptPairTensor]``)."""
    parameter = inspect.signature(type(layer).forward).parameters.get("x")
    if parameter is None:
        return False
    annotation = parameter.annotation
    if isinstance(annotation, str):
        return "Tuple" in annotation or "PairTensor" in annotation
    return any(typing.get_origin(arg) is tuple for arg in typing.get_args(annotation))


def _fuses(layer: torch.nn.Module) -> bool:
    """Whether ``layer`` aggregates a sparse adjacency in one product (it overrides
    ``message_and_aggregate``, as ``SAGEConv`` and ``GINConv`` do)."""
    from torch_geometric.nn.conv import MessagePassing

    return type(layer).message_and_aggregate is not MessagePassing.message_and_aggregate


def _narrowing_sage(layer: torch.nn.Module) -> bool:
    """Whether ``layer`` is PyG's ``SAGEConv`` with a mean over plain neighbour rows (no projection)
    and an output narrower than its input: its neighbour term may be transformed before the mean."""
    from torch_geometric.nn import SAGEConv

    if not isinstance(layer, SAGEConv) or layer.aggr != "mean" or layer.project:
        return False
    weight = layer.lin_l.weight
    return not isinstance(weight, torch.nn.parameter.UninitializedParameter) and weight.shape[0] < weight.shape[1]


class Swaps:
    """Attributes of layers set for one call of a model (:meth:`set`) and set back after it (:meth:`undo`)."""

    def __init__(self):
        self._undo: list[tuple[torch.nn.Module, str, object]] = []  # (layer, attribute, value) to set back

    def set(self, layer: torch.nn.Module, name: str, value) -> None:
        """Set ``layer.name`` to ``value`` until :meth:`undo`."""
        self._undo.append((layer, name, getattr(layer, name)))
        setattr(layer, name, value)

    def undo(self) -> None:
        while self._undo:
            layer, name, value = self._undo.pop()
            setattr(layer, name, value)


class Bias(torch.nn.Module):
    """``x + bias``: a ``SAGEConv``'s neighbour transform once its weight was applied before the mean."""

    def __init__(self, bias: torch.Tensor | None):
        super().__init__()
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.bias is None else x + self.bias


def _normalising_gcn(layer: torch.nn.Module) -> bool:
    from torch_geometric.nn import GCNConv

    return isinstance(layer, GCNConv) and layer.normalize


def _nbytes(params: list[torch.nn.Parameter]) -> int:
    return sum(p.numel() * p.element_size() for p in params)
