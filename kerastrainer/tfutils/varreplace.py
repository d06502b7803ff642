"""tensorpack's ``tfutils.varreplace``: TF1 custom getters over the variables a scope reads.

Each context puts a custom getter on the current TF1 variable scope (no new name scope), as
tensorpack did. Inside it, every weight a layer reads goes through the getter: kerastrainer's
registered layers, ``tf.compat.v1.layers`` and ``tf.compat.v1.get_variable``
(``tfutils/custom_getters.py`` says how the getter reaches Keras 3 weights).

Example::

    with remap_variables(lambda v: tf.round(v * 4.) / 4. if v.op.name.endswith('/W') else v):
        x = Conv2D('conv1', x, 64, 3)          # computes with the quantized conv1/W
    with freeze_variables(stop_gradient=False, skip_collection=True):
        x = FullyConnected('fc0', x, 10)        # fc0/W and fc0/b are not trained
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import tensorflow as tf

__all__ = ["custom_getter_scope", "remap_variables", "freeze_variables"]


@contextmanager
def custom_getter_scope(custom_getter: Callable) -> Iterator[None]:
    """The current variable scope with ``custom_getter`` added (composed with the scope's own
    getter as TF1 composes nested ones); the name scope is left as it is.

    ``custom_getter(getter, name, *args, **kwargs)`` is called for every weight read in the scope
    with its full TF1 name (``'conv0/W'``); what it returns is what the layer computes with.

    Example::

        def scale(getter, name, *args, **kwargs):
            return getter(name, *args, **kwargs) * 0.5
        with custom_getter_scope(scale):
            y = FullyConnected('fc', x, 10)      # computes with fc/W * 0.5 and fc/b * 0.5
    """
    if not callable(custom_getter):
        raise TypeError(f"custom_getter_scope: the custom getter must be callable "
                        f"(getter, name, *args, **kwargs) -> variable or tensor; got {type(custom_getter).__name__}.")
    scope = tf.compat.v1.get_variable_scope()
    with tf.compat.v1.variable_scope(scope, custom_getter=custom_getter, auxiliary_name_scope=False):
        yield


def remap_variables(fn: Callable) -> "contextmanager":
    """A context where every variable read is replaced by ``fn(variable)``.

    ``fn`` gets each variable (``v.op.name`` is its TF1 name, ``'fc/W'``) and returns the tensor
    the layer computes with, every step; the variable itself is still the one trained, through
    ``fn``'s gradient.

    Example::

        with remap_variables(lambda v: quantize(v) if v.op.name.endswith('W') else v):
            x = FullyConnected('fc', x, 1000)    # fc/W is quantized, fc/b is not
    """
    if not callable(fn):
        raise TypeError(f"remap_variables: fn must be callable (variable -> tensor); got {type(fn).__name__}.")

    def remapping_getter(getter, *args, **kwargs):
        return fn(getter(*args, **kwargs))
    return custom_getter_scope(remapping_getter)


def freeze_variables(stop_gradient: bool = True, skip_collection: bool = False) -> "contextmanager":
    """A context that freezes the variables read in it, as tensorpack's.

    Args:
        stop_gradient: layers see ``tf.stop_gradient(variable)``: no gradient reaches a trainable
            variable through its uses in the scope (the layer's input still gets its gradient).
            Uses of the variable elsewhere (weight decay by name, a reuse outside the scope) still
            give it gradients, as in tensorpack.
        skip_collection: a trainable variable *created* in the scope is made non-trainable: the
            trainer leaves it out of the trained variables (TF1: out of ``TRAINABLE_VARIABLES``).
            It is still saved and restored. A variable created before, outside the scope, keeps
            its trainability, as in TF1.

    Example::

        with freeze_variables(stop_gradient=False, skip_collection=True):
            x = FullyConnected('fc', x, 1000)    # fc/* are not trained
    """
    def freezing_getter(getter, *args, **kwargs):
        trainable = kwargs.get("trainable", True)
        if skip_collection:
            kwargs["trainable"] = False
        var = getter(*args, **kwargs)
        if trainable and stop_gradient:
            var = tf.stop_gradient(var)
        return var
    return custom_getter_scope(freezing_getter)
