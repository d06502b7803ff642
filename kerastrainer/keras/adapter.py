"""KerasModelDesc: a whole Keras model seen by the trainers as a ``ModelDesc``.

The adapter's ``inputs()`` are the model's inputs followed by its targets (named,
see :class:`~kerastrainer.keras.structure.ModelIO`) and, when the data is weighted
(``sample_weight``, ``class_weight``), one sample weight per target; its tower function runs
``model(x, training=ctx.is_training)`` in the tower context, computes the compiled
loss plus ``sum(model.losses)`` (regularizers, and the ``add_loss`` losses of this
call: with ``compile(loss=None)`` they are the whole loss), records the loss and metrics with
``add_moving_summary`` under Keras' log names, and returns the loss. With
``global_batch=True`` (``KerasModel``'s own data) the last input is the replica's
share of the global batch (:data:`~kerastrainer.keras.data.SHARE_SPEC`); the
training tower multiplies its loss by it, so that replicas of an unevenly split
batch (47 and 46 samples of 93) give the whole batch's mean loss and gradient
once the trainer averages them. Tensors are
named for predictors and ``InferenceRunner``: ``'loss'``, each statistic (e.g.
``'accuracy'``), and each output as ``'<output>_output'``.

Its variables are the Keras model's: ``get_model_variables()`` holds the model (as
``keras_model``), so checkpoints of ``ModelSaver`` save it, and on a multi-replica
strategy the model's variables are moved into the strategy's scope when the
trainer builds the model (:mod:`~kerastrainer.keras.variables`).

Example::

    desc = KerasModelDesc(model, io, objectives, keras.optimizers.Adam(1e-3))
    launch_train_with_config(TrainConfig(model=desc, data=source, steps_per_epoch=100), SimpleTrainer())
"""
from __future__ import annotations

from typing import List, Sequence

import keras
import tensorflow as tf

from .._internals import clear_model_losses, keras_losses_per_replica
from ..tfutils.summary import add_moving_summary, add_tensor_summary
from ..tfutils.tower import get_current_tower_context
from .data import SHARE_SPEC
from .layer_metrics import layer_metric_variables
from .objectives import Objectives
from .structure import ModelIO, _safe_name
from .desc_base import KerasDescBase
from .variables import rekey_optimizer

__all__ = ["KerasModelDesc", "KERAS_SUMS_PREFIX", "epoch_means"]

#: hidden step statistics (``_``: no monitor shows them) from which :func:`epoch_means` weights
#: each batch by its size, as Keras's running means do (a short last batch counts less)
SAMPLES_STAT = "_keras_samples/scalar"
SAMPLE_SUM_PREFIX = "_keras_sum/"
#: and those of the per-output losses, which Keras 3 averages over the batches unweighted (its loss
#: trackers get ``sample_weight=`` the static batch size: None in a traced step)
BATCHES_STAT = "_keras_batches/scalar"
BATCH_SUM_PREFIX = "_keras_bsum/"
KERAS_SUMS_PREFIX = "_keras_"


def _record_sample_sums(loss, stats: dict, first_input, per_batch=()) -> None:
    """Every replica records its batch size and each statistic times it (the names in
    ``per_batch``: times 1, and a count of batches); the trainer sums the replicas' (each divided
    by their number), so their ratio is the mean over the samples (over the replicas' batches) of
    every replica, whatever the split."""
    n = tf.cast(tf.shape(first_input)[0], tf.float32)
    add_tensor_summary(n, types=("scalar",), name=SAMPLES_STAT[:-len("/scalar")], main_tower_only=False)
    if per_batch:
        add_tensor_summary(tf.constant(1.0), types=("scalar",), name=BATCHES_STAT[:-len("/scalar")],
                           main_tower_only=False)
    for name, value in [("loss", loss)] + list(stats.items()):
        if name in per_batch:
            add_tensor_summary(tf.cast(value, tf.float32), types=("scalar",), name=BATCH_SUM_PREFIX + name,
                               main_tower_only=False)
        else:
            add_tensor_summary(tf.cast(value, tf.float32) * n, types=("scalar",), name=SAMPLE_SUM_PREFIX + name,
                               main_tower_only=False)


def epoch_means(sums: dict) -> dict:
    """``{statistic: mean}`` from sums of step outputs holding :data:`SAMPLES_STAT` and
    ``_keras_sum/<statistic>/scalar`` (mean over the samples), :data:`BATCHES_STAT` and
    ``_keras_bsum/<statistic>/scalar`` (over the batches); empty when they hold none (another
    kind of step)."""
    out = {}
    for count, prefix in ((SAMPLES_STAT, SAMPLE_SUM_PREFIX), (BATCHES_STAT, BATCH_SUM_PREFIX)):
        total = sums.get(count)
        if total:
            out.update({k[len(prefix):-len("/scalar")]: v / total for k, v in sums.items()
                        if k.startswith(prefix) and k.endswith("/scalar")})
    return out


