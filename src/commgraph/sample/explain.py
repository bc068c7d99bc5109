"""DGS's online explanation (thesis 3.2.2-3.2.3): one GNNExplainer on a worker's explanation
graph, in a CPU process beside training, publishing the node and feature masks DGS samples by."""

from __future__ import annotations

import copy
import math
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from numba import njit

from commgraph.errors import SamplingError
from commgraph.lifetime import die_with_parent
from commgraph.nn import GNN, Block
from commgraph.sample.base import SampledBatch, SamplingGraph, forward_blocks
from commgraph.sample.dgs import DGSMasks
from commgraph.sample.neighbor import NeighborSampler
from commgraph.sample.options import EXPLAIN_NODES, EXPLAIN_TARGETS, ExplainerOptions

QUIET_CHILDREN = ("ignore::FutureWarning:torch.jit._script", "ignore:resource_tracker:UserWarning")  # -W filters
POOL_ROWS = 1 << 13  # the pooled node's mean is read this many owned rows at a time


@dataclass(frozen=True)
class ExplanationPlan:
    """Which nodes a worker's explanation graph reads.

    A part whose ``layers``-hop in-neighbourhood has at most ``nodes`` nodes is explained whole: its
    ``targets`` batch predicts every owned node on its full neighbourhood and the star links every
    remote node the neighbourhood reaches. A larger one (the thesis's 500k-node graph: 437,500
    remote nodes a part) is explained on a bounded sample, so that the explainer holds megabytes,
    not the graph: ``targets`` predicts ``num_targets`` owned nodes drawn uniformly, each on its
    neighbourhood drawn with the training ``fanouts`` (as a training batch predicts them), and
    ``remote`` is a uniform sample of ``nodes`` of the remote nodes; the reached remote nodes left
    out are ``unexplained`` (they take the explained ones' mean probability, so the node mask
    still makes every reachable remote node eligible, as the whole star does). Deterministic for a
    graph and part (seed 0)."""

    owned: np.ndarray
    targets: SampledBatch
    remote: np.ndarray
    unexplained: np.ndarray

    @classmethod
    def draw(
        cls,
        graph: SamplingGraph,
        layers: int,
        fanouts=None,
        nodes: int = EXPLAIN_NODES,
        num_targets: int = EXPLAIN_TARGETS,
    ) -> ExplanationPlan:
        owned = graph.local_nodes()
        reached = np.flatnonzero(_reached(graph.indptr, graph.indices, owned, layers))
        remote = reached[graph.is_remote(reached)]
        rng = np.random.default_rng(0)
        if reached.shape[0] <= nodes:
            whole = NeighborSampler(graph, [-1] * layers).sample(owned, rng)
            return cls(owned, whole, remote, remote[:0])
        seeds = np.sort(rng.choice(owned, min(num_targets, owned.shape[0]), replace=False))
        targets = NeighborSampler(graph, fanouts or [-1] * layers).sample(seeds, rng)
        chosen = np.sort(rng.choice(remote, min(nodes, remote.shape[0]), replace=False))
        return cls(owned, targets, chosen, np.setdiff1d(remote, chosen, assume_unique=True))

    @property
    def rows(self) -> np.ndarray:
        """The nodes whose feature rows the graph reads besides the pooled owned ones (sorted)."""
        return np.union1d(self.targets.input_nodes, self.remote)


@njit(cache=True)
def _reached(indptr, indices, rows, hops):
    """Whether each node lies within ``hops`` in-edges of ``rows`` (one byte a node, no edge list)."""
    level = np.full(indptr.shape[0] - 1, -1, np.int8)
    for v in rows:
        level[v] = 0
    for hop in range(1, hops + 1):
        for v in range(level.shape[0]):
            if level[v] == hop - 1:
                for j in range(indptr[v], indptr[v + 1]):
                    if level[indices[j]] < 0:
                        level[indices[j]] = hop
    return level >= 0


