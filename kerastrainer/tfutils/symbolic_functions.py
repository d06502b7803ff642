"""Small tensor functions of ``tensorpack.tfutils.symbolic_functions``.

Example::

    cost = rms(prediction - target, name='rms_error')
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

__all__ = ["print_stat", "rms"]


def print_stat(x, message: Optional[str] = None):
    """``x``, printing its shape, mean and RMS each time it is computed (``tf.print``)."""
    message = message or x.op.name if hasattr(x, "op") else (message or "")
    with tf.control_dependencies([tf.print(message, tf.shape(x), tf.reduce_mean(x),
                                           tf.sqrt(tf.reduce_mean(tf.square(x))), summarize=-1)]):
        return tf.identity(x)


def rms(x, name: Optional[str] = None):
    """Root mean square of all elements of ``x``."""
    with tf.name_scope(name or "rms"):
        return tf.sqrt(tf.reduce_mean(tf.square(x)), name=name)
