"""``BatchNorm`` and ``BNReLU``: tensorpack's batch normalization on Keras 3.

Variables: ``<name>/gamma``, ``<name>/beta``, ``<name>/mean/EMA``, ``<name>/variance/EMA``.

Training or not follows the tower: ``training=None`` means the tower context's
``is_training`` (False outside any tower). In training, the layer normalizes with
the batch statistics and updates the moving averages (``moving = moving * momentum
+ batch * (1 - momentum)``) as variable assignments inside the call, so nothing
needs to run "after the step", in eager mode or inside ``tf.function``. As in tensorpack (TF's
fused kernel), a 4-D input's moving variance follows the unbiased batch variance (n / (n - 1));
a 2-D input's and a synchronised one's, the batch variance.

Several replicas (``tf.distribute``): the moving averages are mirrored variables
whose updates come from the first replica only (tensorpack's "main tower" rule), so
every replica keeps the same values. ``sync_statistics='nccl'`` (also ``'replica'``,
``'collective'``) normalizes with the mean and variance of the whole global batch,
all-reduced across replicas (Keras's ``synchronized=True``); ``'horovod'`` does the
same across Horovod ranks with ``hvd.allreduce``.

Example::

    x = BatchNorm('bn0', x)                       # batch stats in training towers
    x = BatchNorm('bn1', x, momentum=0.99, sync_statistics='nccl')
    x = BNReLU('bnrelu', x)                       # BatchNorm('bn') + ReLU
"""
from __future__ import annotations

from typing import Optional, Union

import keras
import tensorflow as tf

from .._internals import batchnorm_reduction_axes, install_batchnorm_moments, require_batchnorm_moments
from . import _common as C
from ..tfutils.tower import get_current_tower_context
from .registry import get_layer_here, layer_register, legacy_names

__all__ = ["BatchNorm", "BNReLU", "TowerBatchNormalization", "BatchRenorm", "BatchRenormalization"]

_BN_ALIASES = {"gamma": "gamma", "beta": "beta", "moving_mean": "mean/EMA",
               "moving_variance": "variance/EMA"}
_SYNC_REPLICA = ("nccl", "replica", "collective")


