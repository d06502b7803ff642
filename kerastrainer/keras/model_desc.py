"""KerasModelDesc: a whole Keras model seen by the trainers as a ``ModelDesc`` whose tower is one call
of the model's own ``train_step``.

Every Keras model trains through Keras's step: compile's losses and Keras's stateful metrics for a
model compiled with them, or what a model's class computes when it overrides ``train_step``,
``compute_loss`` or ``compute_metrics`` (keras-io's "customizing what happens in fit": a GAN with
two optimizers). The trainer runs the step inside its strategy (several steps per call, every
replica) and applies no update of its own: the step's optimizers do, as in ``keras.Model.fit``
(each optimizer sums the replicas' gradients; a Keras loss is scaled by the replica's share of the
global batch, 1/N for an even split as Keras divides it). The step's dict is reported each step;
the epoch's logs are the metrics' results read across replicas and workers at its end
(:class:`~kerastrainer.keras.metric_logs.ModelMetricLogs`), as ``fit`` reads them.

The batches reach ``train_step`` in one of two forms:

- **described** (``io=``, a model compiled with compile's loss and metrics): flat
  ``[inputs..., targets..., (weights...)]`` in the model's dtypes (a
  :class:`~kerastrainer.keras.structure.ModelIO`: errors name the input or target at fault, a cast
  that would change a value raises), packed into ``(x, y)`` or ``(x, y, sample_weight)`` in the
  structures the model's inputs and outputs have;
- **as given** (``first=``, a model with its own step): in the structure the data have (``(x, y)``,
  ``(x, y, sample_weight)``, or ``x`` itself for ``fit(x)``), what the step unpacks is its own.

Left to others: the data forms (:mod:`.data`), placing variables on a strategy (:mod:`.variables`),
validation and ``evaluate`` (:mod:`.evaluation`).

Example (what ``KerasModel.fit`` does)::

    desc = KerasModelDesc(model, io=io)            # or KerasModelDesc(gan, first=data.step_first)
    launch_train_with_config(TrainConfig(model=desc, data=source, ...), trainer)
"""
from __future__ import annotations

from typing import Dict, List, Optional

import keras
import numpy as np
import tensorflow as tf

from .._internals import clear_model_losses, compiled_metrics_of, keras_forward_losses_unscaled, keras_losses_scaled_by
from ..tfutils.objective import OwnUpdates
from ..tfutils.tower import get_current_tower_context
from ..tfutils.tower_func import ModelVariables
from ..utils import logger
from .data import SHARE_SPEC, SpecSample
from .desc_base import KerasDescBase
from .structure import ModelIO, _safe_name
from .variables import unique_variables

__all__ = ["KerasModelDesc", "OWN_STEP_METHODS", "runs_own_step", "overridden", "model_optimizers",
           "pack_batch"]

# keras.Model methods whose override changes what a training step computes
OWN_STEP_METHODS = ("train_step", "compute_loss", "compute_metrics")


def overridden(model: keras.Model, method: str) -> bool:
    """``type(model)`` defines ``method`` itself (not keras.Model's)."""
    return getattr(type(model), method, None) is not getattr(keras.Model, method, None)


def runs_own_step(model: keras.Model) -> bool:
    """The model's step is not compile()'s loss and metrics alone: its class computes it."""
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


def _per_output(io: ModelIO, flat: list, filler):
    """One value per output in the structure of the model's outputs (a single tensor, a list, a dict);
    an output with no target gets ``filler`` (its loss and metrics are None: Keras never reads it)."""
    if not flat:
        return None
    by_output = dict(zip(io.target_outputs, flat))
    if len(io.output_names) == 1:
        return flat[0]
    if io.output_kind == "dict":
        return by_output
    return [by_output[o] if o in by_output else filler for o in io.output_names]


def pack_batch(io: ModelIO, flat):
    """``(x, y)`` or ``(x, y, sample_weight)`` as ``keras.Model.fit`` hands them to ``train_step``,
    from the flat ``[inputs..., targets..., (weights...)]`` of ``io``; ``(x,)`` without targets."""
    flat = list(flat)
    n_in, n_t = len(io.input_specs), len(io.target_outputs)
    x = io.pack_inputs(flat[:n_in])
    if not n_t:
        return (x,)   # (a list x alone would read as (x, y))
    filler = tf.zeros(tf.shape(flat[0])[:1], tf.float32)
    y = _per_output(io, flat[n_in:n_in + n_t], filler)
    if not io.weighted:
        return x, y
    return x, y, _per_output(io, flat[n_in + n_t:n_in + 2 * n_t], tf.ones_like(filler))


