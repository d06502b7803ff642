"""What every ModelDesc of a whole Keras model shares: the model, its variables moved onto the
trainer's strategy before anything is built, its optimizers re-indexed after the move, and
checkpoints that save the model under ``keras_model``.

A desc (:mod:`.model_desc`: the model's own ``train_step``) says which variables are its beside the
model's (:meth:`KerasDescBase.state_variables`) and which optimizers it trains with.

Example (a desc for a model whose optimizer is ``opt``)::

    class Desc(KerasDescBase):
        def keras_optimizers(self):
            return [opt]
        def state_variables(self):
            return list(opt.variables)
"""
from __future__ import annotations

from typing import List

import keras
import tensorflow as tf

from ..tfutils.tower_func import ModelVariables
from ..train.model_desc import ModelDesc
from .variables import place_on_strategy, rekey_optimizer, unique_variables

__all__ = ["KerasDescBase"]


class KerasDescBase(ModelDesc):
    """A ModelDesc around a ``keras.Model`` (see the module doc)."""

    def __init__(self, model: keras.Model):
        self._keras_model = model

    @property
    def keras_model(self) -> keras.Model:
        return self._keras_model

    def keras_optimizers(self) -> List[keras.optimizers.Optimizer]:
        """The Keras optimizers the step updates with."""
        raise NotImplementedError

    def state_variables(self) -> list:
        """The optimizers' and metrics' variables beside the model's (moved with it, saved with it)."""
        raise NotImplementedError

    def all_variables(self) -> list:
        """The model's variables and :meth:`state_variables`, each once."""
        return unique_variables(list(self._keras_model.variables) + self.state_variables())

    def get_tower_function(self):
        # called by the trainer inside its strategy's scope, before it builds anything: the
        # variables move onto the strategy and the optimizers update through it (they captured the
        # strategy of their creation)
        place_on_strategy(self.all_variables(), tf.distribute.get_strategy())
        for opt in self.keras_optimizers():
            rekey_optimizer(opt)
        return super().get_tower_function()

    def _attribute_weights(self) -> list:
        # the Keras model's and its step's state: saved as theirs, never as the tower's
        return self.all_variables()

    def get_model_variables(self) -> ModelVariables:
        mv = self.__dict__.get("_model_variables")
        if mv is None:
            mv = ModelVariables(self.layer_store, {"keras_model": self._keras_model})
            self.__dict__["_model_variables"] = mv
        return mv
