"""``Dropout``: active only in training towers.

Example::

    x = Dropout('drop', x, rate=0.3)        # or Dropout(x, rate=0.3), or keep_prob=0.7
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from ..tfutils.tower import get_current_tower_context
from .registry import layer_register

__all__ = ["Dropout"]


@layer_register(log_shape=False, use_scope=None)
def Dropout(x, *args, rate: Optional[float] = None, keep_prob: Optional[float] = None,
            training: Optional[bool] = None, noise_shape=None, seed: Optional[int] = None,
            is_training: Optional[bool] = None):
    """Randomly zero a fraction ``rate`` of the inputs (scaling the rest by ``1/(1-rate)``).

    Accepts ``Dropout('name', x, ...)`` or ``Dropout(x, ...)``. Give either ``rate``
    (Keras) or ``keep_prob`` (tensorpack's old name, ``rate = 1 - keep_prob``); the
    default is 0.5. A bare positional number is ambiguous between the two (tensorpack
    reads it as keep_prob), so only 0.5 is accepted that way. ``training=None`` follows
    the tower context; outside a tower Dropout is the identity.

    Example::

        x = Dropout('drop', x, rate=0.1)
    """
    if is_training is not None:
        if training is not None:
            raise TypeError("Dropout: pass training or is_training, not both.")
        training = is_training
    if args:
        if len(args) > 1 or float(args[0]) != 0.5:
            raise TypeError(
                f"Dropout: a positional rate/keep_prob {args!r} is ambiguous (tensorpack reads it "
                "as keep_prob, Keras as rate). Pass rate=... or keep_prob=... by keyword.")
        rate = 0.5 if rate is None and keep_prob is None else rate
    if rate is not None and keep_prob is not None:
        raise TypeError("Dropout: pass rate or keep_prob, not both.")
    if keep_prob is not None:
        rate = 1.0 - float(keep_prob)
    rate = 0.5 if rate is None else rate
    if not tf.is_tensor(rate) and not 0.0 <= float(rate) < 1.0:
        raise ValueError(f"Dropout: rate must be in [0, 1), got {rate!r}.")
    if training is None:
        ctx = get_current_tower_context()
        training = ctx is not None and ctx.is_training
    x = tf.convert_to_tensor(x)
    if not training:
        return tf.identity(x, name="output")
    return tf.nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed, name="output")
