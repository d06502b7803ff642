"""Nonlinearities: ``PReLU`` (tensorpack's scalar-alpha form) and ``Maxout``.

``BNReLU`` lives in :mod:`kerastrainer.models.batch_norm`.

Example::

    x = PReLU('prelu', x)          # variable 'prelu/alpha', a scalar
"""
from __future__ import annotations

import tensorflow as tf

from ..tfutils.tower import get_variable
from . import _common as C
from .batch_norm import BNReLU  # tensorpack's path of BNReLU (defined beside BatchNorm)
from .registry import layer_register

__all__ = ["PReLU", "Maxout", "BNReLU"]


@layer_register(log_shape=False)
def PReLU(x, init: float = 0.001):
    """Parametric ReLU with one learned slope ``alpha`` for the negative part.

    ``y = x`` for x > 0, ``alpha * x`` otherwise.

    Example::

        y = PReLU('prelu', x, init=0.25)
    """
    alpha = get_variable("alpha", shape=[], initializer=tf.constant_initializer(float(init)))
    x = tf.convert_to_tensor(x)
    a = tf.cast(alpha, x.dtype)
    return C.output(0.5 * ((1 + a) * x + (1 - a) * tf.abs(x)))


@layer_register(log_shape=True, use_scope=None)
def Maxout(x, num_unit: int):
    """Maxout (Goodfellow et al. 2013): the max over groups of ``num_unit`` channels.

    ``x`` is NHWC or NC with a known channel count divisible by ``num_unit``; the output
    has ``C / num_unit`` channels.

    Example::

        y = Maxout('maxout', x, 4)      # (N, H, W, 64) -> (N, H, W, 16)
    """
    x = tf.convert_to_tensor(x)
    shape = x.shape.as_list()
    if len(shape) not in (2, 4):
        raise ValueError(f"Maxout needs an NHWC or NC input, got shape {shape}.")
    ch = shape[-1]
    if ch is None or ch % int(num_unit) != 0:
        raise ValueError(f"Maxout: the channel count {ch} must be known and divisible by num_unit={num_unit}.")
    dyn = tf.shape(x)
    new = [dyn[i] for i in range(len(shape) - 1)] + [ch // int(num_unit), int(num_unit)]
    return tf.reduce_max(tf.reshape(x, tf.stack(new)), axis=len(shape), name="output")
