r"""Heterogeneous neighbour sampling: per relation :math:`r`, hop :math:`h` draws, for each node of
:math:`r`'s target type that hop :math:`h - 1` added (the seeds at hop 1), :math:`\min(k_{r,h},
d^r_v)` of its :math:`d^r_v` in-neighbours over :math:`r` uniformly without replacement (all of them
at :math:`k_{r,h} = -1`); a node is expanded once, at the hop that added it, through every relation
into its type, and a type's new nodes are numbered in order of first draw, as pyg-lib's
``hetero_neighbor_sample`` numbers them (:func:`sample_hetero_hops`).

It samples each relation's in-edge CSR over typed ids (:class:`Relation`) through the samplers'
keyed kernel (:func:`commgraph.sample.keyed.keyed_slots`) and table extension
(:func:`commgraph.sample.base.extend_table`). The bridge's loaders build the relations of a
``HeteroData`` (:mod:`commgraph.pyg.hetero_loader`); :class:`TypedRelations` reads them from a
typed partition set for the built-in sampled R-GCN (:mod:`commgraph.train.rgcn_sampled`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commgraph.partition.store import PartitionSet, owned_edges
from commgraph.sample.base import Scratch, draw_seed, extend_table
from commgraph.sample.keyed import keyed_slots

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
) -> HeteroHops:
    """PyG's heterogeneous neighbour sampling from ``seeds`` (distinct ids per node type, of one
    type or several): hop ``h`` draws ``fanouts[r][h]`` in-neighbours over each relation ``r`` (all
    with -1) of each node of ``r``'s target type that hop ``h - 1`` added."""
    nodes = {t: seeds.get(t, NONE) for t in num_nodes}
    added = {t: [int(nodes[t].shape[0])] for t in num_nodes}
    pieces = {r: ([], [], []) for r in relations}  # per relation: each hop's sources, targets, slots
    for hop in range(len(next(iter(fanouts.values()), []))):
        ends = {t: int(nodes[t].shape[0]) for t in num_nodes}  # the frontier: what the last hop added
        for edge_type, relation in relations.items():
            src, _, dst = edge_type
            start = ends[dst] - added[dst][-1]
            frontier = nodes[dst][start : ends[dst]]
            counts, drawn = keyed_slots(relation.indptr, frontier, frontier, fanouts[edge_type][hop], draw_seed(rng))
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
