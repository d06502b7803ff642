"""Prediction: configs, offline predictors, dataset predictors, export."""
from .base import OfflinePredictor
from .config import PredictConfig
from .dataset import SimpleDatasetPredictor
from .export import ModelExporter

__all__ = ["PredictConfig", "OfflinePredictor", "SimpleDatasetPredictor", "ModelExporter"]
