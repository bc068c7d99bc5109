"""Full-graph hybrid-parallel training (G3): schedules, executors, the trainer, checkpoints."""

from commgraph.train.executor import EXCHANGES
from commgraph.train.trainer import TrainConfig, TrainResult, train_worker

__all__ = ["EXCHANGES", "TrainConfig", "TrainResult", "train_worker"]
