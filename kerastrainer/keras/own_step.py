"""A Keras model that defines its own training step: its class overrides ``train_step`` (keras-io's
"customizing what happens in fit": a GAN with two optimizers, a loss computed by hand), or the
``compute_loss`` / ``compute_metrics`` that Keras's own ``train_step`` calls.

This module owns running such a step in a kerastrainer trainer. ``KerasModel`` hands the model
over as :class:`KerasOwnStepDesc`, a ModelDesc whose tower is one call of the model's
``train_step`` on the replica's batch; the trainer runs it each step inside its strategy (several
steps per call, every replica), applies no update of its own (the step's optimizers do, as in
``keras.Model.fit``: each optimizer sums the replicas' gradients; a Keras loss is scaled by the
replica's share of the global batch, 1/N for an even split as Keras divides it), reports the dict
the step returns, and saves every optimizer the model holds (``optimizer/<attribute>/...``);
``ModelMetricLogs`` resets the model's metrics at the start of each epoch and reads them at its
end, as ``fit`` does. Data reach ``train_step`` in the structure the data have (``(x, y)``,
``(x, y, sample_weight)``; for ``fit(x)`` without ``y``, ``x`` itself where Keras hands over ``x``:
an array or a dict, not ``(x,)``), each replica its part of the global batch.

Left to others: the standard path (compile's loss and metrics computed by kerastrainer:
:mod:`.adapter`), the data forms (:mod:`.data`), placing variables on a strategy
(:mod:`.variables`).

Example (what ``KerasModel.fit`` does for such a model)::

    desc = KerasOwnStepDesc(gan, data.first)
    launch_train_with_config(TrainConfig(model=desc, data=source, ...), trainer)
"""
from __future__ import annotations

from typing import Dict, List

import keras
import numpy as np
import tensorflow as tf

from .._internals import clear_model_losses, keras_losses_scaled_by
from ..tfutils.objective import OwnUpdates
from ..tfutils.tower_func import ModelVariables
from ..utils import logger
from .data import SHARE_SPEC, SpecSample
from .desc_base import KerasDescBase
from .variables import unique_variables

__all__ = ["OWN_STEP_METHODS", "runs_own_step", "overridden", "KerasOwnStepDesc", "model_optimizers"]

# keras.Model methods whose override changes what a training step computes
OWN_STEP_METHODS = ("train_step", "compute_loss", "compute_metrics")


def overridden(model: keras.Model, method: str) -> bool:
    """``type(model)`` defines ``method`` itself (not keras.Model's)."""
    return getattr(type(model), method, None) is not getattr(keras.Model, method, None)


def runs_own_step(model: keras.Model) -> bool:
    """The model's step is not compile()'s loss and metrics alone: run its ``train_step``."""
    return any(overridden(model, m) for m in OWN_STEP_METHODS)


def model_optimizers(model: keras.Model) -> Dict[str, keras.optimizers.Optimizer]:
    """The Keras optimizers the model holds, by attribute: ``optimizer`` (compile's) first, then
    those a custom ``compile`` stored (``d_optimizer``, ``g_optimizer``...)."""
    out: Dict[str, keras.optimizers.Optimizer] = {}
    if isinstance(getattr(model, "optimizer", None), keras.optimizers.Optimizer):
        out["optimizer"] = model.optimizer
    for name, value in sorted(vars(model).items()):
        if isinstance(value, keras.optimizers.Optimizer) and not name.startswith("_") and \
                all(value is not o for o in out.values()):
            out[name] = value
    return out


def _leaf_spec(leaf, index: int) -> tf.TensorSpec:
    if isinstance(leaf, SpecSample):   # a tf.data.Dataset's component: its own spec, unknown sizes kept
        return tf.TensorSpec((None,) + leaf.shape[1:], leaf.dtype, name=f"data_{index}")
    arr = np.asarray(leaf)
    dtype = tf.float32 if arr.dtype == np.float64 else tf.as_dtype(arr.dtype)   # Keras's floatx, as fit
    if arr.ndim == 0:
        raise ValueError(f"KerasModel: component {index} of the data is a scalar; every component of a batch "
                         "needs the batch dimension first.")
    return tf.TensorSpec((None,) + arr.shape[1:], dtype, name=f"data_{index}")


def _as_tuple(structure):
    # DataFlow datapoints are lists; Keras hands train_step tuples
    return tuple(structure) if isinstance(structure, list) else structure


