"""``tf.compat.v1.layers`` for TF1 programs: the functional ``tf.layers.*`` API on Keras 3 layers.

TF 2.21 with Keras 3 can no longer load ``tf.compat.v1.layers`` (it needs the Keras 2 package),
so a tensorpack program written with ``tf.layers.conv2d(...)`` stopped at its first layer. Once
kerastrainer is imported, ``tfv1.layers`` (and ``tf.compat.v1.layers``, when TF's own cannot load)
is this module. Each layer with variables is a Keras layer kept in the tower's layer store under
its scoped name, so every trace and every replica reuses it, and its variables keep ``tf.layers``'
names: ``conv0/kernel``, ``conv0/bias``, ``bn/gamma``, ``bn/moving_mean``. An unnamed layer gets
``tf.layers``' automatic name (``conv2d``, ``conv2d_1``, ... counted per tower call, the same in
every trace). A name used twice in one tower call shares the layer, as TF1 did under
``reuse=True`` or ``variable_scope(..., reuse=AUTO_REUSE)``: TF2 reports every variable scope as
``AUTO_REUSE``, so TF1's "already exists" refusal cannot be told apart from an intended reuse.

One difference from TF1: ``batch_normalization(training=True)`` updates its moving statistics in
the step itself (Keras 3's rule); TF1 did it only through ``UPDATE_OPS`` control dependencies.

Example::

    from kerastrainer import tfv1 as tf

    def build_graph(self, image, label):
        l = tf.layers.conv2d(image, 32, 3, padding='same', activation=tf.nn.relu, name='conv0')
        l = tf.layers.max_pooling2d(l, 2, 2)
        l = tf.layers.dropout(tf.layers.flatten(l), rate=0.5, training=self.training)
        logits = tf.layers.dense(l, 10, name='fc1')      # variables fc1/kernel, fc1/bias
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, Optional

import keras
import tensorflow as tf

from ..models.registry import current_layer_store
from ..utils import logger
from ..tfutils.custom_getters import through_custom_getters
from ..tfutils.tower import current_scope_name

__all__ = ["conv1d", "conv2d", "conv3d", "conv2d_transpose", "conv3d_transpose", "separable_conv2d",
           "dense", "dropout", "flatten", "batch_normalization",
           "max_pooling1d", "max_pooling2d", "max_pooling3d",
           "average_pooling1d", "average_pooling2d", "average_pooling3d",
           "Conv1D", "Conv2D", "Conv3D", "Conv2DTranspose", "Conv3DTranspose", "SeparableConv2D",
           "Dense", "Dropout", "Flatten", "BatchNormalization",
           "MaxPooling1D", "MaxPooling2D", "MaxPooling3D", "AveragePooling1D", "AveragePooling2D",
           "AveragePooling3D", "Layer", "InputSpec", "tower_call_names"]

# tf.layers' classes are Keras layers: as Keras 3 layers they are kept by the caller, not by name
Conv1D, Conv2D, Conv3D = keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D
Conv2DTranspose, Conv3DTranspose = keras.layers.Conv2DTranspose, keras.layers.Conv3DTranspose
SeparableConv2D, Dense, Dropout = keras.layers.SeparableConv2D, keras.layers.Dense, keras.layers.Dropout
Flatten, BatchNormalization = keras.layers.Flatten, keras.layers.BatchNormalization
MaxPooling1D, MaxPooling2D, MaxPooling3D = keras.layers.MaxPooling1D, keras.layers.MaxPooling2D, keras.layers.MaxPooling3D
AveragePooling1D, AveragePooling2D = keras.layers.AveragePooling1D, keras.layers.AveragePooling2D
AveragePooling3D, Layer, InputSpec = keras.layers.AveragePooling3D, keras.layers.Layer, keras.layers.InputSpec

_local = threading.local()


class _CallNames:
    """tf.layers' automatic numbering within one tower call."""

    def __init__(self):
        self.counts: Dict[str, int] = {}

    def auto(self, scope: str, base: str) -> str:
        key = f"{scope}/{base}"
        n = self.counts.get(key, 0)
        self.counts[key] = n + 1
        return base if n == 0 else f"{base}_{n}"