@dataclass
class ExplanationGraph:
    """A worker's explanation graph (:class:`ExplanationPlan` says which nodes): its local nodes
    pooled into one node :math:`v_G` (row 0, the mean of their features, with a self loop) linked
    both ways to the plan's ``remote`` nodes (rows 1.., global ids). ``unexplained`` are the
    reached remote nodes outside the star. ``local_blocks`` are the plan's target batch as blocks,
    reading ``local_x``, on which the model predicts the class to explain."""

    remote: np.ndarray
    unexplained: np.ndarray
    x: torch.Tensor
    edge_index: torch.Tensor
    degree: torch.Tensor
    local_x: torch.Tensor
    local_blocks: list[Block]

    @classmethod
    def build(
        cls, graph: SamplingGraph, rows: Callable[[np.ndarray], np.ndarray], layers: int, fanouts=None
    ) -> ExplanationGraph:
        """The graph of :meth:`ExplanationPlan.draw`; ``rows(ids)`` gives the feature rows of
        global nodes (the owned ones' too)."""
        plan = ExplanationPlan.draw(graph, layers, fanouts)
        owned = plan.owned
        pooled = sum(
            np.asarray(rows(owned[at : at + POOL_ROWS]), dtype=np.float64).sum(0)
            for at in range(0, owned.shape[0], POOL_ROWS)
        ) / max(owned.shape[0], 1)
        return cls.from_plan(graph, plan, rows, torch.from_numpy(np.asarray(pooled, dtype=np.float32)))

    @classmethod
    def from_plan(
        cls, graph: SamplingGraph, plan: ExplanationPlan, rows: Callable[[np.ndarray], np.ndarray], pooled: torch.Tensor
    ) -> ExplanationGraph:
        """The graph of ``plan``: ``rows(ids)`` gives the rows of ``plan.rows``, ``pooled`` is the
        mean of the owned nodes' rows."""
        local_x = torch.from_numpy(np.asarray(rows(plan.targets.input_nodes), dtype=np.float32))
        remote = plan.remote
        x = torch.cat([pooled.reshape(1, -1), torch.from_numpy(np.asarray(rows(remote), dtype=np.float32))])
        others = torch.arange(1, remote.shape[0] + 1)
        hub = torch.zeros_like(others)
        edge_index = torch.cat(
            [torch.zeros(2, 1, dtype=torch.int64), torch.stack([others, hub]), torch.stack([hub, others])], dim=1
        )
        degree = torch.ones(remote.shape[0] + 1)
        degree[0] = remote.shape[0]  # in-edges without the self loop
        return cls(remote, plan.unexplained, x, edge_index, degree, local_x, plan.targets.blocks(graph))


@dataclass(frozen=True)
class ExplanationRound:
    """What one explanation produced: the masks, the GNNExplainer epochs run, the last epoch's
    loss, and the explanation's wall and CPU seconds (in the process that ran it)."""

    masks: DGSMasks
    epochs: int
    loss: float
    seconds: float
    cpu_seconds: float


# GNNExplainer's regularisers (PyG's coefficients): mask size (mean) and element-wise entropy
SIZE_COEFF, ENTROPY_COEFF, EPS = 1.0, 0.1, 1e-15