@keras.saving.register_keras_serializable(package="kerastrainer")
class TowerBatchNormalization(keras.layers.BatchNormalization):
    """``keras.layers.BatchNormalization`` made for data-parallel towers.

    - moving statistics are aggregated ``'only_first_replica'``: under a
      ``tf.distribute`` strategy every replica's update is replaced by the first
      replica's, so the mirrored copies never drift apart;
    - ``horovod_sync=True`` all-reduces the batch moments over Horovod ranks.

    Example::

        bn = TowerBatchNormalization(momentum=0.9, epsilon=1e-5)
        y = bn(x, training=True)
    """

    def __init__(self, *args, horovod_sync: bool = False, unbiased_moving_variance: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.horovod_sync = bool(horovod_sync)
        self.unbiased_moving_variance = bool(unbiased_moving_variance)
        if self.horovod_sync:
            require_batchnorm_moments()
            _import_horovod()

    def call(self, inputs, training=None, mask=None, update_moving: bool = True):
        """``update_moving=False``: normalise with the batch statistics (``training=True``) and leave
        the moving ones as they are (tensorpack's ``ema_update='skip'``, and its inference towers)."""
        if not (training and self.trainable):
            return super().call(inputs, training=training, mask=mask)
        if not update_moving:
            kept = [tf.identity(self.moving_mean), tf.identity(self.moving_variance)]
            outputs = super().call(inputs, training=training, mask=mask)
            self.moving_mean.assign(kept[0])
            self.moving_variance.assign(kept[1])
            return outputs
        if not self.unbiased_moving_variance:
            return super().call(inputs, training=training, mask=mask)
        old = tf.identity(self.moving_variance)
        outputs = super().call(inputs, training=training, mask=mask)
        # Keras moved the average towards the batch variance (divided by n); TF's fused batch-norm
        # kernel, which tensorpack's and tf.layers' BatchNorm run on 4-D inputs, towards the
        # unbiased one (divided by n - 1): add the difference, (1 - momentum) * var / (n - 1).
        x = tf.convert_to_tensor(inputs)
        n = tf.cast(tf.size(x), tf.float32) / float(x.shape[self.axis])
        moved = tf.cast(self.moving_variance, tf.float32) - tf.cast(old, tf.float32) * self.momentum
        self.moving_variance.assign_add(tf.cast(moved / tf.maximum(n - 1.0, 1.0), self.moving_variance.dtype))
        return outputs

    def add_weight(self, *args, **kwargs):
        if str(kwargs.get("name", "")).startswith("moving_"):
            kwargs["aggregation"] = "only_first_replica"
        return super().add_weight(*args, **kwargs)

    def synced_moments(self, inputs, mask, keras_moments):
        """The batch moments (Keras's, or all-reduced over Horovod ranks with ``horovod_sync``);
        installed as Keras's moments step through ``_internals.install_batchnorm_moments``."""
        if not self.horovod_sync or mask is not None:
            return keras_moments(inputs, mask)
        hvd = _import_horovod()
        axes = batchnorm_reduction_axes(self)
        x = tf.cast(inputs, tf.float32)
        mean = tf.reduce_mean(x, axis=axes)
        mean_sq = tf.reduce_mean(tf.square(x), axis=axes)
        # Equal per-rank batch sizes (the trainer's rule), so averaging the
        # per-rank moments gives the moments of the global batch.
        both = hvd.allreduce(tf.concat([mean, mean_sq], 0), op=hvd.Average)
        mean, mean_sq = tf.split(both, 2)
        var = tf.maximum(mean_sq - tf.square(mean), 0.0)
        return tf.cast(mean, inputs.dtype), tf.cast(var, inputs.dtype)

    def get_config(self):
        return {**super().get_config(), "horovod_sync": self.horovod_sync,
                "unbiased_moving_variance": self.unbiased_moving_variance}


install_batchnorm_moments(TowerBatchNormalization, TowerBatchNormalization.synced_moments)


def _import_horovod():
    try:
        import horovod.tensorflow as hvd
    except ImportError as e:
        raise ImportError(
            "BatchNorm(sync_statistics='horovod') needs Horovod (horovod.tensorflow), which "
            f"cannot be imported here ({e}). Use sync_statistics='nccl' with a tf.distribute "
            "trainer (SyncMultiGPUTrainerReplicated, MultiWorkerTrainer) instead.") from None
    return hvd


def _sync_mode(value) -> Optional[str]:
    if value in (None, False):
        return None
    if value is True:
        return "replica"
    v = str(value).lower()
    if v in _SYNC_REPLICA or v == "horovod":
        return v
    raise ValueError(f"BatchNorm: sync_statistics must be None, 'nccl' (or 'replica', "
                     f"'collective') or 'horovod', got {value!r}.")


@layer_register(log_shape=False)
@legacy_names(decay="momentum", use_scale="scale", use_bias="center", gamma_init="gamma_initializer",
              use_local_stat="training")
def BatchNorm(inputs, axis: Optional[int] = None, training: Optional[bool] = None,
              momentum: float = 0.9, epsilon: float = 1e-5, center: bool = True, scale: bool = True,
              beta_initializer="zeros", gamma_initializer="ones", data_format: str = "channels_last",
              sync_statistics: Optional[Union[str, bool]] = None, ema_update: str = "default"):
    """Batch normalization with tensorpack's defaults (momentum 0.9, epsilon 1e-5).

    Args:
        axis: the channel axis; None: 1 for ``channels_first`` 4-D input, else the last.
        training: use batch statistics and update the moving ones; None follows the
            tower context (tensorpack's behaviour).
        sync_statistics: None, ``'nccl'`` / ``'replica'`` (all-reduce across
            ``tf.distribute`` replicas) or ``'horovod'``.
        ema_update: with batch statistics (``training`` true), how the moving ones follow:
            ``'default'`` / ``'collection'``: updated inside the call in a training tower (its main
            one), never in an inference tower (tensorpack freezes ``UPDATE_OPS`` there);
            ``'internal'``: updated inside the call in any tower; ``'skip'``: never updated.

    tensorpack's names ``decay``, ``use_scale``, ``use_bias``, ``gamma_init`` work too.

    Example::

        x = BatchNorm('bn', x, gamma_initializer='zeros')   # zero-init the residual branch
    """
    x = tf.convert_to_tensor(inputs)
    fmt = C.data_format(data_format, "BatchNorm")
    ndim = C.static_rank(x, "BatchNorm")
    if axis is None:
        axis = C.channel_axis(fmt, ndim)
    sync = _sync_mode(sync_statistics)
    if ema_update not in ("default", "collection", "internal", "skip"):
        raise ValueError(f"BatchNorm(ema_update={ema_update!r}): use 'default' (= 'collection'), 'internal' "
                         "or 'skip'.")
    ctx = get_current_tower_context()
    if training is None:
        training = bool(ctx.is_training) if ctx is not None else False
    # an inference tower with batch statistics leaves the moving ones alone unless told 'internal'
    update_moving = ema_update == "internal" or (
        ema_update != "skip" and not (ctx is not None and not ctx.is_training))
    layer = get_layer_here(lambda kname: TowerBatchNormalization(
        axis=int(axis), momentum=float(momentum), epsilon=float(epsilon), center=center, scale=scale,
        beta_initializer=C.initializer(beta_initializer, "zeros"),
        gamma_initializer=C.initializer(gamma_initializer, "ones"),
        synchronized=sync in _SYNC_REPLICA, horovod_sync=sync == "horovod",
        # tensorpack's 4-D, unsynchronised BatchNorm is TF's fused kernel: unbiased moving variance
        unbiased_moving_variance=ndim == 4 and sync is None, name=kname), _BN_ALIASES)
    return C.output(layer(x, training=bool(training), update_moving=update_moving))


@layer_register(log_shape=False, use_scope=None)
def BNReLU(x, name: Optional[str] = None):
    """``BatchNorm('bn', x)`` then ReLU. Usable as an activation: ``Conv2D(..., activation=BNReLU)``.

    Example::

        x = BNReLU('preact', x)      # variables 'preact/bn/gamma', ...
    """
    x = BatchNorm("bn", x)
    return tf.nn.relu(x, name=name or "output")


class BatchRenormalization(keras.layers.Layer):
    """Batch renormalization (Ioffe 2017) as a Keras 3 layer (Keras 3's BatchNormalization has
    no ``renorm``), with TF1's ``tf.layers`` maths, which tensorpack's ``BatchRenorm`` runs.
    Training normalizes with the batch statistics corrected by
    ``r = clip(sigma_B / sigma, 1/rmax, rmax)`` and ``d = clip((mu_B - mu) / sigma, -dmax, dmax)``
    (no gradient through r, d; ``sigma`` at least ``sqrt(epsilon)``), where ``mu``, ``sigma`` are
    ``renorm_mean`` / ``renorm_stddev``, averaged with ``renorm_momentum``. Inference uses
    ``moving_mean`` and ``moving_variance``; as in TF1 the layer averages ``moving_stddev``
    (of ``sqrt(var + epsilon)``, with ``momentum``) and derives the variance from it.

    Example::

        y = BatchRenormalization(rmax=3.0, dmax=5.0)(x, training=True)
    """

    def __init__(self, axis: int = -1, momentum: float = 0.9, epsilon: float = 1e-5, rmax: float = 3.0,
                 dmax: float = 5.0, renorm_momentum: float = 0.99, center: bool = True, scale: bool = True,
                 gamma_initializer="ones", **kwargs):
        super().__init__(**kwargs)
        self.axis, self.momentum, self.epsilon = int(axis), float(momentum), float(epsilon)
        self.rmax, self.dmax, self.renorm_momentum = float(rmax), float(dmax), float(renorm_momentum)
        self.center, self.scale = bool(center), bool(scale)
        self.gamma_initializer = keras.initializers.get(gamma_initializer)

    def build(self, input_shape):
        axis = self.axis % len(input_shape)
        self._axis = axis
        shape = (int(input_shape[axis]),)
        self.gamma = self.add_weight(name="gamma", shape=shape, initializer=self.gamma_initializer) \
            if self.scale else None
        self.beta = self.add_weight(name="beta", shape=shape, initializer="zeros") if self.center else None
        stat = dict(shape=shape, trainable=False)
        self.moving_mean = self.add_weight(name="moving_mean", initializer="zeros", **stat)
        self.moving_variance = self.add_weight(name="moving_variance", initializer="ones", **stat)
        self.moving_stddev = self.add_weight(name="moving_stddev", initializer="ones", **stat)
        self.renorm_mean = self.add_weight(name="renorm_mean", initializer="zeros", **stat)
        self.renorm_stddev = self.add_weight(name="renorm_stddev", initializer="ones", **stat)

    def call(self, x, training=False):
        ndim = len(x.shape)
        axes = [i for i in range(ndim) if i != self._axis]
        bshape = [1] * ndim
        bshape[self._axis] = -1

        def b(v):
            return tf.reshape(tf.cast(v, x.dtype), bshape)

        if training:
            mean, var = tf.nn.moments(x, axes)
            std = tf.sqrt(var + self.epsilon)
            r_mean = tf.cast(self.renorm_mean, mean.dtype)
            r_std = tf.maximum(tf.cast(self.renorm_stddev, std.dtype), self.epsilon ** 0.5)
            r = tf.stop_gradient(tf.clip_by_value(std / r_std, 1.0 / self.rmax, self.rmax))
            d = tf.stop_gradient(tf.clip_by_value((mean - r_mean) / r_std, -self.dmax, self.dmax))
            xhat = (x - b(mean)) / b(std) * b(r) + b(d)
            for var_, value, m in ((self.renorm_mean, mean, self.renorm_momentum),
                                   (self.renorm_stddev, std, self.renorm_momentum),
                                   (self.moving_mean, mean, self.momentum),
                                   (self.moving_stddev, std, self.momentum)):
                var_.assign(var_ * m + tf.cast(value, var_.dtype) * (1 - m))
            self.moving_variance.assign(tf.nn.relu(tf.square(self.moving_stddev) - self.epsilon))
        else:
            xhat = (x - b(self.moving_mean)) / tf.sqrt(b(self.moving_variance) + self.epsilon)
        if self.gamma is not None:
            xhat = xhat * b(self.gamma)
        if self.beta is not None:
            xhat = xhat + b(self.beta)
        return xhat


@layer_register(log_shape=False)
def BatchRenorm(x, rmax: float, dmax: float, momentum: float = 0.9, epsilon: float = 1e-5,
                center: bool = True, scale: bool = True, gamma_initializer=None,
                data_format: str = "channels_last"):
    """tensorpack's Batch Renormalization layer (``renorm_momentum`` 0.99, as tensorpack's).

    Variables (tensorpack's names, which are TF1's): ``gamma``, ``beta``, ``moving_mean``,
    ``moving_variance``, ``moving_stddev``, ``renorm_mean``, ``renorm_stddev``. Training follows the
    tower context.

    Example::

        x = BatchRenorm('bn', x, rmax=3.0, dmax=5.0)
    """
    x = tf.convert_to_tensor(x)
    fmt = C.data_format(data_format, "BatchRenorm")
    ndim = C.static_rank(x, "BatchRenorm")
    axis = C.channel_axis(fmt, ndim)
    ctx = get_current_tower_context()
    training = bool(ctx.is_training) if ctx is not None else False
    layer = get_layer_here(lambda kname: BatchRenormalization(
        axis=axis, momentum=momentum, epsilon=epsilon, rmax=rmax, dmax=dmax, center=center, scale=scale,
        gamma_initializer=C.initializer(gamma_initializer, "ones"), name=kname))
    return C.output(layer(x, training=training))
