"""DGS's locality-aware node and feature sampling (thesis chapter 3)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from commgraph.errors import SamplingError
from commgraph.sample.base import SampledBatch, SamplingGraph, Scratch, check_seeds, draw_seed, relabel
from commgraph.sample.keyed import row_counts
from commgraph.sample.neighbor import NeighborSampler
from commgraph.sample.options import EPSILON, FEATURE_RATE, RULES


@dataclass(frozen=True)
class DGSMasks:
    """What the explainer publishes: ``node_prob[v]`` in [0, 1] for every node (read for remote
    nodes only; 0 makes a remote node ineligible) and ``feature_mask[c]``, the importance of
    feature column ``c``. ``iteration`` is the training step of the model snapshot explained."""

    node_prob: np.ndarray
    feature_mask: np.ndarray
    iteration: int = 0

    def feature_columns(self, rate: float) -> np.ndarray:
        """The ``ceil(rate * F)`` most important columns, ascending (ties: the lower column)."""
        keep = math.ceil(rate * self.feature_mask.shape[0])
        order = np.argsort(-self.feature_mask, kind="stable")[:keep]
        return np.sort(order)


class DGSSampler:
    r"""DGS's sampler, from the thesis chapter "DGS: communication-efficient distributed GNN
    training with explanation-guided sampling" (section 3.2.3).

    Until masks are set it samples exactly like :class:`NeighborSampler` (``masks`` is None, and
    :class:`~commgraph.train.minibatch.SampledEpochs` counts such steps). With masks, a remote node
    whose node-mask probability is 0 is never drawn, and a destination :math:`v` with
    :math:`d_v > k` in-neighbours, :math:`b_v` of them remote (:math:`b'_v` with a non-zero
    node-mask probability), draws

    .. math::
        r_v = \operatorname{round}\Big(\operatorname{clip}\big(k \tfrac{b_v}{d_v} - \epsilon k,\;
              0,\; \min(k, b'_v)\big)\Big)

    remote neighbours (stochastic rounding, so with :math:`\epsilon = 0` the expected count is
    uniform sampling's), without replacement with probability proportional to the node mask
    :math:`\mathcal{SN}` (Efraimidis-Spirakis keys :math:`U^{1/w}`). Its local neighbours follow
    ``rule``:

    - ``keep-local`` (the thesis's words, "we only sample remote nodes but remain all local
      nodes"): every local neighbour is kept, so a destination has :math:`n^{loc}_v + r_v` sources
      (the total is not kept at :math:`k`: both cannot hold once :math:`n^{loc}_v > k - r_v`);
    - ``split``: :math:`l_v = k - r_v` local neighbours drawn uniformly, so the total stays
      :math:`k`; if :math:`l_v` exceeds the local neighbours the rest goes back to remote ones.

    Remote input nodes send only the :math:`\lceil N_f F \rceil` feature columns with the highest
    feature mask :math:`\mathcal{SF}`; the others are zero-filled.

    Args:
        graph: the worker's :class:`SamplingGraph` (its ``part`` says which nodes are local).
        fanouts: as :class:`NeighborSampler`.
        feature_rate: :math:`N_f`, the share of columns remote nodes send, in (0, 1].
        epsilon: :math:`\epsilon`, the remote draws dropped per destination as a share of the
            fanout, in [0, 1].
        rule: ``keep-local`` (default) or ``split``, as above.
    """

    name = "dgs"

    def __init__(
        self,
        graph: SamplingGraph,
        fanouts,
        *,
        feature_rate: float = FEATURE_RATE,
        epsilon: float = EPSILON,
        rule: str = RULES[0],
    ):
        if not 0 < feature_rate <= 1:
            raise SamplingError(f"--feature-rate (N_f) must lie in (0, 1]; got {feature_rate}")
        check_rule(epsilon, rule)
        self.neighbor = NeighborSampler(graph, fanouts)
        self.graph, self.fanouts = graph, self.neighbor.fanouts
        self.feature_rate, self.epsilon, self.rule = feature_rate, epsilon, rule
        self.masks: DGSMasks | None = None
        self._scratch = Scratch()

    def set_masks(self, masks: DGSMasks) -> None:
        """Use ``masks`` from the next batch on (one reference swap: safe from another thread)."""
        if masks.node_prob.shape != (self.graph.num_nodes,):
            raise SamplingError(f"node mask has shape {masks.node_prob.shape}, expected ({self.graph.num_nodes},)")
        self.masks = masks

    def sample(self, seeds: np.ndarray, rng: np.random.Generator) -> SampledBatch:
        masks = self.masks
        if masks is None:
            return self.neighbor.sample(seeds, rng)
        seeds = check_seeds(self.graph, seeds)
        layers, dst = [], seeds
        for fanout in self.fanouts:
            counts, slots = self.draw(dst, fanout, rng, masks)
            layer = relabel(
                dst, self.graph.indices[slots].astype(np.int64), counts, self._scratch, self.graph.num_nodes
            )
            layers.append(layer)
            dst = layer.src
        layers.reverse()
        return SampledBatch(
            seeds, layers, self.graph.is_remote(layers[0].src), feature_columns=masks.feature_columns(self.feature_rate)
        )

    def draw(
        self, rows: np.ndarray, fanout: int, rng: np.random.Generator, masks: DGSMasks
    ) -> tuple[np.ndarray, np.ndarray]:
        """One hop of DGS's draws for each of ``rows`` under ``masks`` (see the class's
        description): per-row counts and the drawn in-edges' positions in the CSR, row after row."""
        part = -1 if self.graph.part is None else self.graph.part
        rule = DGSRule(self.graph.owner, part, np.asarray(masks.node_prob, dtype=np.float64), self.epsilon, self.rule)
        return rule.draw(self.graph.indptr, self.graph.indices, rows, fanout, rng)


def check_rule(epsilon: float, rule: str) -> None:
    """Raises:
    SamplingError: ``epsilon`` outside [0, 1] or a ``rule`` not in :data:`RULES`."""
    if not 0 <= epsilon <= 1:
        raise SamplingError(f"--epsilon must lie in [0, 1]; got {epsilon}")
    if rule not in RULES:
        raise SamplingError(f"--dgs-rule must be one of {', '.join(RULES)}; got {rule!r}")


@dataclass(frozen=True)
class DGSRule:
    """DGS's draw (:class:`DGSSampler`'s rule) over one CSR whose sources ``owner`` maps to their
    parts: this worker is ``part`` (-1: every source local), ``node_prob`` the node mask of the
    sources (0: a remote source never drawn), ``epsilon`` and ``rule`` as :class:`DGSSampler`'s."""

    owner: np.ndarray
    part: int
    node_prob: np.ndarray
    epsilon: float
    rule: str

    def draw(
        self, indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray, fanout: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """One hop's draws for ``rows``: per-row counts and the drawn in-edges' positions in
        ``indices``, row after row."""
        return _sample_rows_dgs(
            indptr,
            indices,
            np.asarray(rows, dtype=np.int64),
            fanout,
            draw_seed(rng),
            self.owner,
            self.part,
            self.node_prob,
            self.epsilon,
            self.rule == "keep-local",
        )


@njit(cache=True)
def _sample_rows_dgs(indptr, indices, rows, fanout, seed, owner, part, node_prob, epsilon, keep_local):
    """Per-row counts and the drawn in-edges as positions in ``indices`` (:meth:`DGSSampler.draw`)."""
    np.random.seed(seed)
    n = rows.shape[0]
    counts, widest = row_counts(indptr, rows, fanout)
    bound = 0  # room for every row's draws: all its locals and at most min(fanout, degree) remote ones
    for i in range(n):
        bound += (indptr[rows[i] + 1] - indptr[rows[i]]) if keep_local else counts[i]
    out = np.empty(bound, np.int64)
    local = np.empty(widest, np.int64)
    remote = np.empty(widest, np.int64)
    keys = np.empty(widest, np.float64)
    at = 0
    for i in range(n):
        start = indptr[rows[i]]
        degree = indptr[rows[i] + 1] - start
        if counts[i] == degree:  # no draw: every neighbour but the ineligible remote ones
            kept = 0
            for j in range(degree):
                u = indices[start + j]
                if part < 0 or owner[u] == part or node_prob[u] > 0:
                    out[at + kept] = start + j
                    kept += 1
            counts[i] = kept
            at += kept
            continue
        n_local, n_remote, n_eligible = 0, 0, 0
        for j in range(degree):
            u = indices[start + j]
            if part < 0 or owner[u] == part:
                local[n_local] = start + j
                n_local += 1
            else:
                n_remote += 1
                if node_prob[u] > 0:
                    remote[n_eligible] = start + j
                    keys[n_eligible] = np.log(np.random.random()) / node_prob[u]
                    n_eligible += 1
        share = fanout * n_remote / degree - epsilon * fanout
        share = min(max(share, 0.0), float(min(fanout, n_eligible)))
        n_r = int(math.floor(share))
        if np.random.random() < share - n_r:
            n_r += 1
        if keep_local:  # every local neighbour: they cost no communication
            n_l = n_local
            for j in range(n_l):
                out[at + j] = local[j]
        else:
            n_l = fanout - n_r
            if n_l > n_local:
                n_l = n_local
                n_r = min(fanout - n_local, n_eligible)
            for j in range(n_l):  # partial Fisher-Yates over the local neighbours
                t = np.random.randint(j, n_local)
                local[j], local[t] = local[t], local[j]
                out[at + j] = local[j]
        if n_r > 0:
            order = np.argsort(-keys[:n_eligible])
            for j in range(n_r):
                out[at + n_l + j] = remote[order[j]]
        counts[i] = n_l + n_r
        at += n_l + n_r
    return counts, out[:at].copy()
