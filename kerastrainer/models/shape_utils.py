"""Shapes known statically where possible and dynamically otherwise, at tensorpack's path
(``tensorpack.models.shape_utils``): a layer computes an output shape axis by axis, keeping Python
ints where the input's are known and falling back to ``tf.shape`` where they are not.

Example::

    shape = StaticDynamicShape(x)            # x: [None, 3, None, 10]
    shape.apply(1, lambda d: d * 3)          # static 9
    shape.apply(2, lambda d: d + 5)          # unknown: computed from tf.shape(x)[2] when asked
    shape.get_static()                       # [None, 9, None, 10]
    out = tf.reshape(y, shape.get_dynamic()) # a mix of ints and scalar tensors
"""
from __future__ import annotations

from typing import Callable, List, Optional

import tensorflow as tf

__all__ = []   # as tensorpack's: imported by path


class StaticDynamicAxis:
    """One axis: its static size (an int, or None) and its dynamic one (an int or a tensor)."""

    def __init__(self, static, dynamic):
        self.static = static
        self.dynamic = dynamic

    def apply(self, f: Callable) -> "StaticDynamicAxis":
        """The axis after ``f``: computed on the static size when ``f`` takes it (a TypeError, e.g.
        from None, says it does not), else on the dynamic one."""
        try:
            value = f(self.static)
        except TypeError:
            return StaticDynamicAxis(None, f(self.dynamic))
        return StaticDynamicAxis(value, value)

    def __str__(self):
        return f"S={self.static}, D={self.dynamic}"


def DynamicLazyAxis(shape, idx: int) -> Callable:
    """A function giving ``shape[idx]`` (``shape``: the result of ``tf.shape``) when called."""
    return lambda: shape[idx]


def StaticLazyAxis(dim) -> Callable:
    """A function giving the known size ``dim`` when called."""
    return lambda: dim


class StaticDynamicShape:
    """The shape of ``tensor``, axis by axis: ``get_static()`` (ints, None where unknown) and
    ``get_dynamic()`` (ints where known, scalar tensors of ``tf.shape(tensor)`` elsewhere), kept in
    step through :meth:`apply`."""

    def __init__(self, tensor):
        if not tf.is_tensor(tensor):
            raise TypeError(f"StaticDynamicShape takes a tensor; got {type(tensor).__name__}.")
        if tensor.shape.rank is None:
            raise ValueError("StaticDynamicShape needs a tensor of known rank.")
        self.static: List[Optional[int]] = tensor.shape.as_list()
        dynamic = None if tensor.shape.is_fully_defined() else tf.shape(tensor)
        self.dynamic: List[Callable] = [StaticLazyAxis(d) if d is not None else DynamicLazyAxis(dynamic, k)
                                        for k, d in enumerate(self.static)]

    def apply(self, axis: int, f: Callable) -> None:
        """Replace axis ``axis`` by ``f`` of it: statically when it is known and ``f`` takes an int,
        else lazily on its dynamic size."""
        if self.static[axis] is not None:
            try:
                value = f(self.static[axis])
            except TypeError:
                pass
            else:
                self.static[axis] = value
                self.dynamic[axis] = StaticLazyAxis(value)
                return
        self.static[axis] = None
        before = self.dynamic[axis]
        self.dynamic[axis] = lambda: f(before())

    def get_static(self) -> List[Optional[int]]:
        return self.static

    @property
    def ndims(self) -> int:
        return len(self.static)

    def get_dynamic(self, axis: Optional[int] = None):
        """Every axis (a list), or axis ``axis``: ints where known, scalar tensors elsewhere."""
        if axis is None:
            return [d() for d in self.dynamic]
        return self.dynamic[axis]()
