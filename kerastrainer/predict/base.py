"""OfflinePredictor: a trained tower function as a numpy-in, numpy-out callable."""
from __future__ import annotations

from typing import Dict

import tensorflow as tf

from ..tfutils.extensions import launch_contexts
from ..utils.tf1_only import tf1_only_class
from .config import PredictConfig

__all__ = ["PredictorBase", "OnlinePredictor", "OfflinePredictor", "build_model_for_inference"]


class PredictorBase:
    """Base class of predictors: ``predictor(*inputs)`` -> list of output arrays. Subclasses
    implement ``_do_call(inputs)`` (a list of arrays, one per input name).

    Example::

        class Doubler(PredictorBase):
            def _do_call(self, inputs):
                return [inputs[0] * 2]
    """

    def __call__(self, *inputs):
        if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            inputs = tuple(inputs[0])
        return self._do_call(list(inputs))

    def _do_call(self, inputs):
        raise NotImplementedError(f"{type(self).__name__} must implement _do_call(inputs)")


OnlinePredictor = tf1_only_class(
    "OnlinePredictor", __name__, "there is no session whose graph tensors a predictor could run",
    "Use OfflinePredictor(PredictConfig(...)) (weights from a checkpoint or from the trainer's "
    "variables), or trainer.get_predictor(input_names, output_names) inside a callback.",
    base=PredictorBase)


class _InferenceTarget:
    """What SessionInit needs: the model's checkpoint root and its named variables."""

    def __init__(self, model_variables):
        self.model_variables = model_variables
        self.checkpoint = tf.train.Checkpoint(model=model_variables)

    def named_variables(self) -> Dict[str, tf.Variable]:
        return self.model_variables.named_variables()


def build_model_for_inference(model, session_init) -> _InferenceTarget:
    """Create the model's variables (once) and load weights into them."""
    model.get_tower_function().build(require_cost=False)  # an inference-only build_graph returns nothing
    target = _InferenceTarget(model.get_model_variables())
    session_init.init(target)
    return target


class OfflinePredictor(PredictorBase):
    """Run a model's tower in inference mode and fetch tensors by name.

    Call it with one array per input name (or a list of them); it returns a list of
    arrays, one per output name.

    Example::

        pred = OfflinePredictor(PredictConfig(model=Model(), session_init='train_log/mnist',
                                              input_names=['input'], output_names=['prob']))
        prob, = pred(images)
    """

    def __init__(self, config: PredictConfig):
        self.config = config
        with launch_contexts("OfflinePredictor"):   # eager set-up in a program in TF1 graph mode
            self._target = build_model_for_inference(config.model, config.session_init)
            self._fn = config.model.get_tower_function().predict_function(
                config.input_names, config.output_names, is_training=config.is_training)
        self.input_names = config.input_names
        self.output_names = config.output_names

    def __call__(self, *inputs):
        if tf.executing_eagerly():
            return self._fn(*inputs)
        with launch_contexts("OfflinePredictor"):   # a program in TF1 graph mode
            return self._fn(*inputs)
