"""commgraph: communication-efficient distributed training of graph neural networks."""

__version__ = "0.1.0"