class KerasModelDesc(KerasDescBase):
    """The ModelDesc adapter of a compiled Keras model (see the module doc).

    Args:
        model: the ``keras.Model``, built (``KerasModel`` builds it on one batch first).
        io: the model's flat inputs and targets.
        objectives: the resolved losses and metrics.
        optimizer: a Keras optimizer.
        global_batch: the inputs end with the replica's share of the global batch.
    """

    def __init__(self, model: keras.Model, io: ModelIO, objectives: Objectives, optimizer,
                 global_batch: bool = False):
        super().__init__(model)
        self._io = io
        self._objectives = objectives
        self._keras_optimizer = optimizer
        self._global_batch = bool(global_batch)

    @property
    def io(self) -> ModelIO:
        return self._io

    @property
    def stat_names(self) -> List[str]:
        """``'loss'`` and the names of the other statistics the tower records."""
        return ["loss"] + [_safe_name(n) for n in self._objectives.stat_names]

    @property
    def per_batch_stats(self) -> List[str]:
        """The statistics Keras averages over the batches unweighted: the per-output losses."""
        return [_safe_name(n) for n in self._objectives.loss_names]

    def output_tensor_name(self, output: str) -> str:
        return _safe_name(f"{output}_output")

    # --- ModelDesc --------------------------------------------------------------------------
    def inputs(self) -> List[tf.TensorSpec]:
        return self._io.signature + ([SHARE_SPEC] if self._global_batch else [])

    def compute(self, tensors: Sequence[tf.Tensor], training: bool):
        """``(loss, {statistic: tensor}, {output: tensor})`` of one batch of flat inputs and targets.

        Tensors are named: ``'loss'``, each statistic, and each output ``'<output>_output'``.
        """
        io = self._io
        n_in = len(io.input_specs)
        x = io.pack_inputs(tensors[:n_in])
        n_t = len(io.target_outputs)
        y_true = dict(zip(io.target_outputs, tensors[n_in:n_in + n_t]))
        weights = dict(zip(io.target_outputs, tensors[n_in + n_t:n_in + 2 * n_t])) if io.weighted else None
        # Keras clears add_loss losses when a model is the outermost call; in a tower it is called
        # inside kerastrainer's training-phase context, so the last trace's losses would linger
        clear_model_losses(self._keras_model)
        with keras_losses_per_replica():   # an add_loss Keras loss: the replica's mean, as the compiled ones
            y_pred = io.outputs_by_name(self._keras_model(x, training=training))
        named = {name: tf.identity(t, name=self.output_tensor_name(name)) for name, t in y_pred.items()}
        with tf.name_scope("objectives"):
            # the model's own output tensors: a softmax or sigmoid output carries the logits behind it,
            # from which Keras's cross-entropy computes (a copy of the tensor would lose them)
            total, stats = self._objectives.compute(y_true, y_pred, weights)
            # read right after the call: Keras clears a model's add_loss losses when it is called again
            # each summed, as Keras's fit does (Trainer._aggregate_additional_loss)
            extra = [tf.reduce_sum(tf.cast(t, tf.float32)) for t in self._keras_model.losses]
            if extra:
                total = tf.add_n(extra) if total is None else total + tf.add_n(extra)
            elif total is None:
                raise ValueError("No loss to compute: no output has a compiled loss and the model added none "
                                 "(add_loss) in this call.")
        loss = tf.identity(total, name="loss")
        stats = {_safe_name(n): tf.identity(v, name=_safe_name(n)) for n, v in stats.items()}
        return loss, stats, named

    def build_graph(self, *tensors):
        ctx = get_current_tower_context()
        training = bool(ctx.is_training) if ctx is not None else False
        loss, stats, _ = self.compute(tensors, training)
        if training:
            _record_sample_sums(loss, stats, tensors[0], self.per_batch_stats)
        if training and self._global_batch:
            # weighted by the replica's share: the replicas' mean is the whole batch's loss
            loss = tf.identity(loss * tf.cast(tensors[-1], loss.dtype), name="weighted_loss")
        # the loss itself is the trainer's 'cost' (averaged over replicas); Keras logs call it 'loss'
        if stats:
            add_moving_summary(*stats.values(), names=list(stats))
        return loss

    def optimizer(self):
        return self._keras_optimizer

    def get_optimizer(self):
        # called by the trainer inside its strategy's scope: the optimizer must update
        # variables through that strategy, and find its slots after they moved
        opt = self._keras_optimizer
        rekey_optimizer(opt)
        return opt

    def keras_optimizers(self) -> list:
        return [self._keras_optimizer]

    def state_variables(self) -> list:
        # the optimizer's step counter and learning rate exist before it is built, and the states
        # of metrics the model's layers update in their call (Keras lists them apart)
        return list(getattr(self._keras_optimizer, "variables", [])) + layer_metric_variables(self._keras_model)
