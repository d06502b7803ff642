"""Validation of a Keras model that runs its own step: the model's ``test_step`` over the validation
data at the end of an epoch, as ``keras.Model.fit(validation_data=...)`` runs it.

:class:`OwnStepValidation` calls the model's own ``evaluate`` (its ``test_step``, its metrics, each
batch weighted as Keras weights it) on the validation data, and puts every result into the
monitors as ``val_<name>``, where ``KerasCallback`` (History, ``EarlyStopping``...) reads it. It
runs in the training process between epochs, on the trained variables; the step's metrics are
reset by the evaluation, so the training logs are read before it (``ModelMetricLogs`` comes first).

Left to others: the training step (:mod:`.own_step`), the data forms (:mod:`.evaluation`).

Example (what ``KerasModel.fit`` does)::

    cbs = [ModelMetricLogs(model), OwnStepValidation(model, evaluate, (x_val, y_val), steps=None)]
"""
from __future__ import annotations

from typing import Callable, Optional

import keras

from ..callbacks.base import Callback

__all__ = ["OwnStepValidation"]


class OwnStepValidation(Callback):
    """Run the model's ``test_step`` over ``data`` at each epoch's end (see the module doc).

    Args:
        model: the ``keras.Model``.
        evaluate: ``evaluate(data, batch_size, steps) -> {name: value}`` (the model's own evaluate on
            any data form ``KerasModel.evaluate`` takes).
        data: the validation data.
        batch_size: the batch of numpy data.
        steps: validate on the first ``steps`` batches (a generator reads on each epoch).
    """

    _chief_only = False

    def __init__(self, model: keras.Model, evaluate: Callable, data, batch_size: Optional[int] = None,
                 steps: Optional[int] = None):
        self.model = model
        self._evaluate = evaluate
        self._data = data
        self._batch_size = batch_size
        self._steps = steps

    def _before_train(self):
        # the trainer moved the model's variables: a test function traced before reads the old ones
        self.model.test_function = None

    def _trigger_epoch(self):
        logs = self._evaluate(self._data, self._batch_size, self._steps)
        for name, value in logs.items():
            self.trainer.monitors.put_scalar(f"val_{name}", float(value))

    def __str__(self):
        return "OwnStepValidation"
