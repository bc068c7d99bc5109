"""Full-graph hybrid-parallel training (G3): schedules, executors, the trainer, checkpoints."""

from commgraph.train.config import TrainConfig
from commgraph.train.executor import EXCHANGES
from commgraph.train.trainer import EpochRecord, Trainer, TrainResult, train_worker

__all__ = ["EXCHANGES", "EpochRecord", "TrainConfig", "TrainResult", "Trainer", "train_worker"]
