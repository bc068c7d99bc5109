"""The evaluation pass's memory in chunks of destinations: max RSS before and after one full-graph
evaluation of a partition set's whole graph as one block (``train.predict.predict``), GraphSAGE
with 3 layers and hidden 256 (random weights), with ``nn.model.EVAL_CHUNK_BYTES`` as given
(bytes; 0: every layer in one piece). The logits' sum is printed, equal for every chunk size.

    python benchmarks/eval_chunk.py CHUNK_BYTES PARTITION_SET
"""

from __future__ import annotations

import resource
import sys
import time

import numpy as np
import torch

from commgraph.nn import GNN
from commgraph.nn import model as model_module
from commgraph.partition import load_partition_set
from commgraph.runtime.memory import keep_freed_memory
from commgraph.train.predict import predict


def max_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def main() -> None:
    keep_freed_memory()  # as a worker runs
    chunk, path = int(sys.argv[1]), sys.argv[2]
    model_module.EVAL_CHUNK_BYTES = chunk if chunk else 1 << 62
    graph = load_partition_set(path).graph()
    graph.features = np.ascontiguousarray(graph.features)
    torch.manual_seed(0)
    model = GNN("sage", graph.features.shape[1], 256, 8, layers=3, dropout=0.5)
    before, started = max_rss_gb(), time.perf_counter()
    logits = predict(model, graph)
    seconds = time.perf_counter() - started
    print(
        f"chunk={chunk} maxrss_before_pass={before:.2f} GB maxrss_after={max_rss_gb():.2f} GB "
        f"pass={seconds:.1f} s checksum={float(logits.double().sum()):.6f}"
    )


if __name__ == "__main__":
    main()