def _flat_logs(logs: dict) -> dict:
    """Nested dicts merged into one, as ``keras.Model.fit`` logs them (``{m.name: m.result()}`` over
    ``self.metrics`` nests compile's metrics: ``{'loss': ..., 'compile_metrics': {'mae': ...}}``)."""
    out = {}
    for name, value in logs.items():
        if isinstance(value, dict):
            out.update(_flat_logs(value))
        else:
            out[name] = value
    return out


class KerasOwnStepDesc(KerasDescBase):
    """The ModelDesc of a Keras model that runs its own ``train_step`` (see the module doc).

    Args:
        model: the ``keras.Model`` (compiled with its own ``compile``), built.
        first: one batch of the data, in the structure ``train_step`` receives.
    """

    def __init__(self, model: keras.Model, first):
        super().__init__(model)
        self._structure = _as_tuple(tf.nest.map_structure(lambda a: 0, first))
        self._specs = [_leaf_spec(a, i) for i, a in enumerate(tf.nest.flatten(first))]
        self._dropped: List[str] = []
        if not model_optimizers(model):
            raise ValueError(f"KerasModel: {type(model).__name__} runs its own train_step but holds no Keras "
                             "optimizer: call KerasModel.compile(...) (it passes its arguments to the model's "
                             "compile) before fit.")

    def inputs(self) -> List[tf.TensorSpec]:
        # each replica's part ends with its share of the global batch (KerasData.make_input): the
        # step's Keras losses are scaled by it (_replica_step)
        return list(self._specs) + [SHARE_SPEC]

    def flatten(self, datapoint) -> list:
        """The flat components of one batch (the order of :meth:`inputs`)."""
        return tf.nest.flatten(datapoint)

    def build_graph(self, *tensors):
        data = tf.nest.pack_sequence_as(self._structure, list(tensors[:len(self._specs)]))
        share = tensors[len(self._specs)]
        strategy = tf.distribute.get_strategy()
        if tf.distribute.in_cross_replica_context() and strategy.num_replicas_in_sync > 1:
            # the trainer's first trace (it makes the variables) runs in cross-replica context, where
            # a step's updates of mirrored variables cannot be written: trace the step in a replica
            logs = strategy.run(self._replica_step, args=(data, share))
            logs = tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], logs)
        else:
            logs = self._replica_step(data, share)
        if not isinstance(logs, dict):
            raise TypeError(f"{type(self._keras_model).__name__}.train_step returned a {type(logs).__name__}; "
                            "Keras's contract is a dict of metric names to values.")
        stats = {}
        for name, value in _flat_logs(logs).items():
            value = tf.convert_to_tensor(value)
            if value.shape.rank == 0 and (value.dtype.is_floating or value.dtype.is_integer):
                stats[str(name)] = tf.cast(value, tf.float32)
            elif name not in self._dropped:
                self._dropped.append(name)
                logger.warning("KerasModel: %s.train_step returned '%s' of shape %s; only scalars are reported "
                               "(History, monitors), it is left out.", type(self._keras_model).__name__, name,
                               value.shape)
        if not stats:
            raise ValueError(f"{type(self._keras_model).__name__}.train_step returned no scalar to report "
                             f"({sorted(logs)}).")
        return stats

    def _replica_step(self, data, share):
        # Keras divides a mean loss by the number of replicas R; by R / share instead (share: the
        # replica's part of the global batch times R over its size, 1 for an even split), replicas
        # of an unevenly split batch (47 and 46 samples of 93) sum to the whole batch's gradient
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        # Keras clears add_loss losses only when the model is the outermost call; in the tower it is
        # not, so the losses of the last trace (another graph) would be read by compute_loss
        clear_model_losses(self._keras_model)
        with keras_losses_scaled_by(share / replicas if replicas > 1 else 1):
            return self._keras_model.train_step(data)

    def optimizer(self):
        return OwnUpdates(self.get_keras_optimizers())

    def get_keras_optimizers(self) -> Dict[str, keras.optimizers.Optimizer]:
        return model_optimizers(self._keras_model)

    def get_optimizer(self):
        return self.optimizer()

    def keras_optimizers(self) -> list:
        return list(model_optimizers(self._keras_model).values())

    def get_model_variables(self) -> ModelVariables:
        mv = super().get_model_variables()
        tower = self.__dict__.get("_tower_function")
        if tower is not None:
            # the step's optimizers and metrics made their variables while it was traced: theirs, not
            # the model's
            tower.adopt_variables(list(self._keras_model.variables) + self.state_variables())
        return mv

    def state_variables(self) -> list:
        """The step's optimizers' and metrics' variables (what goes off the strategy after training)."""
        model = self._keras_model
        return unique_variables([v for o in model_optimizers(model).values() for v in getattr(o, "variables", [])]
                                + list(getattr(model, "metrics_variables", [])))
