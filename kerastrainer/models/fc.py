"""``FullyConnected``: a dense layer that flattens its input first, as in tensorpack.

Variables: ``<name>/W`` (in, units) and ``<name>/b``.

Example::

    logits = FullyConnected('linear', features, 10)
    hidden = FullyConnected('fc0', image, 512, activation=tf.nn.relu)   # image is flattened
"""
from __future__ import annotations

from typing import Callable, Optional, Union

import keras
import numpy as np
import tensorflow as tf

from . import _common as C
from .conv2d import default_kernel_initializer
from .registry import get_layer_here, layer_register, legacy_names

__all__ = ["FullyConnected", "batch_flatten"]


def batch_flatten(x):
    """Flatten every dimension but the first: (N, ...) -> (N, prod(...)).

    Example::

        batch_flatten(tf.zeros([2, 3, 4])).shape    # (2, 12)
    """
    x = tf.convert_to_tensor(x)
    rest = x.shape[1:]
    if rest.is_fully_defined():
        return tf.reshape(x, [-1, int(np.prod(rest.as_list()))])
    return tf.reshape(x, tf.stack([tf.shape(x)[0], -1]))


@layer_register(log_shape=True)
@legacy_names(out_dim="units", nl="activation", W_init="kernel_initializer", b_init="bias_initializer")
def FullyConnected(inputs, units: Optional[int] = None, activation: Optional[Union[str, Callable]] = None,
                   use_bias: bool = True, kernel_initializer=None, bias_initializer="zeros",
                   kernel_regularizer=None, bias_regularizer=None):
    """Dense layer on the flattened input. tensorpack's ``out_dim``, ``nl``, ``W_init``,
    ``b_init`` are accepted too.

    Example::

        y = FullyConnected('fc', x, 10, activation='relu')
    """
    if units is None:
        raise TypeError("FullyConnected: units (tensorpack: out_dim) is required, "
                        "e.g. FullyConnected('fc', x, 10).")
    x = tf.convert_to_tensor(inputs)
    if x.shape.rank is not None and x.shape.rank > 2:
        x = batch_flatten(x)
    layer = get_layer_here(lambda kname: keras.layers.Dense(
        int(units), use_bias=use_bias,
        kernel_initializer=C.initializer(kernel_initializer, default_kernel_initializer()),
        bias_initializer=C.initializer(bias_initializer, "zeros"),
        kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer, name=kname),
        {"kernel": "W", "bias": "b"})
    return C.output(C.apply_activation(layer(x), activation))