class KerasModelDesc(KerasDescBase):
    """The ModelDesc of a compiled Keras model: its tower is one ``train_step`` (see the module doc).

    Args:
        model: the ``keras.Model``, compiled (by ``KerasModel.compile``, ``model.compile`` or its own
            ``compile``).
        io: the model's flat inputs and targets: batches are flat ``io.signature`` lists.
        first: or one batch of the data, in the structure ``train_step`` receives.
        global_batch: the batches end with the replica's share of the global batch (``KerasModel``'s
            own data); False: each replica's batch is a whole one (an ``InputSource``, tensorpack's
            contract).

    Example::

        desc = KerasModelDesc(model, io=io)
        launch_train_with_config(TrainConfig(model=desc, data=source, steps_per_epoch=100), SimpleTrainer())
    """

    def __init__(self, model: keras.Model, io: Optional[ModelIO] = None, first=None, global_batch: bool = True):
        super().__init__(model)
        if (io is None) == (first is None):
            raise ValueError("KerasModelDesc needs io= (flat batches described by the model) or first= (a batch "
                             "in the structure train_step receives), one of them.")
        self._io = io
        if io is None:
            self._structure = _as_tuple(tf.nest.map_structure(lambda a: 0, first))
            self._specs = [_leaf_spec(a, i) for i, a in enumerate(tf.nest.flatten(first))]
        else:
            self._structure = None
            self._specs = list(io.signature)
        self._global_batch = bool(global_batch)
        self._dropped: List[str] = []
        if not model_optimizers(model):
            raise ValueError(f"KerasModel: {type(model).__name__} holds no Keras optimizer to train with: call "
                             "KerasModel.compile(...) (or the model's own compile) before fit.")

    @property
    def io(self) -> Optional[ModelIO]:
        return self._io

    def inputs(self) -> List[tf.TensorSpec]:
        return list(self._specs) + ([SHARE_SPEC] if self._global_batch else [])

    def flatten(self, datapoint) -> list:
        """The flat components of one batch as given (the order of :meth:`inputs`)."""
        return tf.nest.flatten(datapoint)

    def pack(self, flat):
        """What ``train_step`` receives, from the flat components of one batch."""
        if self._io is not None:
            return pack_batch(self._io, flat)
        return tf.nest.pack_sequence_as(self._structure, list(flat))

    def build_graph(self, *tensors):
        data = self.pack(tensors[:len(self._specs)])
        ctx = get_current_tower_context()
        if ctx is not None and not ctx.is_training:
            return self._inference_graph(data)
        share = tensors[len(self._specs)] if self._global_batch else None
        strategy = tf.distribute.get_strategy()
        if tf.distribute.in_cross_replica_context() and tf.distribute.has_strategy():
            # the trainer's first trace (it makes the variables) runs in cross-replica context, where
            # a step's updates of mirrored variables cannot be written (nor their gradients taken, one
            # replica too): trace the step in a replica
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

    def _inference_graph(self, data):
        """An inference tower (``InferenceRunner``, predictors): no update; tensors named ``'loss'``,
        each compiled metric of this batch (stateless) and each output ``'<output>_output'``."""
        model = self._keras_model
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        clear_model_losses(model)
        y_pred = model(x, training=False)
        if self._io is not None:
            for name, t in self._io.outputs_by_name(y_pred).items():
                tf.identity(t, name=_safe_name(f"{name}_output"))
        # (a predictor prunes the graph to what it fetches: compile's loss trackers are not updated)
        loss = model.compute_loss(x, y, y_pred, sample_weight, training=False)
        loss = tf.identity(tf.cast(loss, tf.float32), name="loss")
        metrics = compiled_metrics_of(model)
        if y is not None and metrics is not None:
            state = metrics.stateless_update_state(metrics.stateless_reset_state(), y, y_pred, sample_weight)
            for name, value in _flat_logs(metrics.stateless_result(state)).items():
                tf.identity(tf.cast(value, tf.float32), name=_safe_name(name))
        return loss

    def _replica_step(self, data, share):
        # Keras divides a mean loss by the number of replicas R; by R / share instead (share: the
        # replica's part of the global batch times R over its size, 1 for an even split), replicas
        # of an unevenly split batch (47 and 46 samples of 93) sum to the whole batch's gradient
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        # Keras clears add_loss losses only when the model is the outermost call; in the tower it is
        # not, so the losses of the last trace (another graph) would be read by compute_loss
        clear_model_losses(self._keras_model)
        if replicas == 1:
            return self._keras_model.train_step(data)
        scale = share / replicas if share is not None else 1 / replicas
        with keras_losses_scaled_by(scale), keras_forward_losses_unscaled(self._keras_model):
            return self._keras_model.train_step(data)

    def optimizer(self):
        # compile's one optimizer is saved and scheduled as a model's one optimizer is
        optimizers = model_optimizers(self._keras_model)
        return OwnUpdates(optimizers, single=self._io is not None and list(optimizers) == ["optimizer"])

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
