"""The epoch's logs of a Keras model trained by its ``train_step``: its metrics, as
``keras.Model.fit`` reports them.

Keras's step updates stateful metrics (compile's loss tracker and metrics, a step's own trackers,
the metrics a layer updates in its ``call``: keras-io's endpoint layer); ``fit`` resets them at the
start of each epoch and logs their results at its end. :class:`ModelMetricLogs` does the same in
kerastrainer's loop, before validation resets and runs them again; the results are read across
every replica and worker (a metric's variables sum their parts when read).

Example (what ``KerasModel.fit`` does)::

    reader = ModelMetricLogs(model)     # before the validation callbacks
    KerasCallback(history, model, extra_logs=reader.logs)
"""
from __future__ import annotations

from typing import Dict

import keras
import numpy as np

from ..callbacks.base import Callback

__all__ = ["ModelMetricLogs"]


def _results(metric) -> Dict[str, float]:
    value = metric.result()
    if isinstance(value, dict):
        return {str(k): float(np.asarray(v)) for k, v in value.items()}
    return {metric.name: float(np.asarray(value))}


class ModelMetricLogs(Callback):
    """Reset ``model.metrics`` at each epoch's start; their results at its end are the epoch's logs
    when they name what the step returns; otherwise (a step returning other values) the last step's
    values stay (see the module doc). Runs on every worker.

    Example::

        reader = ModelMetricLogs(model)
        KerasCallback(history, model, extra_logs=reader.logs)
    """

    _chief_only = False

    def __init__(self, model: keras.Model):
        self.model = model
        self.metrics = []
        self._logs: Dict[str, float] = {}

    def logs(self) -> Dict[str, float]:
        """The results read at the end of the last epoch."""
        return dict(self._logs)

    def _read(self) -> Dict[str, float]:
        logs: Dict[str, float] = {}
        for m in self.metrics:
            logs.update(_results(m))
        return logs

    def _before_epoch(self):
        # the step's first trace makes compile's metrics: read the list each epoch
        self.metrics = list(self.model.metrics)
        for m in self.metrics:
            m.reset_state()
        self._logs = {}

    def _trigger_epoch(self):
        self.metrics = list(self.model.metrics)
        logs = self._read()
        step = {k for k in (self.trainer.last_step_outputs or {}) if not k.startswith("_")}
        self._logs = logs if set(logs) == step else {}
