"""Sampled evaluation: accuracies by sampled inference, a batch of evaluated nodes at a time.

The full-graph evaluation pass holds every node's hidden rows for a layer; on a graph of
papers100M's size those tables, not the training steps, set the least memory a job needs. Under
``--memory-budget``, sampled training evaluates as GraphSAGE's inference does on large graphs
(Hamilton et al., `"Inductive Representation Learning on Large Graphs"
<https://arxiv.org/abs/1706.02216>`_, 2017; DGL's and PyG's ``NeighborLoader`` evaluation): each
worker predicts its nodes of the training, validation and test splits (every node it owns where
the run writes predictions) in batches of ``--batch-size`` seeds, drawing ``--eval-fanout``
neighbours a hop with :class:`~commgraph.sample.NeighborSampler` on the structure training samples
on, and reading the input rows through training's fetch (the feature cache, peers' files and the
network, as a step reads them). What it holds is one batch's tables, whatever the graph's size.

At fanout ``-1`` a seed's sampled neighbourhood is its whole receptive field, so the predictions
are the full-graph pass's. Every worker runs as many batches as the worker with the most (the
fetch is a collective, as a step's is). The draws come from a generator of their own, keyed by the
run's seed, the rank and the training steps taken so far: evaluating never moves training's draws.
"""

from __future__ import annotations

import numpy as np
import torch

from commgraph.partition.store import owned_positions
from commgraph.runtime.memory import release_free_memory
from commgraph.sample import NeighborSampler
from commgraph.sample.partitioned import PartitionedGraph
from commgraph.train.minibatch import SampledEpochs, epoch_steps
from commgraph.train.predict import SPLITS

EVAL_STREAM = 1  # the evaluation generator's key beside the seed and the rank (training's has none)


class SampledEvaluation:
    """A worker's sampled evaluation, on its :class:`~commgraph.train.minibatch.SampledEpochs`'
    structure and fetch.

    Args:
        epochs: the worker's sampled training (its graph, fetch, owned nodes and step count).
        fanouts: neighbours drawn per node at each hop, the seeds' hop first (-1: all).
        every_node: predict every owned node (for ``--predictions-out``), not only the splits'.
    """

    def __init__(self, epochs: SampledEpochs, fanouts: list[int], every_node: bool = False):
        self.epochs = epochs
        self.sampler = NeighborSampler(epochs.graph, fanouts)
        part = epochs.job.part
        if every_node:
            evaluated = np.ones(epochs.owned.shape[0], bool)
        else:
            evaluated = np.logical_or.reduce([np.asarray(getattr(part, f"{name}_mask"), bool) for name in SPLITS])
        self.nodes = epochs.owned[evaluated]
        world = epochs.world
        counts = epochs.comm.all_gather_object(int(self.nodes.shape[0])) if world.size > 1 else [self.nodes.shape[0]]
        self.steps = epoch_steps(counts, epochs.config.sampling.batch_size) if max(counts) else 0

    def predict(self, model: torch.nn.Module) -> torch.Tensor:
        """The predicted class of each owned node (``-1`` where not evaluated), on the worker's
        device; a collective."""
        epochs = self.epochs
        owned, graph, device = epochs.owned, epochs.graph, epochs.device
        rng = np.random.default_rng([epochs.config.optim.seed, epochs.world.rank, EVAL_STREAM, epochs.iteration])
        predicted = torch.full((owned.shape[0],), -1, dtype=torch.int64)
        model.eval()
        with torch.no_grad():
            for seeds in np.array_split(self.nodes, self.steps) if self.steps else []:
                batch = self.sampler.sample(seeds, rng) if seeds.size else None
                if batch is None and isinstance(graph, PartitionedGraph):  # the others' hops still need us
                    graph.idle(len(self.sampler.fanouts))
                fetched = epochs.fetch.step(batch)
                if batch is None:
                    epochs.fetch.idle(fetched)
                    continue
                logits = epochs.fetch.forward(model, fetched, batch.blocks(graph, device))
                predicted[torch.from_numpy(owned_positions(owned, batch.seeds))] = logits.argmax(dim=1).cpu()
        release_free_memory()
        return predicted.to(device)
