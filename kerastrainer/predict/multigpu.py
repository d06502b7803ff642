"""Predictors on several devices (tensorpack's ``predict.multigpu``): one tower per device."""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import tensorflow as tf

from .base import OfflinePredictor, PredictorBase
from .config import PredictConfig

__all__ = ["MultiTowerOfflinePredictor", "DataParallelOfflinePredictor"]


def _devices(towers: Sequence[int]) -> List[str]:
    gpus = tf.config.list_logical_devices("GPU")
    if not gpus:  # no GPU: every tower on the CPU (tensorpack needed GPUs; results are the same)
        return ["/cpu:0" for _ in towers]
    return [f"/gpu:{t}" for t in towers]


class _OnDevice(PredictorBase):
    def __init__(self, predictor: OfflinePredictor, device: str):
        self.predictor, self.device = predictor, device
        self.input_names, self.output_names = predictor.input_names, predictor.output_names

    def _do_call(self, inputs):
        with tf.device(self.device):
            return self.predictor(*inputs)


class MultiTowerOfflinePredictor(PredictorBase):
    """One predictor per tower (``/gpu:<t>`` for t in ``towers``; the CPU where there is no GPU).
    ``get_predictor(n)`` gives the n-th (round robin beyond), ``get_predictors()`` all; calling this
    object runs the first tower.

    Example::

        pred = MultiTowerOfflinePredictor(config, towers=[0, 1])
        out0 = pred.get_predictor(0)(batch_a); out1 = pred.get_predictor(1)(batch_b)
    """

    def __init__(self, config: PredictConfig, towers: Sequence[int]):
        if not towers:
            raise ValueError("MultiTowerOfflinePredictor: give at least one tower")
        self.config = config
        shared = OfflinePredictor(config)  # one copy of the weights; each call runs on its device
        self.predictors = [_OnDevice(shared, d) for d in _devices(towers)]
        self.input_names, self.output_names = shared.input_names, shared.output_names

    def _do_call(self, inputs):
        return self.predictors[0]._do_call(inputs)

    def get_predictor(self, n: int) -> PredictorBase:
        return self.predictors[n % len(self.predictors)]

    def get_predictors(self) -> List[PredictorBase]:
        return list(self.predictors)


class DataParallelOfflinePredictor(PredictorBase):
    """Run several batches at once, one per tower: call it with the inputs of every tower in turn
    (``len(towers) * len(input_names)`` arrays); it returns the outputs of every tower in turn.

    Example::

        pred = DataParallelOfflinePredictor(config, towers=[0, 1])
        prob_a, prob_b = pred(images_a, images_b)     # input_names=['input'], output_names=['prob']
    """

    def __init__(self, config: PredictConfig, towers: Sequence[int]):
        self._multi = MultiTowerOfflinePredictor(config, towers)
        self.input_names, self.output_names = self._multi.input_names, self._multi.output_names

    def _do_call(self, inputs):
        k, n = len(self.input_names), len(self._multi.predictors)
        if len(inputs) != k * n:
            raise ValueError(f"DataParallelOfflinePredictor: expected {k} inputs for each of {n} towers "
                             f"({k * n}), got {len(inputs)}")
        out = []
        for i, p in enumerate(self._multi.predictors):
            out.extend(p._do_call(inputs[i * k:(i + 1) * k]))
        return out
