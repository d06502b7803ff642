"""tensorpack's ``models.utils``: ``VariableHolder`` (defined in ``models/registry.py``) and
``disable_autograph`` (a decorator that keeps AutoGraph from rewriting a function, e.g. an
activation given to a Keras layer).

Example::

    @disable_autograph()
    def BNReLU6(x, name=None):
        return tf.nn.relu6(BatchNorm('bn', x), name=name)
"""
import tensorflow as tf

from .registry import VariableHolder  # noqa: F401


def disable_autograph(func=None):
    """``tf.autograph.experimental.do_not_convert``: ``disable_autograph()`` is a decorator, and
    ``disable_autograph(f)`` the function ``f`` that runs as written, never converted by AutoGraph."""
    return tf.autograph.experimental.do_not_convert(func)
