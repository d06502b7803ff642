"""``AsKerasCallback``: the Keras callback protocol of :class:`~kerastrainer.lms.LMS`.

Owns what LMS does in ``keras.Model.fit/evaluate/predict(callbacks=[lms])``:
``set_model`` applies LMS before ``fit`` traces its train function (one traced
earlier without LMS is dropped so that ``fit`` traces it again); ``set_params``
notes ``fit``'s batch size for 'auto' unless the trainer gave one; after the first
batch, warn when nothing was selected; ``on_train_end`` undoes it, and so do
``on_test_end`` / ``on_predict_end`` of an ``evaluate`` / ``predict`` run alone.

It leaves the work to the class that mixes it in (:class:`~kerastrainer.lms.LMS`),
which provides ``apply(model)``, ``applied_to(model)``, ``remove()``,
``check_selection()`` and ``note_data_batch(batch, replace=)``; the kerastrainer
callback protocol is ``as_trainer_callback.py``.

Example::

    keras_model.fit(x, y, callbacks=[LMS(swapout_threshold=2, swapin_ahead=1, swapin_groupby=1)])
"""
from __future__ import annotations

import keras

__all__ = ["AsKerasCallback"]

KerasCallback = keras.callbacks.Callback


class AsKerasCallback(KerasCallback):
    """A Keras callback that installs LMS on the model ``fit`` trains, and removes it after."""

    _in_fit = False  # between Keras's on_train_begin and on_train_end

    def set_model(self, model) -> None:
        """Keras: install LMS on the model fit trains (before its train function is traced)."""
        KerasCallback.set_model(self, model)
        if not self.applied_to(model):
            if getattr(model, "train_function", None) is not None:
                model.train_function = None  # traced without LMS: make fit trace it again
            self.apply(model)

    def set_params(self, params) -> None:
        KerasCallback.set_params(self, params)
        if params and params.get("batch_size"):
            self.note_data_batch(int(params["batch_size"]), replace=False)

    def on_train_begin(self, logs=None) -> None:
        self._in_fit = True

    def on_train_batch_end(self, batch, logs=None) -> None:
        self.check_selection()

    def on_train_end(self, logs=None) -> None:
        self._in_fit = False
        self.remove()

    def on_test_end(self, logs=None) -> None:
        if not self._in_fit:  # evaluate(callbacks=[lms]) alone: undo set_model
            self.remove()

    def on_predict_end(self, logs=None) -> None:
        if not self._in_fit:
            self.remove()
