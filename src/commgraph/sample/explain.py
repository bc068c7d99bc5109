"""DGS's online explanation (thesis 3.2.2-3.2.3): PyG's GNNExplainer on a worker's explanation
graph, in a CPU thread beside training, publishing the node and feature masks DGS samples by."""

from __future__ import annotations

import copy
import multiprocessing
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.explain import Explainer, GNNExplainer

from commgraph.errors import SamplingError
from commgraph.nn import GNN, Block
from commgraph.sample.base import SamplingGraph, forward_blocks
from commgraph.sample.dgs import DGSMasks
from commgraph.sample.neighbor import NeighborSampler


@dataclass(frozen=True)
class ExplainerOptions:
    """The thesis's defaults (section 3.4): explain every ``period`` (T_ex) training iterations,
    for at most ``epochs`` (T_E) GNNExplainer epochs, stopping once its loss is at most
    ``loss_threshold`` (L); ``lr`` is GNNExplainer's learning rate."""

    period: int = 30
    epochs: int = 50
    loss_threshold: float = 0.01
    lr: float = 0.01

    def __post_init__(self) -> None:
        if self.period < 1:
            raise SamplingError(f"--explain-period (T_ex) must be >= 1; got {self.period}")
        if self.epochs < 1:
            raise SamplingError(f"--explain-epochs must be >= 1; got {self.epochs}")
        if self.loss_threshold < 0:
            raise SamplingError(f"--explain-loss-threshold must be >= 0; got {self.loss_threshold}")
        if self.lr <= 0:
            raise SamplingError(f"the explainer's learning rate must be > 0; got {self.lr}")


@dataclass
class ExplanationGraph:
    """A worker's explanation graph: its local nodes pooled into one node :math:`v_G` (row 0, the
    mean of their features, with a self loop) linked both ways to every remote node its
    ``layers``-hop in-neighbourhood reaches (rows 1.., ``remote`` in global ids).
    ``local_blocks`` are that neighbourhood as full blocks, reading ``local_x``, on which the model
    predicts the local nodes."""

    remote: np.ndarray
    x: torch.Tensor
    edge_index: torch.Tensor
    degree: torch.Tensor
    local_x: torch.Tensor
    local_blocks: list[Block]

    @classmethod
    def build(cls, graph: SamplingGraph, rows: Callable[[np.ndarray], np.ndarray], layers: int) -> ExplanationGraph:
        """``rows(ids)`` gives the feature rows of global nodes (for remote ones, what the worker
        fetched once before training)."""
        owned = graph.local_nodes()
        local = NeighborSampler(graph, [-1] * layers).sample(owned, np.random.default_rng(0))
        local_x = torch.from_numpy(np.asarray(rows(local.input_nodes), dtype=np.float32))
        remote = local.input_nodes[local.remote_input]
        pooled = local_x[: owned.shape[0]].mean(0, keepdim=True)  # the input table starts with the owned rows
        x = torch.cat([pooled, local_x[torch.from_numpy(np.flatnonzero(local.remote_input))]])
        others = torch.arange(1, remote.shape[0] + 1)
        hub = torch.zeros_like(others)
        edge_index = torch.cat([torch.zeros(2, 1, dtype=torch.int64), torch.stack([others, hub]),
                                torch.stack([hub, others])], dim=1)
        degree = torch.ones(remote.shape[0] + 1)
        degree[0] = remote.shape[0]  # in-edges without the self loop
        return cls(remote, x, edge_index, degree, local_x, local.blocks(graph))


class _OnExplanationGraph(torch.nn.Module):
    """A block model as PyG's explainers call one: ``model(x, edge_index)`` -> log-probabilities
    of every node, every layer computing every node of the (small) explanation graph."""

    def __init__(self, model: GNN, degree: torch.Tensor):
        super().__init__()
        self.model, self.degree = model, degree

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        block = Block(x.shape[0], x.shape[0], edge_index, self.degree)
        return torch.log_softmax(forward_blocks(self.model, x, [block] * self.model.num_layers), dim=-1)


