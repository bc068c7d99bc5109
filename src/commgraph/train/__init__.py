"""Full-graph hybrid-parallel training (G3): schedules, executors, the trainer, checkpoints. Its
names load on first use (:mod:`commgraph.lazy`): the options (:mod:`commgraph.train.config`) do not
import torch."""

from commgraph.lazy import exports

__all__ = ["EXCHANGES", "EpochRecord", "TrainConfig", "TrainResult", "Trainer", "train_worker"]

__getattr__ = exports(
    __name__,
    {
        "TrainConfig": "config",
        "EXCHANGES": "config",
        "EpochRecord": "trainer",
        "Trainer": "trainer",
        "TrainResult": "trainer",
        "train_worker": "trainer",
    },
)
