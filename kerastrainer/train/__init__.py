"""Training: model descriptions, configs, trainers and the launcher."""
from .base import StopTraining, Trainer, TrainingTerminated
from .config import DEFAULT_CALLBACKS, DEFAULT_MONITORS, AutoResumeTrainConfig, TrainConfig
from .interface import launch_train_with_config
from .model_desc import ModelDesc, ModelDescBase
from ..tfutils.objective import Objective, OwnUpdates
from .trainers import (NoOpTrainer, SimpleTrainer, SyncMultiGPUTrainer, SyncMultiGPUTrainerParameterServer,
                       SyncMultiGPUTrainerReplicated, QueueInputTrainer, AsyncMultiGPUTrainer,
                       DistributedTrainerParameterServer, DistributedTrainerReplicated, BytePSTrainer)
from .multiworker import MultiWorkerTrainer
from .horovod import HorovodTrainer
from .tower_trainer import SingleCostTrainer, TowerTrainer

__all__ = ["Trainer", "StopTraining", "TrainingTerminated", "TrainConfig", "AutoResumeTrainConfig", "DEFAULT_CALLBACKS",
           "DEFAULT_MONITORS", "launch_train_with_config", "ModelDesc", "ModelDescBase", "SimpleTrainer",
           "SyncMultiGPUTrainer", "SyncMultiGPUTrainerReplicated", "SyncMultiGPUTrainerParameterServer",
           "MultiWorkerTrainer", "HorovodTrainer", "NoOpTrainer", "Objective", "OwnUpdates",
           "TowerTrainer", "SingleCostTrainer", "QueueInputTrainer", "AsyncMultiGPUTrainer",
           "DistributedTrainerParameterServer", "DistributedTrainerReplicated", "BytePSTrainer"]
