"""Metrics owned by the layers of a Keras model (keras-io's endpoint-layer pattern), reported as
``keras.Model.fit`` reports them.

A layer may hold a Keras metric and update it in its ``call`` (``self.accuracy_fn.update_state(
targets, probs)``); ``keras.Model.metrics`` lists it beside compile's, and ``fit`` logs its result
at each epoch's end. In kerastrainer's training step the model's call updates the metric's state
as under ``fit`` (its variables are placed on the trainer's strategy with the model's); the
:class:`LayerMetricLogs` callback resets them at each epoch's start and reads their results at the
epoch's end, before validation runs, for History and the Keras callbacks. Their ``val_`` values
come from validating with Keras's own ``test_step`` (``KerasModel.fit`` does so for such a model on
one worker; on several it says once that they have none).

Example (what ``KerasModel.fit`` does)::

    metrics = layer_metrics(model)
    logs = LayerMetricLogs(metrics)     # before the validation callbacks
    KerasCallback(history, model, extra_logs=logs.logs)
"""
from __future__ import annotations

from typing import Dict, List

import keras
import numpy as np

from ..callbacks.base import Callback

__all__ = ["layer_metrics", "layer_metric_variables", "LayerMetricLogs", "ModelMetricLogs"]


def layer_metrics(model: keras.Model) -> List[keras.metrics.Metric]:
    """The metrics the model's layers (and the model itself, as a layer) hold: ``Model.metrics``
    without compile's loss tracker and metrics, which kerastrainer computes itself."""
    try:
        metrics = keras.layers.Layer.metrics.fget(model)
    except (AttributeError, TypeError):
        return []
    seen, out = set(), []
    for m in metrics:
        if isinstance(m, keras.metrics.Metric) and id(m) not in seen:
            seen.add(id(m))
            out.append(m)
    return out


def layer_metric_variables(model: keras.Model) -> list:
    """The state variables of :func:`layer_metrics` (placed on the trainer's strategy and back)."""
    return [v for m in layer_metrics(model) for v in m.variables]


def _results(metric) -> Dict[str, float]:
    value = metric.result()
    if isinstance(value, dict):
        return {str(k): float(np.asarray(v)) for k, v in value.items()}
    return {metric.name: float(np.asarray(value))}


class LayerMetricLogs(Callback):
    """Reset the layers' metrics at each epoch's start; their results at its end (see the module doc).
    Runs on every worker (a metric's variables sum every replica's and worker's part when read)."""

    _chief_only = False

    def __init__(self, metrics: List[keras.metrics.Metric]):
        self.metrics = list(metrics)
        self._logs: Dict[str, float] = {}

    def logs(self) -> Dict[str, float]:
        """The results read at the end of the last epoch."""
        return dict(self._logs)

    def _before_epoch(self):
        for m in self.metrics:
            m.reset_state()
        self._logs = {}

    def _read(self) -> Dict[str, float]:
        logs: Dict[str, float] = {}
        for m in self.metrics:
            logs.update(_results(m))
        return logs

    def _trigger_epoch(self):
        self._logs = self._read()


class ModelMetricLogs(LayerMetricLogs):
    """The epoch's logs of a model that runs its own ``train_step``, as ``keras.Model.fit`` makes
    them: every metric of ``model.metrics`` is reset at the epoch's start, and at its end their
    results, read across every replica and worker, are the epoch's logs when they name what the
    step returns; otherwise (a step returning other values) the last step's values stay.

    Example (what ``KerasModel.fit`` does for a model with its own step)::

        reader = ModelMetricLogs(model)
        KerasCallback(history, model, extra_logs=reader.logs)
    """

    def __init__(self, model: keras.Model):
        super().__init__([])
        self.model = model

    def _before_epoch(self):
        # the step's first trace makes compile's metrics: read the list each epoch
        self.metrics = list(self.model.metrics)
        super()._before_epoch()

    def _trigger_epoch(self):
        self.metrics = list(self.model.metrics)
        logs = self._read()
        step = {k for k in (self.trainer.last_step_outputs or {}) if not k.startswith("_")}
        self._logs = logs if set(logs) == step else {}