_outside = _CallNames()  # outside a tower (a user's own graph): numbered as TF1 numbered a graph


@contextmanager
def tower_call_names(_store=None) -> Iterator[None]:
    """Fresh automatic names for one tower call (every trace and replica numbers alike)."""
    prev = getattr(_local, "names", None)
    _local.names = _CallNames()
    try:
        yield
    finally:
        _local.names = prev


def _names() -> _CallNames:
    return getattr(_local, "names", None) or _outside


def _layer(base: str, name: Optional[str], reuse, factory: Callable[[str], keras.layers.Layer]):
    """The Keras layer stored under ``<scope>/<name>`` (``name`` or tf.layers' automatic one).
    ``reuse`` needs no work: a stored layer is always shared."""
    scope = current_scope_name()
    short = name if name else _names().auto(scope, base)
    key = f"{scope}/{short}" if scope else short
    store = current_layer_store()
    # a custom getter of the variable scope sees every weight, as TF1's tf.layers went through get_variable
    return through_custom_getters(store.get_or_create(key, lambda: factory(key.replace("/", "."))), key, store)


def _call(layer, inputs, name: Optional[str], base: str, **kwargs):
    with tf.name_scope(name or base):
        return layer(inputs, **kwargs)


def _conv(cls, base, inputs, filters, kernel_size, strides, padding, data_format, dilation_rate, activation,
          use_bias, kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
          activity_regularizer, kernel_constraint, bias_constraint, trainable, name, reuse, **extra):
    def make(kname):
        layer = cls(filters, kernel_size, strides=strides, padding=padding, data_format=data_format,
                    activation=activation, use_bias=use_bias,
                    kernel_initializer=kernel_initializer or "glorot_uniform",
                    bias_initializer=bias_initializer or "zeros", kernel_regularizer=kernel_regularizer,
                    bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                    kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
                    name=kname, **({"dilation_rate": dilation_rate} if dilation_rate is not None else {}), **extra)
        layer.trainable = trainable
        return layer
    return _call(_layer(base, name, reuse, make), inputs, name, base)


def conv1d(inputs, filters, kernel_size, strides=1, padding="valid", data_format="channels_last",
           dilation_rate=1, activation=None, use_bias=True, kernel_initializer=None,
           bias_initializer=tf.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
           activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
           name=None, reuse=None):
    """``tf.layers.conv1d``: a ``keras.layers.Conv1D`` kept under its name."""
    return _conv(keras.layers.Conv1D, "conv1d", inputs, filters, kernel_size, strides, padding, data_format,
                 dilation_rate, activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                 bias_regularizer, activity_regularizer, kernel_constraint, bias_constraint, trainable, name, reuse)


def conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
           dilation_rate=(1, 1), activation=None, use_bias=True, kernel_initializer=None,
           bias_initializer=tf.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
           activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
           name=None, reuse=None):
    """``tf.layers.conv2d``: a ``keras.layers.Conv2D`` kept under its name (variables ``<name>/kernel``,
    ``<name>/bias``)."""
    return _conv(keras.layers.Conv2D, "conv2d", inputs, filters, kernel_size, strides, padding, data_format,
                 dilation_rate, activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                 bias_regularizer, activity_regularizer, kernel_constraint, bias_constraint, trainable, name, reuse)


def conv3d(inputs, filters, kernel_size, strides=(1, 1, 1), padding="valid", data_format="channels_last",
           dilation_rate=(1, 1, 1), activation=None, use_bias=True, kernel_initializer=None,
           bias_initializer=tf.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
           activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
           name=None, reuse=None):
    """``tf.layers.conv3d``: a ``keras.layers.Conv3D`` kept under its name."""
    return _conv(keras.layers.Conv3D, "conv3d", inputs, filters, kernel_size, strides, padding, data_format,
                 dilation_rate, activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                 bias_regularizer, activity_regularizer, kernel_constraint, bias_constraint, trainable, name, reuse)


