r"""Heterogeneous neighbour sampling: per relation :math:`r`, hop :math:`h` draws, for each node of
:math:`r`'s target type that hop :math:`h - 1` added (the seeds at hop 1), :math:`\min(k_{r,h},
d^r_v)` of its :math:`d^r_v` in-neighbours over :math:`r` uniformly without replacement (all of them
at :math:`k_{r,h} = -1`); a node is expanded once, at the hop that added it, through every relation
into its type, and a type's new nodes are numbered in order of first draw, as pyg-lib's
``hetero_neighbor_sample`` numbers them (:func:`sample_hetero_hops`).

It samples each relation's in-edge CSR over typed ids (:class:`Relation`) through the samplers'
keyed kernel (:func:`commgraph.sample.keyed.keyed_slots`) and table extension
(:func:`commgraph.sample.base.extend_table`), or with :class:`TypedDGS` by DGS's rule (thesis
chapter 3, :class:`~commgraph.sample.dgs.DGSSampler`) applied to each relation into a type: a node
:math:`v` of relation :math:`r`'s target type with :math:`d^r_v > k_{r,h}` in-neighbours over
:math:`r`, :math:`b^r_v` of them remote (owned by another part), draws

.. math::
    r_v = \operatorname{round}\big(\operatorname{clip}(k_{r,h}\, b^r_v / d^r_v - \epsilon k_{r,h},\;
          0,\; \min(k_{r,h}, b'^r_v))\big)

remote ones, weighted by the node mask of :math:`r`'s source type (:math:`b'^r_v`: those of non-zero
mask), and keeps its local ones (``keep-local``) or draws :math:`k_{r,h} - r_v` of them
(``split``): the remote draws uniform sampling would make move to local neighbours. A node with
at most :math:`k_{r,h}` neighbours over :math:`r` (every one at -1) takes them all but the remote
ones of mask 0. The bridge's loaders build the relations of a
``HeteroData`` (:mod:`commgraph.pyg.hetero_loader`); :class:`TypedRelations` reads them from a
typed partition set for the built-in sampled R-GCN (:mod:`commgraph.train.rgcn_sampled`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commgraph.errors import SamplingError
from commgraph.partition.store import PartitionSet, owned_edges
from commgraph.sample.base import Scratch, draw_seed, extend_table
from commgraph.sample.dgs import DGSMasks, DGSRule, check_rule
from commgraph.sample.keyed import keyed_slots
from commgraph.sample.options import EPSILON, RULES

EdgeType = tuple[str, str, str]
NONE = np.empty(0, dtype=np.int64)


@dataclass
class Relation:
    """One relation's in-edges as a CSR whose rows are its destination type's nodes.

    Shapes:
        - **indptr:** ``[N_dst + 1]``; **indices:** ``[E']`` source ids (the source type's)
        - **positions:** ``[E']`` each CSR edge's position where the relation's edges come from
          (the bridge's ``edge_index``, a typed set's whole-graph CSR)
    """

    indptr: np.ndarray
    indices: np.ndarray
    positions: np.ndarray


@dataclass
class TypedRelations:
    """A typed set's relations (:class:`Relation` each, over typed ids), its node types and their
    offsets in the homogeneous view."""

    node_types: list[str]
    offsets: np.ndarray
    relations: dict[EdgeType, Relation]

    @classmethod
    def read(cls, pset: PartitionSet) -> TypedRelations:
        """The relations of a typed set: the whole graph's in-edges (``structure/``, memory-mapped)
        with each edge's relation gathered from the parts' ``edge_type.npy``, a relation at a time
        (each row's sources in the set's order; the relation's ``positions`` are its edges' in the
        set's CSR)."""
        typed = pset.manifest["typed"]
        types, offsets = typed["node_types"], np.asarray(typed["offsets"], dtype=np.int64)
        indptr, indices = pset.in_edges()
        edge_type = np.empty(indices.shape[0], dtype=np.int16)
        for k in range(pset.num_parts):
            owned = np.asarray(pset.part(k, check=False).owned)
            edge_type[owned_edges(indptr, owned)] = np.load(pset.path / f"part-{k}" / "edge_type.npy")
        relations = {}
        for r, (src_type, name, dst_type) in enumerate(typed["relations"]):
            mine = np.flatnonzero(edge_type == r)
            s, d = types.index(src_type), types.index(dst_type)
            into = np.searchsorted(indptr, mine, side="right") - 1 - offsets[d]
            csr = np.zeros(offsets[d + 1] - offsets[d] + 1, dtype=np.int64)
            np.cumsum(np.bincount(into, minlength=csr.shape[0] - 1), out=csr[1:])
            relations[(src_type, name, dst_type)] = Relation(csr, indices[mine].astype(np.int64) - offsets[s], mine)
        return cls(types, offsets, relations)

    @property
    def num_nodes(self) -> dict[str, int]:
        """Each node type's count."""
        return {t: int(self.offsets[i + 1] - self.offsets[i]) for i, t in enumerate(self.node_types)}


@dataclass
class HeteroHops:
    """A batch's draws (:func:`sample_hetero_hops`).

    Shapes:
        - **nodes:** per node type ``[n_t]`` ids: its seeds, then each hop's new nodes
          in order of first draw
        - **edges:** per relation ``[2, E_r]`` positions in its source and target types' ``nodes``,
          hop after hop; **slots:** ``[E_r]`` each edge's position in the relation's CSR
        - **num_nodes:** per node type, its seeds (0 for a type without), then the nodes each hop
          added (PyG's ``num_sampled_nodes``); **num_edges:** per relation, the edges of each hop
          (PyG's ``num_sampled_edges``)
    """

    nodes: dict[str, np.ndarray]
    edges: dict[EdgeType, np.ndarray]
    slots: dict[EdgeType, np.ndarray]
    num_nodes: dict[str, list[int]]
    num_edges: dict[EdgeType, list[int]]


def sample_hetero_hops(
    relations: dict[EdgeType, Relation],
    num_nodes: dict[str, int],
    seeds: dict[str, np.ndarray],
    fanouts: dict[EdgeType, list[int]],
    rng: np.random.Generator,
    scratch: dict[str, Scratch],
    dgs: TypedDGS | None = None,
) -> HeteroHops:
    """PyG's heterogeneous neighbour sampling from ``seeds`` (distinct ids per node type, of one
    type or several): hop ``h`` draws ``fanouts[r][h]`` in-neighbours over each relation ``r`` (all
    with -1) of each node of ``r``'s target type that hop ``h - 1`` added, uniformly, or by DGS's
    rule with ``dgs``."""
    nodes = {t: seeds.get(t, NONE) for t in num_nodes}
    added = {t: [int(nodes[t].shape[0])] for t in num_nodes}
    pieces = {r: ([], [], []) for r in relations}  # per relation: each hop's sources, targets, slots
    for hop in range(len(next(iter(fanouts.values()), []))):
        ends = {t: int(nodes[t].shape[0]) for t in num_nodes}  # the frontier: what the last hop added
        for edge_type, relation in relations.items():
            src, _, dst = edge_type
            start = ends[dst] - added[dst][-1]
            frontier = nodes[dst][start : ends[dst]]
            fanout = fanouts[edge_type][hop]
            if dgs is None:
                counts, drawn = keyed_slots(relation.indptr, frontier, frontier, fanout, draw_seed(rng))
            else:
                counts, drawn = dgs.draw(edge_type, relation, frontier, fanout, rng)
            nodes[src], edge_src = extend_table(nodes[src], relation.indices[drawn], scratch[src], num_nodes[src])
            edge_dst = start + np.repeat(np.arange(frontier.shape[0], dtype=np.int64), counts)
            for piece, values in zip(pieces[edge_type], (edge_src, edge_dst, drawn)):
                piece.append(values)
        for t in num_nodes:
            added[t].append(int(nodes[t].shape[0]) - ends[t])
    joined = {r: [np.concatenate([NONE, *piece]) for piece in hops] for r, hops in pieces.items()}
    return HeteroHops(
        nodes,
        {r: np.stack(joined[r][:2]) for r in relations},
        {r: joined[r][2] for r in relations},
        added,
        {r: [int(e.shape[0]) for e in hops[0]] for r, hops in pieces.items()},
    )


@dataclass
class TypedDGS:
    r"""DGS's draws on a typed graph (see the module's description): each node type's owners and
    node mask, the rule applied per relation with the mask of its source type.

    Until :meth:`set_masks` the node mask of every type is uniform (every remote node eligible, with
    equal weight): the count rule alone moves draws to local neighbours.

    Args:
        owner: per node type, each node's part (``[N_t]``, typed ids).
        part: this worker's part.
        epsilon: :math:`\epsilon`, the remote draws dropped per node as a share of the fanout, in [0, 1].
        rule: ``keep-local`` (every local neighbour) or ``split`` (:math:`k - r_v` of them).

    Raises:
        SamplingError: ``epsilon`` or ``rule`` out of range.
    """

    owner: dict[str, np.ndarray]
    part: int
    epsilon: float = EPSILON
    rule: str = RULES[0]

    def __post_init__(self) -> None:
        check_rule(self.epsilon, self.rule)
        self.masks: dict[str, DGSMasks] | None = None
        self._node_prob = {t: np.ones(owner.shape[0]) for t, owner in self.owner.items()}

    def set_masks(self, masks: dict[str, DGSMasks]) -> None:
        """Use ``masks`` (one :class:`~commgraph.sample.dgs.DGSMasks` per node type, its
        ``node_prob`` over the type's nodes) from the next batch on.

        Raises:
            SamplingError: a node type missed or unknown, or a mask of another length than its type.
        """
        if set(masks) != set(self.owner):
            raise SamplingError(
                f"DGS's masks must name every node type once ({', '.join(self.owner)}); got {', '.join(masks)}"
            )
        for t, mask in masks.items():
            if mask.node_prob.shape != self.owner[t].shape:
                raise SamplingError(
                    f"node type {t!r}'s node mask has shape {mask.node_prob.shape}, expected {self.owner[t].shape}"
                )
        self.masks = masks
        self._node_prob = {t: np.asarray(mask.node_prob, dtype=np.float64) for t, mask in masks.items()}

    def draw(
        self, edge_type: EdgeType, relation: Relation, rows: np.ndarray, fanout: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """A hop's draws over ``relation`` for its target type's ``rows``: per-row counts and the
        drawn edges' positions in the relation's CSR."""
        src = edge_type[0]
        rule = DGSRule(self.owner[src], self.part, self._node_prob[src], self.epsilon, self.rule)
        return rule.draw(relation.indptr, relation.indices, rows, fanout, rng)
