"""Predict over a whole DataFlow."""
from __future__ import annotations

from typing import Iterator

from tqdm import tqdm

from ..utils.tf1_only import tf1_only_class
from .base import OfflinePredictor
from .config import PredictConfig

__all__ = ["DatasetPredictorBase", "SimpleDatasetPredictor", "MultiProcessDatasetPredictor"]


class DatasetPredictorBase:
    """Base class of predictors over a DataFlow: ``get_result()`` yields the outputs of each
    datapoint; ``get_all_result()`` lists them.

    Example::

        class Mine(DatasetPredictorBase):
            def get_result(self):
                for dp in self.dataset: yield self.predictor(*dp)
    """

    def __init__(self, config: PredictConfig, dataset):
        self.config = config
        self.dataset = dataset

    def get_result(self) -> Iterator[list]:
        raise NotImplementedError(f"{type(self).__name__} must implement get_result()")

    def get_all_result(self) -> list:
        return list(self.get_result())


MultiProcessDatasetPredictor = tf1_only_class(
    "MultiProcessDatasetPredictor", __name__,
    "a TensorFlow 2 runtime cannot be forked into predictor processes",
    "Use SimpleDatasetPredictor (one process; on several GPUs, DataParallelOfflinePredictor), or "
    "start one process per GPU yourself, each with its own SimpleDatasetPredictor over a shard "
    "of the data (dataflow.shard_dataflow).", base=DatasetPredictorBase)


class SimpleDatasetPredictor(DatasetPredictorBase):
    """Run an :class:`OfflinePredictor` on every datapoint of a DataFlow.

    Each datapoint gives the inputs, in the order of ``config.input_names`` (a list
    datapoint) or by name (a dict datapoint).

    Example::

        pred = SimpleDatasetPredictor(config, BatchData(df_test, 128))
        for prob, in pred.get_result():
            ...
    """

    def __init__(self, config: PredictConfig, dataset):
        super().__init__(config, dataset)
        self.predictor = OfflinePredictor(config)
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