def conv2d_transpose(inputs, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
                     activation=None, use_bias=True, kernel_initializer=None,
                     bias_initializer=tf.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
                     activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
                     name=None, reuse=None):
    """``tf.layers.conv2d_transpose``: a ``keras.layers.Conv2DTranspose`` kept under its name."""
    return _conv(keras.layers.Conv2DTranspose, "conv2d_transpose", inputs, filters, kernel_size, strides, padding,
                 data_format, None, activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                 bias_regularizer, activity_regularizer, kernel_constraint, bias_constraint, trainable, name, reuse)


def conv3d_transpose(inputs, filters, kernel_size, strides=(1, 1, 1), padding="valid", data_format="channels_last",
                     activation=None, use_bias=True, kernel_initializer=None,
                     bias_initializer=tf.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
                     activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
                     name=None, reuse=None):
    """``tf.layers.conv3d_transpose``: a ``keras.layers.Conv3DTranspose`` kept under its name."""
    return _conv(keras.layers.Conv3DTranspose, "conv3d_transpose", inputs, filters, kernel_size, strides, padding,
                 data_format, None, activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                 bias_regularizer, activity_regularizer, kernel_constraint, bias_constraint, trainable, name, reuse)


def separable_conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid", data_format="channels_last",
                     dilation_rate=(1, 1), depth_multiplier=1, activation=None, use_bias=True,
                     depthwise_initializer=None, pointwise_initializer=None,
                     bias_initializer=tf.zeros_initializer(), depthwise_regularizer=None,
                     pointwise_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                     depthwise_constraint=None, pointwise_constraint=None, bias_constraint=None,
                     trainable=True, name=None, reuse=None):
    """``tf.layers.separable_conv2d``: a ``keras.layers.SeparableConv2D`` kept under its name."""
    def make(kname):
        layer = keras.layers.SeparableConv2D(
            filters, kernel_size, strides=strides, padding=padding, data_format=data_format,
            dilation_rate=dilation_rate, depth_multiplier=depth_multiplier, activation=activation,
            use_bias=use_bias, depthwise_initializer=depthwise_initializer or "glorot_uniform",
            pointwise_initializer=pointwise_initializer or "glorot_uniform",
            bias_initializer=bias_initializer or "zeros", depthwise_regularizer=depthwise_regularizer,
            pointwise_regularizer=pointwise_regularizer, bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer, depthwise_constraint=depthwise_constraint,
            pointwise_constraint=pointwise_constraint, bias_constraint=bias_constraint, name=kname)
        layer.trainable = trainable
        return layer
    return _call(_layer("separable_conv2d", name, reuse, make), inputs, name, "separable_conv2d")


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None,
          bias_initializer=tf.zeros_initializer(), kernel_regularizer=None, bias_regularizer=None,
          activity_regularizer=None, kernel_constraint=None, bias_constraint=None, trainable=True,
          name=None, reuse=None):
    """``tf.layers.dense``: a ``keras.layers.Dense`` kept under its name (on the last axis, as TF1)."""
    def make(kname):
        layer = keras.layers.Dense(units, activation=activation, use_bias=use_bias,
                                   kernel_initializer=kernel_initializer or "glorot_uniform",
                                   bias_initializer=bias_initializer or "zeros",
                                   kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                                   activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
                                   bias_constraint=bias_constraint, name=kname)
        layer.trainable = trainable
        return layer
    return _call(_layer("dense", name, reuse, make), inputs, name, "dense")


