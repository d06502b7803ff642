"""Pooling layers: ``MaxPooling``, ``AvgPooling``, ``GlobalAvgPooling``, ``FixedUnPooling``.

They hold no variables, so they run TF ops directly (nothing is added to the layer
store). ``channels_first`` pools NCHW on GPUs and NHWC between two transposes on CPUs.

Example::

    x = MaxPooling('pool0', x, 3, strides=2, padding='same')
    x = AvgPooling('pool1', x, 2)                   # strides default to pool_size
    features = GlobalAvgPooling('gap', x)          # (N, C)
"""
from __future__ import annotations

from typing import Sequence, Union

import numpy as np
import tensorflow as tf

from . import _common as C
from .registry import layer_register, legacy_names

__all__ = ["MaxPooling", "AvgPooling", "GlobalAvgPooling", "FixedUnPooling"]


def _pool(kind: str, layer: str, inputs, pool_size, strides, padding, data_format):
    fmt = C.data_format(data_format, layer)
    size = C.pair(pool_size, "pool_size (tensorpack: shape)", layer)
    stride = size if strides is None else C.pair(strides, "strides", layer)
    fn = tf.nn.max_pool2d if kind == "max" else tf.nn.avg_pool2d
    pad = C.padding(padding, layer).upper()
    if fmt == "channels_first" and not C.nchw_kernels_here(inputs):   # no NCHW kernel here: transpose
        return C.output(C.to_nchw(fn(C.to_nhwc(inputs), size, stride, pad, data_format="NHWC")))
    out = fn(inputs, size, stride, pad, data_format="NCHW" if fmt == "channels_first" else "NHWC")
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


@layer_register(log_shape=True)
def FixedUnPooling(x, shape: Union[int, Sequence[int]], unpool_mat=None, data_format: str = "channels_last"):
    """Unpool by a Kronecker product with a fixed ``shape`` matrix (tensorpack's layer).

    Each input pixel becomes a ``shape`` block: the pixel times ``unpool_mat``; by default
    the pixel in the block's top-left corner and zeros elsewhere.

    Example::

        y = FixedUnPooling('unpool', x, 2)        # (N, H, W, C) -> (N, 2H, 2W, C)
    """
    fmt = C.data_format(data_format, "FixedUnPooling")
    sh, sw = C.pair(shape, "shape", "FixedUnPooling")
    x = tf.convert_to_tensor(x)
    if C.static_rank(x, "FixedUnPooling") != 4:
        raise ValueError(f"FixedUnPooling needs a 4-D input, got shape {x.shape}.")
    if unpool_mat is None:
        mat = np.zeros((sh, sw), dtype=x.dtype.as_numpy_dtype)
        mat[0, 0] = 1
        unpool_mat = mat
    mat = tf.cast(tf.convert_to_tensor(unpool_mat), x.dtype)
    if mat.shape.as_list() != [sh, sw]:
        raise ValueError(f"FixedUnPooling: unpool_mat has shape {mat.shape.as_list()}, not shape={[sh, sw]}.")
    if fmt == "channels_first":
        x = tf.transpose(x, [0, 2, 3, 1])
    # (N, H, 1, W, 1, C) * (1, 1, sh, 1, sw, 1) -> (N, H, sh, W, sw, C) -> (N, H*sh, W*sw, C)
    blocks = x[:, :, None, :, None, :] * mat[None, None, :, None, :, None]
    dyn = tf.shape(x)
    out = tf.reshape(blocks, tf.stack([dyn[0], dyn[1] * sh, dyn[2] * sw, dyn[3]]))
    static = x.shape.as_list()
    out.set_shape([static[0], None if static[1] is None else static[1] * sh,
                   None if static[2] is None else static[2] * sw, static[3]])
    if fmt == "channels_first":
        out = tf.transpose(out, [0, 3, 1, 2])
    return C.output(out)