class DGSExplainer:
    r"""Learns DGS's node mask :math:`\mathcal{SN}` and feature mask :math:`\mathcal{SF}` for one
    worker with one GNNExplainer (Ying et al., `"GNNExplainer: Generating Explanations for Graph
    Neural Networks" <https://arxiv.org/abs/1903.03894>`_, NeurIPS 2019), as the thesis's
    explanation module does (section 3.2.2), on the worker's :class:`ExplanationGraph`.

    The model (a snapshot of the training model) predicts the local nodes on their full
    neighbourhood; the top class :math:`c` of their mean class probabilities is
    :math:`h_{\mathcal{E}}`, the prediction of the pooled node :math:`v_G`. Both masks are learnt
    together: a logit per explanation-graph node :math:`m_i` and per feature column :math:`f_j`,
    the model reading :math:`x'_{ij} = x_{ij}\,\sigma(m_i)\,\sigma(f_j)`, minimising

    .. math::
        \mathcal{L} = -\log p_c(v_G \mid X') + \sum_{M \in \{\sigma(m), \sigma(f)\}}
        \big(\alpha\,\overline{M} + \beta\,\overline{H(M)}\big),

    with :math:`H` the element-wise binary entropy and GNNExplainer's coefficients
    :math:`\alpha = 1`, :math:`\beta = 0.1`, by Adam for at most ``epochs`` (:math:`\mathcal{T}_E`)
    epochs, stopping once :math:`\mathcal{L} \le` ``loss_threshold`` (:math:`\mathcal{L}`). Every
    epoch is one vectorised pass over the explanation graph: its first layers compute every node of
    the star, the last only :math:`v_G`. :math:`\sigma(m_i)` of remote node :math:`i` is its
    sampling probability, :math:`\sigma(f)` the feature importance.

    Args:
        graph: the worker's :class:`SamplingGraph`.
        explanation: its explanation graph.
        model: the training model (copied).
        options: :math:`\mathcal{T}_E`, :math:`\mathcal{L}`, the learning rate.
    """

    def __init__(
        self,
        graph: SamplingGraph,
        explanation: ExplanationGraph,
        model: GNN,
        options: ExplainerOptions = ExplainerOptions(),
    ):
        self.graph, self.explanation, self.options = graph, explanation, options
        self.model = copy.deepcopy(model).eval()
        for param in self.model.parameters():
            param.requires_grad_(False)
        size = explanation.x.shape[0]
        star = Block(size, size, explanation.edge_index, explanation.degree)
        into_hub = explanation.edge_index[:, explanation.edge_index[1] == 0]
        self.blocks = [star] * (self.model.num_layers - 1) + [Block(size, 1, into_hub, explanation.degree)]

    def target(self) -> int:
        """The top class of the local nodes' mean predicted probabilities."""
        with torch.no_grad():
            logits = forward_blocks(self.model, self.explanation.local_x, self.explanation.local_blocks)
        return int(torch.softmax(logits, dim=-1).mean(0).argmax())

    def explain(self, state: dict, iteration: int = 0) -> ExplanationRound:
        """Masks for the model with parameters ``state`` (trained up to ``iteration``)."""
        started, cpu = time.perf_counter(), time.process_time()
        self.model.load_state_dict(state)
        self.model.eval()
        x, target = self.explanation.x, self.target()
        start = torch.Generator().manual_seed(iteration)  # GNNExplainer's initial masks, the same for a snapshot
        node_logit = torch.nn.Parameter(0.1 * torch.randn(x.shape[0], 1, generator=start))
        feature_logit = torch.nn.Parameter(0.1 * torch.randn(1, x.shape[1], generator=start))
        optimizer = torch.optim.Adam([node_logit, feature_logit], lr=self.options.lr)
        epochs, loss = 0, float("nan")
        while epochs < self.options.epochs:
            optimizer.zero_grad()
            node, feature = node_logit.sigmoid(), feature_logit.sigmoid()
            log_probs = torch.log_softmax(
                forward_blocks(self.model, _Masked.apply(x, node, feature), self.blocks), dim=-1
            )
            total = -log_probs[0, target] + _regulariser(node) + _regulariser(feature)
            total.backward()
            optimizer.step()
            epochs, loss = epochs + 1, float(total.detach())
            if loss <= self.options.loss_threshold:
                break
        node_prob = np.zeros(self.graph.num_nodes, dtype=np.float32)
        explained = node_logit.detach()[1:, 0].sigmoid().numpy()
        node_prob[self.explanation.remote] = explained
        if explained.shape[0]:  # the reached remote nodes outside a sampled star: the explained ones' mean
            node_prob[self.explanation.unexplained] = explained.mean()
        masks = DGSMasks(node_prob, feature_logit.detach()[0].sigmoid().numpy(), iteration)
        return ExplanationRound(masks, epochs, loss, time.perf_counter() - started, time.process_time() - cpu)


class _Masked(torch.autograd.Function):
    r""":math:`X' = X \odot n f^\top` for a constant :math:`X` (``[N, F]``), node mask ``n``
    (``[N, 1]``) and feature mask ``f`` (``[1, F]``), with its gradients as two matrix-vector
    products of :math:`G \odot X`: one pass over the table each way, where autograd's chain of
    two broadcasts makes several."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, node: torch.Tensor, feature: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, node, feature)
        return torch.mul(x, node).mul_(feature)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, node, feature = ctx.saved_tensors
        weighted = grad * x
        return None, weighted @ feature.t(), node.t() @ weighted


def _regulariser(mask: torch.Tensor) -> torch.Tensor:
    """GNNExplainer's size and entropy terms of one mask (values in (0, 1))."""
    entropy = -mask * torch.log(mask + EPS) - (1 - mask) * torch.log(1 - mask + EPS)
    return SIZE_COEFF * mask.mean() + ENTROPY_COEFF * entropy.mean()


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


@contextmanager
def _quiet_children():
    """Processes started meanwhile filter out two warnings that are not the user's business: PyG's
    import calls ``torch.jit.script``, which warns that it is deprecated (the explainer imports PyG
    afresh; the ranks, forked from a zygote, imported it with warnings off), and a rank killed
    mid-run leaves its queues' semaphores to its resource tracker, which removes them and warns
    that they leaked."""
    before = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, (before, *QUIET_CHILDREN)))
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONWARNINGS"]
        else:
            os.environ["PYTHONWARNINGS"] = before