def batch_normalization(inputs, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                        beta_initializer=tf.zeros_initializer(), gamma_initializer=tf.ones_initializer(),
                        moving_mean_initializer=tf.zeros_initializer(),
                        moving_variance_initializer=tf.ones_initializer(), beta_regularizer=None,
                        gamma_regularizer=None, beta_constraint=None, gamma_constraint=None, training=False,
                        trainable=True, name=None, reuse=None, renorm=False, renorm_clipping=None,
                        renorm_momentum=0.99, fused=None, virtual_batch_size=None, adjustment=None):
    """``tf.layers.batch_normalization``: a ``keras.layers.BatchNormalization`` kept under its name.

    ``training=True`` updates the moving statistics in the step (no ``UPDATE_OPS`` needed).
    ``renorm``, ``virtual_batch_size`` and ``adjustment`` have no Keras 3 equivalent: refused.
    """
    for knob, value, default in (("renorm", renorm, False), ("virtual_batch_size", virtual_batch_size, None),
                                 ("adjustment", adjustment, None), ("renorm_clipping", renorm_clipping, None)):
        if value != default:
            raise ValueError(f"tf.layers.batch_normalization({knob}={value!r}): Keras 3's BatchNormalization "
                             "has no such option. Remove it (or write the normalization with tf ops).")
    if fused is not None:
        logger.warning("tf.layers.batch_normalization(fused=%r) is ignored: Keras 3 picks its own kernel "
                       "(the same maths).", fused)

    def make(kname):
        layer = keras.layers.BatchNormalization(
            axis=axis, momentum=momentum, epsilon=epsilon, center=center, scale=scale,
            beta_initializer=beta_initializer, gamma_initializer=gamma_initializer,
            moving_mean_initializer=moving_mean_initializer,
            moving_variance_initializer=moving_variance_initializer, beta_regularizer=beta_regularizer,
            gamma_regularizer=gamma_regularizer, beta_constraint=beta_constraint,
            gamma_constraint=gamma_constraint, name=kname)
        layer.trainable = trainable
        return layer
    layer = _layer("batch_normalization", name, reuse, make)
    return _call(layer, inputs, name, "batch_normalization", training=training)


def dropout(inputs, rate=0.5, noise_shape=None, seed=None, training=False, name=None):
    """``tf.layers.dropout``: drops with ``rate`` only when ``training`` (a bool or a bool tensor)."""
    with tf.name_scope(name or "dropout"):
        x = tf.convert_to_tensor(inputs)
        if isinstance(training, bool) or training is None:
            return tf.nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed) if training else tf.identity(x)
        return tf.cond(tf.cast(training, tf.bool),
                       lambda: tf.nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed),
                       lambda: tf.identity(x))


def flatten(inputs, name=None, data_format="channels_last"):
    """``tf.layers.flatten``: (N, ...) -> (N, prod(...)); channels_first is flattened as NHWC, as TF1 did."""
    with tf.name_scope(name or "flatten"):
        x = tf.convert_to_tensor(inputs)
        if data_format == "channels_first" and x.shape.rank is not None and x.shape.rank > 2:
            x = tf.transpose(x, [0] + list(range(2, x.shape.rank)) + [1])
        rest = x.shape[1:]
        if rest.is_fully_defined():
            return tf.reshape(x, [-1, rest.num_elements()])
        return tf.reshape(x, tf.stack([tf.shape(x)[0], -1]))


def _pool(cls, base, inputs, pool_size, strides, padding, data_format, name):
    # no variables: a new Keras layer per call is fine
    layer = cls(pool_size=pool_size, strides=strides, padding=padding, data_format=data_format)
    with tf.name_scope(name or base):
        return layer(inputs)


def max_pooling1d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
    """``tf.layers.max_pooling1d``."""
    return _pool(keras.layers.MaxPooling1D, "max_pooling1d", inputs, pool_size, strides, padding, data_format, name)


def max_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
    """``tf.layers.max_pooling2d``."""
    return _pool(keras.layers.MaxPooling2D, "max_pooling2d", inputs, pool_size, strides, padding, data_format, name)


def max_pooling3d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
    """``tf.layers.max_pooling3d``."""
    return _pool(keras.layers.MaxPooling3D, "max_pooling3d", inputs, pool_size, strides, padding, data_format, name)


def average_pooling1d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
    """``tf.layers.average_pooling1d``."""
    return _pool(keras.layers.AveragePooling1D, "average_pooling1d", inputs, pool_size, strides, padding,
                 data_format, name)


def average_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
    """``tf.layers.average_pooling2d``."""
    return _pool(keras.layers.AveragePooling2D, "average_pooling2d", inputs, pool_size, strides, padding,
                 data_format, name)


def average_pooling3d(inputs, pool_size, strides, padding="valid", data_format="channels_last", name=None):
    """``tf.layers.average_pooling3d``."""
    return _pool(keras.layers.AveragePooling3D, "average_pooling3d", inputs, pool_size, strides, padding,
                 data_format, name)
