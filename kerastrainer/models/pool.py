"""Pooling layers: ``MaxPooling``, ``AvgPooling``, ``GlobalAvgPooling``.

They hold no variables, so they run TF ops directly (nothing is added to the layer
store). TensorFlow's CPU kernels pool only NHWC: ``channels_first`` needs a GPU.

Example::

    x = MaxPooling('pool0', x, 3, strides=2, padding='same')
    x = AvgPooling('pool1', x, 2)                   # strides default to pool_size
    features = GlobalAvgPooling('gap', x)          # (N, C)
"""
from __future__ import annotations

from typing import Sequence, Union

import tensorflow as tf

from . import _common as C
from .registry import layer_register, legacy_names

__all__ = ["MaxPooling", "AvgPooling", "GlobalAvgPooling"]


def _pool(kind: str, layer: str, inputs, pool_size, strides, padding, data_format):
    fmt = C.data_format(data_format, layer)
    size = C.pair(pool_size, "pool_size (tensorpack: shape)", layer)
    stride = size if strides is None else C.pair(strides, "strides", layer)
    fn = tf.nn.max_pool2d if kind == "max" else tf.nn.avg_pool2d
    out = fn(inputs, size, stride, C.padding(padding, layer).upper(),
             data_format="NCHW" if fmt == "channels_first" else "NHWC")
    return C.output(out)


@layer_register(log_shape=True)
@legacy_names(shape="pool_size", stride="strides")
def MaxPooling(inputs, pool_size: Union[int, Sequence[int], None] = None,
               strides: Union[int, Sequence[int], None] = None, padding: str = "valid",
               data_format: str = "channels_last"):
    """2-D max pooling; ``strides=None`` means ``pool_size``.

    Example::

        x = MaxPooling('pool0', x, 2)
    """
    return _pool("max", "MaxPooling", inputs, pool_size, strides, padding, data_format)


@layer_register(log_shape=True)
@legacy_names(shape="pool_size", stride="strides")
def AvgPooling(inputs, pool_size: Union[int, Sequence[int], None] = None,
               strides: Union[int, Sequence[int], None] = None, padding: str = "valid",
               data_format: str = "channels_last"):
    """2-D average pooling; ``strides=None`` means ``pool_size``.

    Example::

        x = AvgPooling('pool0', x, 2)
    """
    return _pool("avg", "AvgPooling", inputs, pool_size, strides, padding, data_format)


@layer_register(log_shape=True)
def GlobalAvgPooling(x, data_format: str = "channels_last"):
    """Mean over the spatial axes: (N, H, W, C) -> (N, C).

    Example::

        features = GlobalAvgPooling('gap', x)
    """
    fmt = C.data_format(data_format, "GlobalAvgPooling")
    x = tf.convert_to_tensor(x)
    rank = C.static_rank(x, "GlobalAvgPooling")
    if rank < 3:
        raise ValueError(f"GlobalAvgPooling needs an input with spatial axes, got shape {x.shape}.")
    axes = list(range(2, rank)) if fmt == "channels_first" else list(range(1, rank - 1))
    return tf.reduce_mean(x, axis=axes, name="output")