def _serve(requests, results, cpu: float | None, parent: int) -> None:
    """The explainer process: take the :class:`DGSExplainer` (the first request), then explain
    each snapshot handed over until told to stop (None) or training's end of the pipe closes; it
    dies with training's process ``parent`` however that exits
    (:func:`~commgraph.lifetime.die_with_parent`). Without a budget (``cpu`` None) it runs
    one compute thread at the lowest CPU priority; with ``cpu`` cores it runs
    ``max(1, floor(cpu))`` threads (at most this machine's cores) at normal priority and, below
    one core per thread, sleeps after each explanation so that its busy share of the time is
    ``cpu / threads``. Any error is reported to training as a :class:`_Failure`."""
    die_with_parent(parent)
    try:
        explainer = requests.get()
        threads = 1 if cpu is None else max(1, min(int(cpu), os.cpu_count() or 1))
        if cpu is None:
            _lowest_priority()
        torch.set_num_threads(threads)
        duty = 1.0 if cpu is None else min(1.0, cpu / threads)
        while True:
            try:
                request = requests.get()
            except (EOFError, OSError):
                return
            if request is None:
                return
            state, iteration = request
            result = explainer.explain(state, iteration)
            results.put(result)
            if duty < 1:
                time.sleep(result.seconds * (1 / duty - 1))
    except Exception as exc:  # noqa: BLE001 - reported to training by observe(), wait_for_masks() and close()
        results.put(_Failure(f"{type(exc).__name__}: {exc}"))


class _Windows:
    """The thesis's choice of the model to explain: of each window of ``period`` training
    iterations, the snapshot with the lowest loss."""

    def __init__(self, period: int):
        self.period = period
        self._best: tuple[float, int, dict] | None = None

    @staticmethod
    def _snapshot(model: torch.nn.Module) -> dict:
        return {name: value.detach().cpu().clone() for name, value in model.state_dict().items()}

    def _record(self, model: torch.nn.Module, loss: float, iteration: int) -> tuple[dict, int] | None:
        """Keep ``model`` if its ``loss`` is the window's lowest; at the window's end, its best
        snapshot and that snapshot's iteration (else None)."""
        if self._best is None or loss < self._best[0]:
            self._best = (loss, iteration, self._snapshot(model))
        if iteration % self.period:
            return None
        _, best_iteration, state = self._best
        self._best = None
        return state, best_iteration


class WorkerExplainer(_Windows):
    """Runs a :class:`DGSExplainer` in training's own process (``--explain-in worker``), with
    :class:`OnlineExplainer`'s interface: at the end of each window of ``period`` iterations,
    :meth:`observe` explains the window's lowest-loss snapshot at once and publishes the masks
    before the next step. No second interpreter and no second copy of the explanation graph;
    training waits for each explanation (seconds with a bounded :class:`ExplanationPlan`), and no
    window is skipped. An explanation's error is raised by the call that ran it."""

    def __init__(self, explainer: DGSExplainer, publish: Callable[[DGSMasks], None]):
        super().__init__(explainer.options.period)
        self.explainer, self.publish = explainer, publish
        self.rounds: list[ExplanationRound] = []
        self.skipped = 0

    def observe(self, model: torch.nn.Module, loss: float, iteration: int) -> None:
        """Record training iteration ``iteration`` (counted from 1) and its ``loss``."""
        chosen = self._record(model, loss, iteration)
        if chosen is not None:
            self._explain(*chosen)

    def wait_for_masks(self, model: torch.nn.Module, iteration: int, timeout: float) -> float:
        """Explain ``model`` (trained up to ``iteration``) now unless masks were published; the
        seconds it took (``timeout`` is not needed: the call returns when it is done)."""
        started = time.perf_counter()
        if not self.rounds:
            self._explain(self._snapshot(model), iteration)
        return time.perf_counter() - started

    def _explain(self, state: dict, iteration: int) -> None:
        try:
            result = self.explainer.explain(state, iteration)
        except Exception as exc:  # noqa: BLE001 - named as the explainer's, as OnlineExplainer does
            raise SamplingError(f"the DGS explainer failed in the worker: {type(exc).__name__}: {exc}") from exc
        self.rounds.append(result)
        self.publish(result.masks)

    def close(self, timeout: float = 30.0) -> None:
        """Nothing runs beside training: nothing to stop."""


