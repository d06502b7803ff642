"""``LinearWrap``: write a chain of layers without repeating the tensor.

Every registered layer is a method; the wrapped tensor is passed as its input.
``.apply(func, *args)`` calls any function, ``.tf.<module>.<op>(...)`` any TF op,
and calling the wrapper returns the tensor.

Example::

    logits = (LinearWrap(image)
              .Conv2D('conv0', 32, 3, activation=tf.nn.relu)
              .MaxPooling('pool0', 2)
              .tf.nn.dropout(0.1)
              .FullyConnected('fc', 10)())
"""
from __future__ import annotations

from types import ModuleType
from typing import Callable

import tensorflow as tf

from .registry import get_registered_layer

__all__ = ["LinearWrap"]


class _TFChain:
    """``LinearWrap(x).tf.nn.relu()``: walk a module path, then call the op on the tensor.

    A name TF2 dropped is looked up at the same path of ``tf.compat.v1``: tensorpack's programs
    were written for TF1's ``tf`` (``.tf.image.resize_nearest_neighbor([16, 16])`` in BEGAN)."""

    def __init__(self, obj, tensor, path: str, v1=None):
        self._obj = obj
        self._t = tensor
        self._path = path
        self._v1 = v1

    def __getattr__(self, name: str):
        attr = getattr(self._obj, name, None)
        v1 = getattr(self._v1, name, None) if self._v1 is not None else None
        if attr is None:
            attr = v1
        if attr is None:
            raise AttributeError(f"LinearWrap: {self._path}.{name} does not exist (in TF2's tf nor in "
                                 "tf.compat.v1).")
        path = f"{self._path}.{name}"
        if isinstance(attr, ModuleType) or (v1 is not None and isinstance(v1, ModuleType)):
            return _TFChain(attr, self._t, path, v1 if isinstance(v1, ModuleType) else None)
        if not callable(attr):
            raise AttributeError(f"LinearWrap: {path} is neither a module nor a function.")

        def call(*args, **kwargs):
            return LinearWrap(attr(self._t, *args, **kwargs))
        return call


class LinearWrap:
    """A tensor with every registered layer as a chainable method.

    Layers registered with a scope take the name first: ``.Conv2D('c0', 32, 3)``;
    scope-less ones take only their arguments: ``.ConcatWith(skip, 3)``.

    Example::

        out = LinearWrap(x).Conv2D('c0', 32, 3).BNReLU('bnrelu').GlobalAvgPooling('gap')()
    """

    def __init__(self, tensor):
        self._t = tensor

    def __getattr__(self, layer_name: str):
        if layer_name.startswith("__"):
            raise AttributeError(layer_name)
        if layer_name == "tf":
            return _TFChain(tf, self._t, "tf", tf.compat.v1)
        layer = get_registered_layer(layer_name)
        if layer is None:
            raise AttributeError(
                f"LinearWrap: {layer_name!r} is not a registered layer. Use .apply(func, ...) for "
                "other functions, or .tf.<module>.<op>(...) for TensorFlow ops.")
        if layer.use_scope is True:
            def call(name, *args, **kwargs):
                return LinearWrap(layer(name, self._t, *args, **kwargs))
        else:
            def call(*args, **kwargs):
                if args and isinstance(args[0], str):
                    return LinearWrap(layer(args[0], self._t, *args[1:], **kwargs))
                return LinearWrap(layer(self._t, *args, **kwargs))
        return call

    def apply(self, func: Callable, *args, **kwargs) -> "LinearWrap":
        """``func(tensor, *args, **kwargs)``, wrapped."""
        return LinearWrap(func(self._t, *args, **kwargs))

    def apply2(self, func: Callable, *args, **kwargs) -> "LinearWrap":
        """``func(args[0], tensor, *args[1:], **kwargs)``: for layers called with a name first."""
        return LinearWrap(func(args[0], self._t, *args[1:], **kwargs))

    def __call__(self):
        """The wrapped tensor."""
        return self._t

    def tensor(self):
        """The wrapped tensor."""
        return self._t

    def print_tensor(self) -> "LinearWrap":
        """Print the tensor (its shape at trace time) and continue the chain."""
        print(self._t)
        return self

    def __repr__(self):
        return f"LinearWrap({self._t!r})"