class _Converged(Exception):
    pass


class _StoppingGNNExplainer(GNNExplainer):
    """PyG's GNNExplainer that stops once its loss is at most ``threshold`` (DGS's L)."""

    def __init__(self, epochs: int, lr: float, threshold: float):
        super().__init__(epochs=epochs, lr=lr)
        self.threshold, self.epochs_run, self.last_loss = threshold, 0, float("nan")

    def forward(self, model, x, edge_index, *, target, index=None, **kwargs):
        self.epochs_run = 0
        try:
            return super().forward(model, x, edge_index, target=target, index=index, **kwargs)
        except _Converged:
            explanation = self._create_explanation()
            self._clean_model(model)
            return explanation

    def _loss(self, y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = super()._loss(y_hat, y)
        self.epochs_run += 1
        self.last_loss = float(loss.detach())
        if self.last_loss <= self.threshold and self.epochs_run > 1:  # after the hard masks are known
            raise _Converged
        return loss


@dataclass(frozen=True)
class ExplanationRound:
    """What one explanation produced: the masks, and the epochs and final loss of each explainer."""

    masks: DGSMasks
    node_epochs: int
    feature_epochs: int
    node_loss: float
    feature_loss: float


class DGSExplainer:
    """Learns DGS's masks for one worker with PyG's GNNExplainer.

    The model (a snapshot of the training model) predicts the local nodes on their full
    neighbourhood; the mean of those class probabilities is :math:`v_G`'s prediction
    :math:`h_{\\mathcal{E}}`, whose top class is the target GNNExplainer explains at :math:`v_G`.
    One explainer learns a mask per node (``node_mask_type="object"``): the remote nodes' entries
    are :math:`\\mathcal{SN}`; another a mask per feature column shared by all nodes
    (``"common_attributes"``): :math:`\\mathcal{SF}`.
    """

    def __init__(self, graph: SamplingGraph, explanation: ExplanationGraph, model: GNN,
                 options: ExplainerOptions = ExplainerOptions()):
        self.graph, self.explanation, self.options = graph, explanation, options
        self.model = copy.deepcopy(model).eval()
        wrapped = _OnExplanationGraph(self.model, explanation.degree)
        self.node_algorithm = _StoppingGNNExplainer(options.epochs, options.lr, options.loss_threshold)
        self.feature_algorithm = _StoppingGNNExplainer(options.epochs, options.lr, options.loss_threshold)
        config = dict(mode="multiclass_classification", task_level="node", return_type="log_probs")
        self.node_explainer = Explainer(wrapped, self.node_algorithm, explanation_type="phenomenon",
                                        node_mask_type="object", model_config=config)
        self.feature_explainer = Explainer(wrapped, self.feature_algorithm, explanation_type="phenomenon",
                                           node_mask_type="common_attributes", model_config=config)

    def target(self) -> int:
        """The top class of the local nodes' mean predicted probabilities."""
        with torch.no_grad():
            logits = forward_blocks(self.model, self.explanation.local_x, self.explanation.local_blocks)
        return int(torch.softmax(logits, dim=-1).mean(0).argmax())

    def explain(self, state: dict, iteration: int = 0) -> ExplanationRound:
        """Masks for the model with parameters ``state`` (trained up to ``iteration``)."""
        self.model.load_state_dict(state)
        self.model.eval()
        graph = self.explanation
        target = torch.full((graph.x.shape[0],), self.target(), dtype=torch.int64)
        node = self.node_explainer(graph.x, graph.edge_index, target=target, index=0)
        feature = self.feature_explainer(graph.x, graph.edge_index, target=target, index=0)
        node_prob = np.zeros(self.graph.num_nodes, dtype=np.float32)
        node_prob[graph.remote] = node.node_mask[1:, 0].numpy()
        masks = DGSMasks(node_prob, feature.node_mask.reshape(-1, graph.x.shape[1])[0].numpy().copy(), iteration)
        return ExplanationRound(masks, self.node_algorithm.epochs_run, self.feature_algorithm.epochs_run,
                                self.node_algorithm.last_loss, self.feature_algorithm.last_loss)


def _lowest_priority() -> None:
    """Run this process only on cycles nothing else wants: Linux's SCHED_IDLE policy (a task
    waking up preempts it at once), else nice 19."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return
    except (AttributeError, OSError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 19)
    except (AttributeError, OSError):
        pass


@dataclass(frozen=True)
class _Failure:
    """An explanation's error, as the explainer process reports it."""

    error: str


def _serve(explainer: DGSExplainer, requests, results) -> None:
    """The explainer process: at the lowest CPU priority and with one compute thread, explain each
    snapshot handed over until told to stop (None) or training's end of the pipe closes."""
    _lowest_priority()
    torch.set_num_threads(1)
    while True:
        try:
            request = requests.get()
        except (EOFError, OSError):
            return
        if request is None:
            return
        state, iteration = request
        try:
            results.put(explainer.explain(state, iteration))
        except Exception as exc:  # noqa: BLE001 - reported to training by observe() and close()
            results.put(_Failure(f"{type(exc).__name__}: {exc}"))
            return


class OnlineExplainer:
    """Runs a :class:`DGSExplainer` beside training in a process of its own, at the lowest CPU
    priority: its own interpreter, so it never holds a lock training needs (a thread would share
    the GIL), and it takes only the cycles training leaves idle (on a machine without spare cores
    the masks come late, or not at all).

    Training calls :meth:`observe` after every iteration with its loss: the call keeps a copy of
    the parameters when the loss is the lowest of the current window of ``period`` iterations and,
    at the window's end, hands that snapshot to the process if it is idle (if it is still busy the
    window is skipped: training never waits). Each finished explanation is passed to ``publish``
    (e.g. :meth:`DGSSampler.set_masks`) by a thread of training's process that waits on the
    results. An error in the explainer is raised by the next :meth:`observe` or by :meth:`close`.
    """

    def __init__(self, explainer: DGSExplainer, publish: Callable[[DGSMasks], None]):
        self.explainer, self.publish = explainer, publish
        self.period = explainer.options.period
        self.rounds: list[ExplanationRound] = []
        self.skipped = 0
        self._best: tuple[float, int, dict] | None = None
        self._busy = False
        self._error: str | None = None
        context = multiprocessing.get_context("spawn")  # no fork of a process with live threads
        self._requests, self._results = context.Queue(), context.Queue()
        self._process = context.Process(target=_serve, args=(explainer, self._requests, self._results),
                                        name="dgs-explainer", daemon=True)
        self._process.start()
        self._receiver = threading.Thread(target=self._receive, name="dgs-masks", daemon=True)
        self._receiver.start()

    def observe(self, model: torch.nn.Module, loss: float, iteration: int) -> None:
        """Record training iteration ``iteration`` (counted from 1) and its ``loss``."""
        self._raise_error()
        if self._best is None or loss < self._best[0]:
            state = {name: value.detach().cpu().clone() for name, value in model.state_dict().items()}
            self._best = (loss, iteration, state)
        if iteration % self.period:
            return
        _, best_iteration, state = self._best
        self._best = None
        if self._busy:
            self.skipped += 1
            return
        self._busy = True
        self._requests.put((state, best_iteration))

    def _receive(self) -> None:
        while True:
            try:
                result = self._results.get()
            except (EOFError, OSError):
                return
            if result is None:
                return
            if isinstance(result, _Failure):
                self._error = result.error
                return
            self.rounds.append(result)
            self.publish(result.masks)
            self._busy = False

    def _raise_error(self) -> None:
        if self._error is not None:
            raise SamplingError(f"the DGS explainer failed: {self._error}")

    def close(self, timeout: float = 30.0) -> None:
        """Stop the explainer: an explanation still running is dropped (training is over)."""
        self._requests.put(None)
        self._process.join(timeout if not self._busy else 0.5)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout)
        self._results.put(None)
        self._receiver.join(timeout)
        self._raise_error()
