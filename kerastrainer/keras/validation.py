"""Validation of a Keras model during ``KerasModel.fit``: the model's ``test_step`` over the
validation data at the end of an epoch, as ``keras.Model.fit(validation_data=...)`` runs it.

:class:`KerasValidation` calls an evaluation (``KerasModel``'s: Keras's ``test_step`` and metrics
over the validation data, each batch weighted as Keras weights it) with the trainer's strategy,
and puts every result into the monitors as ``val_<name>``, where ``KerasCallback`` (History,
``EarlyStopping``...) reads it. It runs on every worker (each validates its replicas' parts of every
batch; the metrics are read across them) between epochs, on the trained variables; the evaluation
resets the metrics, so the training logs are read before it (``ModelMetricLogs`` comes first).

Left to others: the training step (:mod:`.model_desc`), the evaluation itself and the data forms
(:mod:`.evaluation`).

Example (what ``KerasModel.fit`` does)::

    cbs = [ModelMetricLogs(model), KerasValidation(lambda strategy: km._evaluate_compiled(val, io, None, strategy))]
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

import keras
import tensorflow as tf

from ..callbacks.base import Callback

__all__ = ["KerasValidation"]


class KerasValidation(Callback):
    """Run ``evaluate(strategy) -> {name: value}`` at each epoch's end; put ``val_<name>`` (see the
    module doc).

    Example::

        KerasValidation(lambda strategy: {'loss': 0.5})   # puts val_loss = 0.5 each epoch
    """

    _chief_only = False

    def __init__(self, evaluate: Callable[[tf.distribute.Strategy], Dict[str, float]],
                 model: Optional[keras.Model] = None):
        self._evaluate = evaluate
        self.model = model

    def _before_train(self):
        if self.model is not None:
            # the trainer moved the model's variables: a test function Keras traced before reads the old ones
            self.model.test_function = None

    def _trigger_epoch(self):
        logs = self._evaluate(self.trainer.strategy)
        for name, value in logs.items():
            self.trainer.monitors.put_scalar(f"val_{name}", float(value))

    def __str__(self):
        return "KerasValidation"
