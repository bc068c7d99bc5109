"""``Block``: the bipartite piece of graph one layer computes on, as DGL calls it.

Rows of ``x_src`` are the block's source nodes, destination nodes first (so ``x_src[:num_dst]`` are
the destinations' own inputs). ``edge_index`` holds every in-edge of every destination, so any
aggregation over a destination's neighbourhood sees all of it, whichever worker or bin computes it.
Degrees are those of the whole graph: normalisations (GCN) then equal the single-graph ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Block:
    num_src: int
    num_dst: int
    edge_index: torch.Tensor  # (2, E): row 0 indexes sources, row 1 destinations
    src_degree: torch.Tensor  # global in-degree of each source (float)
    cache: dict = field(default_factory=dict)  # per-layer-type derived tensors (self loops, weights)

    def with_self_loops(self) -> torch.Tensor:
        """Edges plus one self loop per destination (the graphs we load carry none)."""
        if "loops" not in self.cache:
            loop = torch.arange(self.num_dst, device=self.edge_index.device)
            self.cache["loops"] = torch.cat([self.edge_index, torch.stack([loop, loop])], dim=1)
        return self.cache["loops"]

    def to(self, device: torch.device) -> Block:
        return Block(self.num_src, self.num_dst, self.edge_index.to(device), self.src_degree.to(device))
