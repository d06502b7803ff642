"""Nonlinearities with parameters: ``PReLU`` (tensorpack's scalar-alpha form).

``BNReLU`` lives in :mod:`kerastrainer.models.batch_norm`.

Example::

    x = PReLU('prelu', x)          # variable 'prelu/alpha', a scalar
"""
from __future__ import annotations

import tensorflow as tf

from ..tfutils.layer_store import get_variable
from . import _common as C
from .registry import layer_register

__all__ = ["PReLU"]


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
