"""Old path of ``NoOpTrainer``, which lives in :mod:`kerastrainer.train.trainers` (tensorpack's home)."""
from .trainers import NoOpTrainer

__all__ = ["NoOpTrainer"]
