"""tensorpack's path of the custom-trainer bases (``tensorpack.train.tower``): an alias module;
they live in :mod:`kerastrainer.train.tower_trainer`."""
from .tower_trainer import SingleCostTrainer, TowerTrainer

__all__ = ["TowerTrainer", "SingleCostTrainer"]
