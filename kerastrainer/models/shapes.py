"""Shape helpers usable as layers: ``ConcatWith``.

Example::

    y = ConcatWith(x, [a, b], 3)      # tf.concat([x, a, b], 3)
"""
from __future__ import annotations

import tensorflow as tf

from .registry import layer_register

__all__ = ["ConcatWith"]


@layer_register(log_shape=False, use_scope=None)
def ConcatWith(x, tensor, dim: int):
    """Concatenate ``x`` with a tensor or a list of tensors along ``dim`` (x first).

    Handy in ``LinearWrap`` chains: ``LinearWrap(x).ConcatWith(skip, 3)``.

    Example::

        y = ConcatWith(x, skip, -1)
    """
    tensors = list(tensor) if isinstance(tensor, (list, tuple)) else [tensor]
    return tf.concat([x] + tensors, dim, name="output")
