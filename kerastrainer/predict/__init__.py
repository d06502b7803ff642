"""Prediction: configs, offline predictors, dataset predictors, export."""
from .base import OfflinePredictor
from .config import PredictConfig
from .dataset import SimpleDatasetPredictor
from .export import ModelExporter
from .feedfree import FeedfreePredictor

__all__ = ["PredictConfig", "OfflinePredictor", "SimpleDatasetPredictor", "ModelExporter", "FeedfreePredictor"]
