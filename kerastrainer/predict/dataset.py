"""Predict over a whole DataFlow."""
from __future__ import annotations

from typing import Iterator

from tqdm import tqdm

from .base import OfflinePredictor
from .config import PredictConfig

__all__ = ["SimpleDatasetPredictor"]


class SimpleDatasetPredictor:
    """Run an :class:`OfflinePredictor` on every datapoint of a DataFlow.

    Each datapoint gives the inputs, in the order of ``config.input_names`` (a list
    datapoint) or by name (a dict datapoint).

    Example::

        pred = SimpleDatasetPredictor(config, BatchData(df_test, 128))
        for prob, in pred.get_result():
            ...
    """

    def __init__(self, config: PredictConfig, dataset):
        self.predictor = OfflinePredictor(config)
        self.dataset = dataset
        self.input_names = config.input_names

    def _inputs(self, dp):
        if isinstance(dp, dict):
            return [dp[n] for n in self.input_names]
        return list(dp)[: len(self.input_names)]

    def get_result(self) -> Iterator[list]:
        """Yield the outputs for each datapoint."""
        self.dataset.reset_state()
        try:
            total = len(self.dataset)
        except (NotImplementedError, TypeError):
            total = None
        for dp in tqdm(self.dataset, total=total, leave=False, desc="predict"):
            yield self.predictor(*self._inputs(dp))

    def get_all_result(self) -> list:
        return list(self.get_result())