class OnlineExplainer(_Windows):
    """Runs a :class:`DGSExplainer` beside training in a process of its own: its own interpreter,
    so it never holds a lock training needs (a thread would share the GIL). Without a CPU budget
    (``cpu`` None) it runs at the lowest CPU priority and takes only the cycles training leaves
    idle (on a machine without spare cores the masks come late, or not at all); with ``cpu``
    cores it competes with training for at most that much CPU (see :func:`_serve`).

    Training calls :meth:`observe` after every iteration with its loss: the call keeps a copy of
    the parameters when the loss is the lowest of the current window of ``period`` iterations and,
    at the window's end, hands that snapshot to the process if it is idle (if it is still busy the
    window is skipped). :meth:`wait_for_masks` instead hands over a snapshot at once and blocks
    until the first masks are published (``--dgs-wait``). Each finished explanation is passed to
    ``publish`` (e.g. :meth:`DGSSampler.set_masks`) by a thread of training's process that waits
    on the results. An error in the explainer, or its process's death, is raised by the next
    :meth:`observe`, :meth:`wait_for_masks` or by :meth:`close`, naming the process. The process
    dies with the one that made this object (made in its main thread: the parent-death signal
    follows the thread that started the child). It keeps no reference to ``explainer`` once the
    process has it, so the explanation graph is held once, in that process.
    """

    def __init__(self, explainer: DGSExplainer, publish: Callable[[DGSMasks], None], cpu: float | None = None):
        if cpu is not None and not (cpu > 0 and math.isfinite(cpu)):
            raise SamplingError(f"the online explainer needs a finite CPU budget > 0 cores; got {cpu}")
        super().__init__(explainer.options.period)
        self.publish = publish
        self.rounds: list[ExplanationRound] = []
        self.skipped = 0
        self._busy = False
        self._published = threading.Event()
        self._error: str | None = None
        with _quiet_children():  # the queues start this rank's resource tracker, then the explainer starts
            context = multiprocessing.get_context("spawn")  # no fork of a process with live threads
            self._requests, self._results = context.Queue(), context.Queue()
            # the explainer (megabytes) goes by the queue, not as an argument: start() writes its
            # arguments into a pipe it also holds open, and would wait forever if the child died reading
            self._requests.cancel_join_thread()  # nor may a dead child's unread queue hold up our exit
            self._process = context.Process(
                target=_serve, args=(self._requests, self._results, cpu, os.getpid()), name="dgs-explainer", daemon=True
            )
            self._closing = False
            self._process.start()
        self._requests.put(explainer)
        self._receiver = threading.Thread(target=self._receive, name="dgs-masks", daemon=True)
        self._receiver.start()

    def observe(self, model: torch.nn.Module, loss: float, iteration: int) -> None:
        """Record training iteration ``iteration`` (counted from 1) and its ``loss``."""
        self._check()
        chosen = self._record(model, loss, iteration)
        if chosen is None:
            return
        if self._busy:
            self.skipped += 1
            return
        self._busy = True
        self._requests.put(chosen)

    def wait_for_masks(self, model: torch.nn.Module, iteration: int, timeout: float) -> float:
        """Block until the first masks are published, handing ``model`` (trained up to
        ``iteration``) to the explainer unless it is already explaining; returns the seconds
        waited. Raises :class:`SamplingError` once ``timeout`` seconds (the job's ``--timeout``)
        pass, or at once if the explainer fails or its process dies."""
        started = time.perf_counter()
        if not self._published.is_set() and not self._busy:
            self._busy = True
            self._requests.put((self._snapshot(model), iteration))
        while not self._published.wait(0.05):
            self._check()
            if time.perf_counter() - started > timeout:
                raise SamplingError(
                    f"the DGS explainer process (pid {self._process.pid}) published no masks within "
                    f"--timeout {timeout:g} s of --dgs-wait: raise --timeout, or give it more CPU "
                    "with --explain-cpu"
                )
        return time.perf_counter() - started

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
            self._published.set()
            self._busy = False

    def _raise_error(self) -> None:
        if self._error is not None:
            raise SamplingError(f"the DGS explainer failed in its process (pid {self._process.pid}): {self._error}")

    def _check(self) -> None:
        """Raise the explainer's error, or its process's death (its last report read first)."""
        self._raise_error()
        if self._closing or self._process.is_alive():
            return
        self._receiver.join(0.5)  # a failure it sent before exiting is still on its way
        self._raise_error()
        code = self._process.exitcode
        how = (
            f"was killed by {signal.Signals(-code).name}"
            if code is not None and code < 0
            else f"exited with code {code}"
        )
        raise SamplingError(f"the DGS explainer process (pid {self._process.pid}) {how}; the run stopped")

    def close(self, timeout: float = 30.0) -> None:
        """Stop the explainer: an explanation still running is dropped (training is over). Raises
        its error, or its death before it was told to stop, once the process is stopped."""
        try:
            self._check()
        finally:
            self._closing = True
            self._requests.put(None)
            self._process.join(timeout if not self._busy else 0.5)
            if self._process.is_alive():
                self._process.terminate()
                self._process.join(timeout)
            self._results.put(None)
            self._receiver.join(timeout)
        self._raise_error()
