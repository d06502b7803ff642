"""Prediction: configs, offline predictors, dataset predictors, export."""
from .base import OfflinePredictor, OnlinePredictor, PredictorBase
from .concurrency import MultiThreadAsyncPredictor
from .dataset import DatasetPredictorBase, MultiProcessDatasetPredictor
from .multigpu import DataParallelOfflinePredictor, MultiTowerOfflinePredictor
from .config import PredictConfig
from .dataset import SimpleDatasetPredictor
from .export import ModelExporter
from .feedfree import FeedfreePredictor

__all__ = ["PredictConfig", "OfflinePredictor", "SimpleDatasetPredictor", "ModelExporter", "FeedfreePredictor",
           "PredictorBase", "OnlinePredictor", "MultiThreadAsyncPredictor", "DatasetPredictorBase",
           "MultiProcessDatasetPredictor", "MultiTowerOfflinePredictor", "DataParallelOfflinePredictor"]
