"""``LayerNorm`` and ``InstanceNorm`` (tensorpack's definitions).

Both learn a per-channel ``gamma`` and ``beta`` (shape ``(C,)``).
``LayerNorm`` normalizes each sample over all its axes; ``InstanceNorm`` normalizes
each sample and channel over the spatial axes.

Example::

    x = LayerNorm('ln', x)
    x = InstanceNorm('in', x, use_affine=False)
"""
from __future__ import annotations

from typing import Optional, Sequence

import keras
import tensorflow as tf

from . import _common as C
from .registry import get_layer_here, layer_register, legacy_names

__all__ = ["LayerNorm", "InstanceNorm", "ChannelAffineNormalization"]


@keras.saving.register_keras_serializable(package="kerastrainer")
class ChannelAffineNormalization(keras.layers.Layer):
    """Normalize over ``reduce_axes``, then scale and shift per channel.

    Example::

        ln = ChannelAffineNormalization(reduce_axes=(1, 2, 3), channel_axis=3)
        y = ln(tf.random.normal([2, 4, 4, 8]))
    """

    def __init__(self, reduce_axes: Sequence[int], channel_axis: int, epsilon: float = 1e-5,
                 center: bool = True, scale: bool = True, gamma_initializer="ones", **kwargs):
        super().__init__(**kwargs)
        self.reduce_axes = tuple(int(a) for a in reduce_axes)
        self.channel_axis = int(channel_axis)
        self.epsilon = float(epsilon)
        self.center = bool(center)
        self.scale = bool(scale)
        self.gamma_initializer = keras.initializers.get(gamma_initializer)

    def build(self, input_shape):
        channels = input_shape[self.channel_axis]
        if channels is None:
            raise ValueError(f"{self.name}: the channel dimension must be known, got shape {input_shape}.")
        self.gamma = self.add_weight(shape=(channels,), name="gamma",
                                     initializer=self.gamma_initializer) if self.scale else None
        self.beta = self.add_weight(shape=(channels,), name="beta",
                                    initializer="zeros") if self.center else None

    def call(self, x):
        mean, var = tf.nn.moments(x, self.reduce_axes, keepdims=True)
        shape = [1] * len(x.shape)
        shape[self.channel_axis] = -1
        gamma = tf.reshape(self.gamma, shape) if self.gamma is not None else None
        beta = tf.reshape(self.beta, shape) if self.beta is not None else None
        return tf.nn.batch_normalization(x, mean, var, beta, gamma, self.epsilon)

    def get_config(self):
        return {**super().get_config(), "reduce_axes": self.reduce_axes,
                "channel_axis": self.channel_axis, "epsilon": self.epsilon, "center": self.center,
                "scale": self.scale,
                "gamma_initializer": keras.initializers.serialize(self.gamma_initializer)}


def _norm(layer_name, x, reduce_axes, channel_axis, epsilon, center, scale, gamma_init):
    layer = get_layer_here(lambda kname: ChannelAffineNormalization(
        reduce_axes, channel_axis, epsilon=epsilon, center=center, scale=scale,
        gamma_initializer=C.initializer(gamma_init, "ones"), name=kname))
    return C.output(layer(x))


@layer_register(log_shape=False)
@legacy_names(use_bias="center", use_scale="scale", gamma_init="gamma_initializer")
def LayerNorm(x, epsilon: float = 1e-5, center: bool = True, scale: bool = True,
              gamma_initializer=None, data_format: str = "channels_last"):
    """Layer normalization over all non-batch axes, per-channel affine.

    Example::

        y = LayerNorm('ln', x)
    """
    x = tf.convert_to_tensor(x)
    ndim = C.static_rank(x, "LayerNorm")
    if ndim < 2:
        raise ValueError(f"LayerNorm needs an input of rank >= 2, got shape {x.shape}.")
    fmt = C.data_format(data_format, "LayerNorm")
    return _norm("LayerNorm", x, range(1, ndim), C.channel_axis(fmt, ndim), epsilon, center, scale,
                 gamma_initializer)


@layer_register(log_shape=False)
@legacy_names(gamma_init="gamma_initializer")
def InstanceNorm(x, epsilon: float = 1e-5, center: bool = True, scale: bool = True, gamma_initializer=None,
                 data_format: str = "channels_last", use_affine: Optional[bool] = None):
    """Instance normalization: each sample and channel over the spatial axes.

    ``center`` / ``scale`` learn ``beta`` / ``gamma`` (tensorpack 0.11); the older ``use_affine``
    sets both.

    Example::

        y = InstanceNorm('in', x, scale=False)
    """
    if use_affine is not None:
        center = scale = bool(use_affine)
    x = tf.convert_to_tensor(x)
    ndim = C.static_rank(x, "InstanceNorm")
    if ndim < 3:
        raise ValueError(f"InstanceNorm needs an input with spatial axes, got shape {x.shape}.")
    fmt = C.data_format(data_format, "InstanceNorm")
    spatial = range(2, ndim) if fmt == "channels_first" else range(1, ndim - 1)
    return _norm("InstanceNorm", x, spatial, C.channel_axis(fmt, ndim), epsilon, center, scale,
                 gamma_initializer)
